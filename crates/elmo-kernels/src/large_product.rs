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

#[cfg(feature = "cubecl")]
use burn::tensor::DType;
use burn::tensor::{FloatDType, Tensor};
#[cfg(feature = "cubecl")]
use burn_cubecl::CubeBackend;

#[cfg(feature = "cubecl")]
use crate::cube_tensor::cube_primitive;
use crate::host_product::host_product;
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
/// [`kernel_for_shape`]'s kernel; on flex outside autodiff, in `bf16` on the CPU's unit with
/// `mode.host_bf16` (`Precision::Mixed`), else through the host kernel where the
/// product is wide (`N ≥ 2K`: the highways' forward and weight gradients, the sampled softmax's
/// logits; on a 2-vCPU Xeon 1.3-1.4x burn's on `[2048, 640] · [640, 4096]` and `[1280, 512] ·
/// [512, 8832]`, `bench_matmul`); otherwise burn's `matmul`, on flex too (its kernel is ahead on
/// the long inner dimensions of the input gradients: 1.3x on `[1280, 8832] · [8832, 512]`).
/// The same values to float rounding.
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
    if let Some(limit) = mode.host
        && (mode.host_bf16 || rhs.dims()[D - 1] >= 2 * lhs.dims()[D - 1])
        && let Some(out) = host_product(&lhs, &rhs, limit, mode.host_bf16)
    {
        return out;
    }
    lhs.matmul(rhs)
}

/// `lhs · rhs` as `mode` says: through a vendor BLAS where it allows one and it runs; else with
/// its operands in its 16-bit type (either may be in it already) and the result in `f32`:
/// written in `f32` by the matmul kernel itself on a CubeCL device without autodiff
/// (`f32_product_of_halves`), cast back after a 16-bit result otherwise, under autodiff too
/// (the cast's gradient is cast back, so the backward products run in 16 bits as well); in
/// `f32` without a 16-bit type, through the host kernel where `mode.host` and the operands are
/// flex tensors outside autodiff (in `bf16` on the CPU's unit with `mode.host_bf16`), else
/// burn's `matmul`. For the products that
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
        Some(_) => {
            let (lhs, rhs) = (to_half(lhs, mode.half), to_half(rhs, mode.half));
            #[cfg(feature = "cubecl")]
            if let Some(out) = f32_product_of_halves(&lhs, &rhs) {
                return out;
            }
            lhs.matmul(rhs).cast(FloatDType::F32)
        }
        None => plain_product(lhs, rhs, mode),
    }
}

/// `lhs · rhs` with `f32` results: through the host kernel where `mode` asks for it and the
/// operands are flex tensors outside autodiff (`host_product.rs`: in `bf16` with
/// `mode.host_bf16` where the CPU has a unit; in `f32` not for a long inner dimension against
/// few columns, as the LSTM's input gradients: burn's kernel is ahead there), else burn's
/// `matmul`.
fn plain_product<const D: usize>(lhs: Tensor<D>, rhs: Tensor<D>, mode: ProductMode) -> Tensor<D> {
    if let Some(limit) = mode.host
        && let Some(out) = host_product(&lhs, &rhs, limit, mode.host_bf16)
    {
        return out;
    }
    lhs.matmul(rhs)
}

/// `lhs · rhs` for 16-bit operands with the result written in `f32` by the matmul kernel
/// itself (burn-cubecl's `matmul` with an `f32` output: cubek accumulates in `f32` and stores
/// it), where burn's `Tensor::matmul` would round the result to 16 bits and a cast kernel then
/// read it back: one launch and one 16-bit rounding less per product. `None` off a CubeCL
/// device, under autodiff (whose graph needs burn's operations), or where the kernel does not
/// launch.
///
/// # Shapes
/// - lhs: `[.., M, K]`; rhs: `[.., K, N]`; output: `[.., M, N]`
#[cfg(feature = "cubecl")]
fn f32_product_of_halves<const D: usize>(lhs: &Tensor<D>, rhs: &Tensor<D>) -> Option<Tensor<D>> {
    use burn_cubecl::kernel::matmul::{MatmulStrategy, matmul};
    if lhs.device().is_autodiff() || rhs.device().is_autodiff() {
        return None;
    }
    let (left, right) = (cube_primitive(lhs)?, cube_primitive(rhs)?);
    let out = matmul(left, right, None, MatmulStrategy::default(), DType::F32).ok()?;
    Some(Tensor::from_primitive::<CubeBackend>(out))
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
    use burn::tensor::{DType, Device, Distribution, Tolerance};

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

    /// On wgpu a product of 16-bit operands (mixed precision) comes out of the matmul kernel in
    /// `f32`, not rounded to 16 bits: it equals the `f32` product of the same (rounded)
    /// operands to `f32`'s rounding, where a 16-bit result would be off by up to ~0.03 on
    /// these sums (values up to ~80, f16 keeping 11 bits).
    #[test]
    fn products_of_halves_are_written_in_f32() {
        let Some(device) =
            elmo_test_support::wgpu_device_or_skip("products_of_halves_are_written_in_f32")
        else {
            return;
        };
        let half = crate::Precision::Mixed.half_for(&Tensor::<1>::zeros([1], &device));
        let Some(half) = half else {
            eprintln!("skipping: no 16-bit type on this wgpu device");
            return;
        };
        let normal = Distribution::Normal(0.0, 1.0);
        let lhs = to_half(
            Tensor::<3>::random([2, 70, 300], normal, &device),
            Some(half),
        );
        let rhs = to_half(
            Tensor::<3>::random([2, 300, 90], normal, &device),
            Some(half),
        );
        let expected = lhs
            .clone()
            .cast(FloatDType::F32)
            .matmul(rhs.clone().cast(FloatDType::F32));
        let direct = f32_product_of_halves(&lhs, &rhs).expect("a wgpu product of halves");
        assert_eq!(direct.dtype(), DType::F32);
        let mode = ProductMode {
            half: Some(half),
            vendor_blas: false,
            host: None,
            host_bf16: false,
        };
        let difference = |product: Tensor<3>| {
            (product - expected.clone())
                .abs()
                .max()
                .into_scalar::<f32>()
        };
        for product in [direct, half_product(lhs.clone(), rhs.clone(), mode)] {
            let difference = difference(product);
            assert!(difference < 1e-3, "{difference} from the f32 product");
        }
        // The tolerance tells a 16-bit result apart.
        let rounded = difference(lhs.clone().matmul(rhs.clone()).cast(FloatDType::F32));
        assert!(rounded > 1e-3, "a 16-bit result only {rounded} off");
        // Under autodiff burn's operations run, with the result cast back.
        let autodiff = device.autodiff();
        let tracked = to_half(
            Tensor::<3>::random([2, 70, 300], normal, &autodiff),
            Some(half),
        );
        let tracked_rhs = to_half(
            Tensor::<3>::random([2, 300, 90], normal, &autodiff),
            Some(half),
        );
        assert!(tracked.device().is_autodiff());
        assert!(f32_product_of_halves(&tracked, &tracked_rhs).is_none());
        assert_eq!(half_product(tracked, tracked_rhs, mode).dtype(), DType::F32);
    }

    /// On flex, wide products (the host kernel, a transposed left factor too) and narrow ones
    /// (burn's) equal burn's `matmul`.
    #[test]
    fn products_on_flex_equal_burns() {
        let device = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        for (m, k, n) in [(37, 20, 90), (37, 90, 20)] {
            let lhs = Tensor::<2>::random([k, m], normal, &device).transpose();
            let rhs = Tensor::<2>::random([k, n], normal, &device);
            let expected = lhs.clone().matmul(rhs.clone()).into_data();
            product(lhs, rhs, KernelSettings::ALL)
                .into_data()
                .assert_approx_eq::<f32>(&expected, Tolerance::absolute(1e-4));
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
