//! The large matrix products (the char CNN's windows, the highways and projections, the LSTM's
//! input projection, the softmax's logits and weight gradient): in the precision that
//! [`crate::Precision`] asks for, and in `f32` on a CubeCL device through the cubek kernel that
//! suits the shape ([`kernel_for_shape`]) rather than burn's default choice.
//!
//! The choice comes from `bench_train --matmul-probe wgpu` on an H100 (WGSL, f32, issue 48):
//! burn's default kernel ran the softmax's logits `[419, 256]·[256, 10,002]` at 2.1 TFLOP/s,
//! its weight gradient `[10,002, 419]·[419, 256]` at 2.3 and the LSTM's `xᵀ·∂z` `[1,200,
//! 8,960]·[8,960, 4,800]` at 9.7, where `SimpleUnit` with its smallest tiles ran 7.8, 12.3 and
//! 28.4; on the highway's `[8,960, 1,100]·[1,100, 2,200]` `SimpleUnit` with its largest tiles
//! ran 19.1 (default 5.1). Small products (a time step's, below 256 in some dimension) keep
//! burn's kernel and the split of `split_product.rs`.

use burn::tensor::{FloatDType, Tensor};

use crate::{KernelSettings, ProductMode};
#[cfg(feature = "cubecl")]
use crate::{MatmulKernel, matmul_with};

/// The kernel for `[M, K]·[K, N]` in `f32` on a GPU, `None` for burn's own choice: products
/// below 256 in some dimension keep burn's; highway-like ones (M ≥ 4096, N ≥ 1024) take
/// `SimpleUnit` with its largest tiles, other large ones its smallest (see the module's
/// measurements).
#[cfg(feature = "cubecl")]
pub fn kernel_for_shape(m: usize, k: usize, n: usize) -> Option<MatmulKernel> {
    if m.min(k).min(n) < 256 {
        None
    } else if m >= 4096 && n >= 1024 {
        Some(MatmulKernel::SimpleUnitMax)
    } else {
        Some(MatmulKernel::SimpleUnitMin)
    }
}

/// `lhs · rhs`: through a vendor BLAS where `kernels` allows one and it runs
/// ([`KernelSettings::vendor_blas`]); else with [`crate::Precision::Mixed`] on a GPU, the
/// operands in 16 bits (`rhs` may be in that type already) and the result cast back to `f32`; in
/// `f32` on a CubeCL device without autodiff, with `fused` and `shaped_matmul` on, through
/// [`kernel_for_shape`]'s kernel; otherwise burn's `matmul`. The same values to float rounding.
///
/// # Shapes
/// - lhs: `[.., M, K]`; rhs: `[.., K, N]`; output: `[.., M, N]`
pub fn product<const D: usize>(
    lhs: Tensor<D>,
    rhs: Tensor<D>,
    kernels: KernelSettings,
) -> Tensor<D> {
    let mode = kernels.product_mode(&lhs);
    if let Some(out) = vendor_product(&lhs, &rhs, mode) {
        return out;
    }
    if mode.half.is_some() {
        // The vendor BLAS was tried above.
        let mode = ProductMode {
            vendor_blas: false,
            ..mode
        };
        return half_product(lhs, rhs, mode);
    }
    #[cfg(feature = "cubecl")]
    if kernels.shaped_matmul && kernels.fused && !lhs.device().is_autodiff() {
        let [m, k] = [lhs.dims()[D - 2], lhs.dims()[D - 1]];
        if let Some(kernel) = kernel_for_shape(m, k, rhs.dims()[D - 1])
            && let Ok(out) = matmul_with(lhs.clone(), rhs.clone(), kernel)
        {
            return out;
        }
    }
    lhs.matmul(rhs)
}

/// `lhs · rhs` as `mode` says: through a vendor BLAS where it allows one and it runs; else with
/// its operands in its 16-bit type (either may be in it already) and the result cast back to
/// `f32`, under autodiff too (the cast's gradient is cast back, so the backward products run in
/// 16 bits as well); burn's `matmul` in `f32` otherwise. For the products that
/// [`KernelSettings::product_mode`] describes.
///
/// # Shapes
/// - lhs: `[.., M, K]`; rhs: `[.., K, N]`; output: `[.., M, N]`
pub fn half_product<const D: usize>(
    lhs: Tensor<D>,
    rhs: Tensor<D>,
    mode: ProductMode,
) -> Tensor<D> {
    if let Some(out) = vendor_product(&lhs, &rhs, mode) {
        return out;
    }
    match mode.half {
        Some(_) => to_half(lhs, mode.half)
            .matmul(to_half(rhs, mode.half))
            .cast(FloatDType::F32),
        None => lhs.matmul(rhs),
    }
}

/// The product through cuBLAS where `mode` allows a vendor BLAS and it runs (this crate's
/// `cublas` feature, a CUDA device, cuBLAS found, no autodiff); `None` otherwise.
#[cfg(feature = "cublas")]
fn vendor_product<const D: usize>(
    lhs: &Tensor<D>,
    rhs: &Tensor<D>,
    mode: ProductMode,
) -> Option<Tensor<D>> {
    if !mode.vendor_blas {
        return None;
    }
    crate::cublas_product(lhs.clone(), rhs.clone(), mode.half).ok()
}

/// `None`: without the `cublas` feature there is no vendor BLAS.
#[cfg(not(feature = "cublas"))]
fn vendor_product<const D: usize>(
    _lhs: &Tensor<D>,
    _rhs: &Tensor<D>,
    _mode: ProductMode,
) -> Option<Tensor<D>> {
    None
}

/// `tensor` in `half` (a 16-bit float type): a weight cast once for many [`half_product`]s;
/// unchanged with `None` or when it is in that type already.
pub fn to_half<const D: usize>(tensor: Tensor<D>, half: Option<FloatDType>) -> Tensor<D> {
    match half {
        Some(dtype) if FloatDType::from(tensor.dtype()) != dtype => tensor.cast(dtype),
        _ => tensor,
    }
}

#[cfg(all(test, feature = "cubecl"))]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, Tolerance};

    #[test]
    fn large_shapes_take_the_probes_kernel() {
        let cases = [
            ([64, 512, 16384], None),
            ([419, 256, 10_002], Some(MatmulKernel::SimpleUnitMin)),
            ([10_002, 419, 256], Some(MatmulKernel::SimpleUnitMin)),
            ([1200, 8960, 4800], Some(MatmulKernel::SimpleUnitMin)),
            ([8960, 1100, 2200], Some(MatmulKernel::SimpleUnitMax)),
        ];
        for ([m, k, n], expected) in cases {
            assert_eq!(kernel_for_shape(m, k, n), expected, "{m} x {k} x {n}");
        }
    }

    /// On wgpu a large product (a strided left factor, as the softmax's `∂zᵀ · h`) through the
    /// chosen kernel equals burn's.
    #[test]
    fn a_large_product_equals_burns() {
        let Some(device) = elmo_test_support::wgpu_device_or_skip("a_large_product_equals_burns")
        else {
            return;
        };
        let normal = Distribution::Normal(0.0, 1.0);
        let lhs = Tensor::<2>::random([260, 300], normal, &device).transpose();
        let rhs = Tensor::<2>::random([260, 270], normal, &device);
        let expected = lhs.clone().matmul(rhs.clone()).into_data();
        assert!(kernel_for_shape(300, 260, 270).is_some());
        product(lhs, rhs, KernelSettings::ALL)
            .into_data()
            .assert_approx_eq::<f32>(&expected, Tolerance::absolute(1e-3));
    }
}
