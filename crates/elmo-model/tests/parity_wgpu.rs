//! Tiny-shape parity on wgpu (in CI through Mesa's lavapipe software Vulkan): the `main` batch of
//! `fixtures/tiny` through the whole model, compared with AllenNLP within 1e-5.
//!
//! Without any Vulkan/Metal/DX12 adapter the test reports that it could not run, unless
//! `ELMO_REQUIRE_WGPU=1` (set by `.ci/run`) makes a missing adapter a failure.

mod common;

use burn::tensor::{Device, DeviceKind, Tensor};
use common::*;
use elmo_model::ElmoConfig;

fn wgpu_device() -> Option<Device> {
    let probe = std::panic::catch_unwind(|| {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let x = Tensor::<1>::from_floats([1.0, 2.0], &device);
        let sum = x.sum().into_scalar::<f32>();
        (device, sum)
    });
    match probe {
        Ok((device, 3.0)) => Some(device),
        _ => None,
    }
}

#[test]
fn tiny_main_batch_matches_allennlp_on_wgpu() {
    let Some(device) = wgpu_device() else {
        assert!(
            std::env::var("ELMO_REQUIRE_WGPU").is_err(),
            "ELMO_REQUIRE_WGPU is set but no wgpu adapter could be opened"
        );
        eprintln!(
            "no wgpu adapter on this machine (install a Vulkan driver, e.g. mesa-vulkan-drivers): not run"
        );
        return;
    };
    let elmo = ElmoConfig::default()
        .from_pretrained(
            fixture("tiny/options.json"),
            fixture("tiny/weights.hdf5"),
            &device,
        )
        .expect("load");
    let out = elmo.forward_sentences(&tiny_sentences("main"), &device);
    for (i, layer) in out.bilm.layers.iter().enumerate() {
        let file = format!("tiny/main/bilm_layer{i}.npy");
        assert_close(&format!("wgpu layer {i}"), layer, &npy(&file), 1e-5, None);
    }
    assert_close(
        "wgpu elmo",
        &out.representations[0],
        &npy("tiny/main/elmo.npy"),
        1e-5,
        None,
    );
}
