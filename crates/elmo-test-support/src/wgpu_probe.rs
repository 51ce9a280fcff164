//! A wgpu device for tests when an adapter can be opened (in CI, Mesa's lavapipe software
//! Vulkan), shared by the wgpu tests of every crate.
//!
//! Without an adapter a test reports that it could not run, unless `ELMO_REQUIRE_WGPU=1` (set by
//! `.ci/run`) makes a missing adapter a failure.

use burn::tensor::{Device, DeviceKind, FloatDType, Tensor};

/// The default wgpu device if it opens and computes `1 + 2`; `None` (after saying so) when there
/// is no adapter. Panics without one if `ELMO_REQUIRE_WGPU` is set.
pub fn wgpu_device_or_skip(test: &str) -> Option<Device> {
    let probe = std::panic::catch_unwind(|| {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        let x = Tensor::<1>::from_floats([1.0, 2.0], &device);
        let sum = x.sum().into_scalar::<f32>();
        (device, sum)
    });
    match probe {
        Ok((device, 3.0)) => Some(device),
        _ => {
            assert!(
                std::env::var("ELMO_REQUIRE_WGPU").is_err(),
                "ELMO_REQUIRE_WGPU is set but no wgpu adapter could be opened"
            );
            eprintln!(
                "{test}: no wgpu adapter on this machine (install a Vulkan driver, e.g. \
                 mesa-vulkan-drivers): not run"
            );
            None
        }
    }
}

/// The wgpu device of [`wgpu_device_or_skip`] where it has 16-bit float arithmetic (`f16` or
/// `bf16`, as `--precision mixed` needs on a GPU); `None` (after saying so) where it has none
/// (wgpu on OpenGL, where a machine has no Vulkan driver). Panics without one if
/// `ELMO_REQUIRE_WGPU` is set (CI's lavapipe has `f16`).
pub fn wgpu_sixteen_bit_device_or_skip(test: &str) -> Option<Device> {
    let device = wgpu_device_or_skip(test)?;
    if sixteen_bit_floats(&device) {
        return Some(device);
    }
    assert!(
        std::env::var("ELMO_REQUIRE_WGPU").is_err(),
        "ELMO_REQUIRE_WGPU is set but the wgpu adapter has no 16-bit floats"
    );
    eprintln!("{test}: the wgpu adapter has no 16-bit floats (wgpu on OpenGL?): not run");
    None
}

/// Whether `device` has 16-bit float arithmetic (`f16` or `bf16`), the types elmo-kernels'
/// `Precision::half_for` looks for: lavapipe has `f16`; wgpu on OpenGL has neither.
pub fn sixteen_bit_floats(device: &Device) -> bool {
    [FloatDType::F16, FloatDType::BF16]
        .into_iter()
        .any(|dtype| device.supports_dtype(dtype))
}

/// flex, then the wgpu device where [`wgpu_device_or_skip`] opens one: the devices of a test
/// that checks a CubeCL path against the CPU's.
pub fn flex_and_wgpu(test: &str) -> Vec<Device> {
    let mut devices = vec![Device::flex()];
    devices.extend(wgpu_device_or_skip(test));
    devices
}
