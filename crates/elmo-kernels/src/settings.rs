//! Which custom kernels run, and in which precision the large products of inference run on a
//! GPU: [`KernelSettings`], a typed value that a model or a training step carries (no environment
//! variable steers the library), every kernel on by default where it can run, products in `f32`.
//! The switches exist so that one program can measure a kernel against burn's operations.

use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::Precision;

/// Which of this crate's kernels run on a CubeCL device. They run only where the tensor's
/// primitive is a `CubeTensor`: this crate built with its `cubecl` feature, a CubeCL device
/// (wgpu, CUDA, ...), and burn's `fusion` off (with fusion the primitives are fusion tensors and
/// burn's operations run: see [`KernelSettings::run_on`]). Everywhere else burn's composed
/// operations run, with the same results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelSettings {
    /// The fused kernels: LSTM cells, row reductions, Adagrad, the gradient norm, index adds as
    /// scatters. Off: burn's operations.
    pub fused: bool,
    /// With `fused`: per-step products split along their inner dimension and weight gradients
    /// over their rows (split-K, `split_product.rs`). Off: whole products.
    pub split_products: bool,
    /// With `fused`: a biLM layer's two directions as one group on their rows stacked. Off: one
    /// after the other.
    pub paired_directions: bool,
    /// The LSTMP forward pass of inference (no autodiff) on a CPU device as one host loop
    /// ([`crate::HostLstm`]: weights packed once per call, one fused pass per cell). Off:
    /// burn's operations, step by step.
    pub host_recurrence: bool,
    /// With `fused`: the large `f32` products on a CubeCL device through the cubek kernel that
    /// suits their shape ([`crate::product`]). Off: burn's choice.
    pub shaped_matmul: bool,
    /// The precision of the large products of inference on a GPU ([`Precision`]; `F32` by
    /// default, as AllenNLP).
    pub precision: Precision,
}

impl Default for KernelSettings {
    fn default() -> Self {
        Self::ALL
    }
}

impl KernelSettings {
    /// Every kernel where it can run (the default).
    pub const ALL: Self = Self {
        fused: true,
        split_products: true,
        paired_directions: true,
        host_recurrence: true,
        shaped_matmul: true,
        precision: Precision::F32,
    };

    /// burn's operations only.
    pub const COMPOSED: Self = Self {
        fused: false,
        split_products: false,
        paired_directions: false,
        host_recurrence: false,
        shaped_matmul: false,
        precision: Precision::F32,
    };

    /// Whether the fused kernels run on `tensor`: `fused` and a `CubeTensor` primitive.
    pub fn fused_for<const D: usize>(&self, tensor: &Tensor<D>) -> bool {
        self.fused && on_cube_device(tensor)
    }

    /// Whether products on `tensor` are split: [`Self::fused_for`] and `split_products`.
    pub fn split_for<const D: usize>(&self, tensor: &Tensor<D>) -> bool {
        self.split_products && self.fused_for(tensor)
    }

    /// Whether the two directions run as one group on `tensor`: [`Self::fused_for`] and
    /// `paired_directions`.
    pub fn paired_for<const D: usize>(&self, tensor: &Tensor<D>) -> bool {
        self.paired_directions && self.fused_for(tensor)
    }

    /// Whether the fused kernels run on `device` (a one-element probe): false on a CPU backend,
    /// without this crate's `cubecl` feature, with burn's `fusion`, or with `fused` off. For an
    /// application to say so when a GPU run will use burn's operations.
    pub fn run_on(&self, device: &Device) -> bool {
        self.fused && cube_device(device)
    }
}

/// Whether `device` is a CubeCL device (a one-element probe; always false without the `cubecl`
/// feature).
pub(crate) fn cube_device(device: &Device) -> bool {
    on_cube_device(&Tensor::<1>::zeros([1], device))
}

/// Whether `tensor`'s primitive is a `CubeTensor` (always false without the `cubecl` feature).
#[cfg(feature = "cubecl")]
fn on_cube_device<const D: usize>(tensor: &Tensor<D>) -> bool {
    crate::cube_tensor::cube_primitive(tensor).is_some()
}

/// Whether `tensor`'s primitive is a `CubeTensor` (always false without the `cubecl` feature).
#[cfg(not(feature = "cubecl"))]
fn on_cube_device<const D: usize>(_tensor: &Tensor<D>) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_kernel_runs_on_a_cpu_or_when_switched_off() {
        let device = Device::flex();
        let x = Tensor::<1>::zeros([3], &device);
        let on = KernelSettings::default();
        assert!(!on.fused_for(&x) && !on.split_for(&x) && !on.paired_for(&x));
        assert!(!on.run_on(&device));
        if let Some(gpu) = elmo_test_support::wgpu_device_or_skip("kernel_settings") {
            let y = Tensor::<1>::zeros([3], &gpu);
            assert_eq!(on.fused_for(&y), cfg!(feature = "cubecl"));
            assert!(!KernelSettings::COMPOSED.fused_for(&y));
            let apart = KernelSettings {
                paired_directions: false,
                ..on
            };
            assert!(!apart.paired_for(&y));
            assert_eq!(apart.split_for(&y), cfg!(feature = "cubecl"));
        }
    }

    #[test]
    fn settings_missing_from_a_file_take_their_defaults() {
        let read: KernelSettings =
            serde_json::from_str(r#"{"split_products": false}"#).expect("valid JSON");
        assert_eq!(
            read,
            KernelSettings {
                split_products: false,
                ..KernelSettings::default()
            }
        );
    }
}
