//! The precision of the large matrix products: `f32` throughout (the default, AllenNLP's), or
//! mixed (the products' operands in 16-bit floats, their results and everything else in `f32`),
//! as mixed-precision inference does on GPUs with tensor cores (Micikevicius et al. 2018, "Mixed
//! Precision Training": half-precision operands, single-precision accumulation and state).
//!
//! burn runs a half-precision product on a CubeCL device with the `vulkan` (SPIR-V) compiler
//! through cooperative-matrix kernels where the driver offers them (tensor cores); with WGSL,
//! or on a CPU, half precision buys nothing, and [`Precision::half_for`] keeps `f32` there
//! unless the device computes in 16-bit floats.

use burn::tensor::{Device, FloatDType};
use serde::{Deserialize, Serialize};

/// The precision of the large products (char CNN, highways, projections, the LSTM's products).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Every product in `f32` (parity with AllenNLP).
    #[default]
    F32,
    /// The products' operands in `f16` (`bf16` where the device has no `f16` arithmetic),
    /// results and state in `f32`; on a CubeCL device without autodiff only.
    Mixed,
}

impl Precision {
    /// The 16-bit type that products on `device` use: `None` for [`Precision::F32`], on a
    /// device that is not a CubeCL device, under autodiff (training keeps `f32` products), or
    /// without 16-bit float arithmetic.
    pub fn half_for(self, device: &Device) -> Option<FloatDType> {
        if self == Self::F32 || device.is_autodiff() || !crate::settings::cube_device(device) {
            return None;
        }
        [FloatDType::F16, FloatDType::BF16]
            .into_iter()
            .find(|&dtype| device.supports_dtype(dtype))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, Tensor};

    use crate::{KernelSettings, product};

    #[test]
    fn mixed_precision_runs_only_on_a_gpu() {
        let cpu = Device::flex();
        assert_eq!(Precision::Mixed.half_for(&cpu), None);
        assert_eq!(Precision::F32.half_for(&cpu), None);
        let Some(gpu) =
            elmo_test_support::wgpu_device_or_skip("mixed_precision_runs_only_on_a_gpu")
        else {
            return;
        };
        assert_eq!(Precision::F32.half_for(&gpu), None);
        assert_eq!(Precision::Mixed.half_for(&gpu.clone().autodiff()), None);
        let half = Precision::Mixed.half_for(&gpu);
        if cfg!(feature = "cubecl") {
            assert!(half.is_some(), "lavapipe computes in f16");
        }
        // A product in half precision: within f16's rounding of the f32 product.
        let lhs = Tensor::<2>::random([33, 300], Distribution::Normal(0.0, 1.0), &gpu);
        let rhs = Tensor::<2>::random([300, 40], Distribution::Normal(0.0, 0.1), &gpu);
        let exact = lhs.clone().matmul(rhs.clone());
        let mixed = product(
            lhs,
            rhs,
            KernelSettings {
                precision: Precision::Mixed,
                ..KernelSettings::ALL
            },
        );
        let scale: f32 = exact.clone().abs().max().into_scalar();
        let error: f32 = (mixed - exact).abs().max().into_scalar();
        assert!(error <= 1e-2 * scale, "{error} of {scale}");
    }
}
