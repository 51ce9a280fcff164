//! Shared helpers of the parity tests: fixture paths, `.npy` reading, devices, comparisons.
#![allow(dead_code)]

use std::path::PathBuf;

use burn::tensor::{Device, Tensor};

/// A path under the repository's `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    elmo_test_support::fixture(rel)
}

pub use elmo_test_support::Array;

/// The array of a `.npy` fixture.
pub fn npy<T: elmo_test_support::NpyElement>(rel: &str) -> Array<T> {
    elmo_test_support::read_npy(&fixture(rel))
}

/// The CPU devices every parity test runs on.
#[allow(deprecated)]
pub fn cpu_devices() -> Vec<(&'static str, Device)> {
    vec![("flex", Device::flex()), ("ndarray", Device::ndarray())]
}

/// The CPU devices and, where an adapter opens (lavapipe in CI), wgpu: there the LSTM runs the
/// fused inference kernels, its two directions paired.
pub fn cpu_and_wgpu_devices(test: &str) -> Vec<(&'static str, Device)> {
    let mut devices = cpu_devices();
    devices.extend(elmo_test_support::wgpu_device_or_skip(test).map(|d| ("wgpu", d)));
    devices
}

/// Values and shape of a 3-d float tensor.
pub fn values3(t: &Tensor<3>) -> (Vec<usize>, Vec<f32>) {
    let dims = t.dims().to_vec();
    let data = t.to_data().try_into_vec_as::<f32>().expect("f32 data");
    (dims, data)
}

/// Largest absolute difference between two 3-d float tensors of the same shape.
pub fn max_abs_diff3(a: &Tensor<3>, b: &Tensor<3>) -> f32 {
    let (shape_a, a) = values3(a);
    let (shape_b, b) = values3(b);
    assert_eq!(shape_a, shape_b, "shapes differ");
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max)
}

/// Values of a 2-d bool tensor.
pub fn bools2(t: &burn::tensor::Tensor<2, burn::tensor::Bool>) -> (Vec<usize>, Vec<bool>) {
    let dims = t.dims().to_vec();
    let data = t.to_data().try_into_vec_as::<bool>().expect("bool data");
    (dims, data)
}

/// Asserts `got` equals the fixture within `tol` (absolute), optionally only at the `[B, T]`
/// positions where `rows` is true. Returns the largest difference seen.
pub fn assert_close(
    name: &str,
    got: &Tensor<3>,
    expected: &Array<f32>,
    tol: f32,
    rows: Option<&[bool]>,
) -> f32 {
    let (shape, values) = values3(got);
    assert_eq!(shape, expected.shape, "{name}: shape");
    let width = shape[2];
    let mut worst = 0.0f32;
    for (i, (g, e)) in values.iter().zip(&expected.data).enumerate() {
        if let Some(rows) = rows
            && !rows[i / width]
        {
            continue;
        }
        let diff = (g - e).abs();
        assert!(
            diff.is_finite() && diff <= tol,
            "{name}: element {i} (row {}, col {}): got {g}, expected {e}, |diff| {diff} > {tol}",
            i / width,
            i % width
        );
        worst = worst.max(diff);
    }
    worst
}

/// The sentences of a batch of `fixtures/tiny/meta.json`.
pub fn tiny_sentences(batch: &str) -> Vec<Vec<String>> {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("tiny/meta.json")).expect("meta.json"),
    )
    .expect("json");
    serde_json::from_value(meta["batches"][batch].clone()).expect("batch")
}

/// The `fixtures/tiny` biLM (AllenNLP 2.10.1's seeded random model) on `device`.
pub fn tiny_bilm(device: &Device) -> elmo_model::BiLm {
    elmo_model::weights::load_bilm(
        fixture("tiny/options.json"),
        fixture("tiny/weights.hdf5"),
        device,
    )
    .expect("tiny weights load")
}
