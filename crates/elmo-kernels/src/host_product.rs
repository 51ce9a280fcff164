//! Matrix products of `f32` tensors on burn's flex CPU backend through the host kernel of
//! `host_gemm` (the BLIS scheme: Van Zee & van de Geijn 2015), on rayon's threads: the products
//! of [`crate::half_product`] with `ProductMode::host` (the LSTM's input projection and weight
//! gradients, [`crate::transposed_product`]'s weight gradients) and a training step's per-step
//! products with their weights packed once per step ([`crate::SplitWeight::on_host`]).

use burn::tensor::Tensor;

use crate::host_bf16::Bf16Matrix;
use crate::host_bf16_product::matmul_bf16_parallel;
use crate::host_gemm::{HostInstructions, PackedMatrix, Strided, matmul_view_parallel};
use crate::host_tensor::HostTensor;

/// A two-dimensional `f32` tensor of burn's flex backend outside autodiff, read in place (its
/// strides, so that transposed views and row ranges are not copied), handed to `read`;
/// `None` for any other tensor (this crate's `flex` feature).
fn read_in_place<const D: usize, R>(
    tensor: &Tensor<D>,
    read: impl FnOnce(Strided) -> R,
) -> Option<R> {
    let host = HostTensor::of(tensor)?;
    Some(read(host.strided()?))
}

/// A `[K, N]` flex tensor packed for the host kernel (the widest instruction set up to `limit`),
/// `None` for any other tensor.
pub(crate) fn pack_weight(weight: Tensor<2>, limit: HostInstructions) -> Option<PackedMatrix> {
    let [k, n] = weight.dims();
    if n == 0 {
        return None;
    }
    read_in_place(&weight, |view| PackedMatrix::pack_view(view, k, n, limit))
}

/// Products whose inner dimension is this many times their columns or more go to burn's
/// `matmul` ([`host_product`]): its `gemm` kernel is ahead there on a 2-vCPU Xeon (306 against
/// 238 GFLOP/s on `[1280, 8832] · [8832, 512]`, 295 against 214 on `[640, 16384] · [16384,
/// 512]`, `bench_matmul`), the host kernel elsewhere.
const LONG_INNER: usize = 8;

/// `lhs · rhs` through the host kernel (`rhs` packed for this product), where both are
/// two-dimensional `f32` flex tensors outside autodiff and the inner dimension is shorter than
/// [`LONG_INNER`] times the columns; `None` otherwise (the caller runs burn's matmul).
///
/// # Shapes
/// - lhs: `[M, K]`; rhs: `[K, N]`; output: `[M, N]`
pub(crate) fn host_product<const D: usize>(
    lhs: &Tensor<D>,
    rhs: &Tensor<D>,
    limit: HostInstructions,
) -> Option<Tensor<D>> {
    if D != 2 {
        return None;
    }
    let ([m, k], n) = ([lhs.dims()[0], lhs.dims()[1]], rhs.dims()[1]);
    if m == 0 || k == 0 || n == 0 || k >= LONG_INNER * n {
        return None;
    }
    // Both read in place as two-dimensional views: a `reshape` to `[M, K]` would copy a
    // transposed operand first (flex reshapes only contiguous tensors in place).
    let packed = read_in_place(rhs, |view| PackedMatrix::pack_view(view, k, n, limit))?;
    grouped_product(&[packed], lhs)
}

/// `lhs · b` with `lhs` rounded to `bf16` and the sums in `f32` on `b`'s unit (AMX's tiles or
/// AVX512-BF16, [`crate::matmul_bf16_parallel`]; `b` is packed and rounded already), where
/// `lhs` is a two-dimensional `f32` flex tensor outside autodiff with `b.k()` columns; `None`
/// otherwise (the caller runs the product in `f32`). [`crate::Precision::Mixed`]'s dense products on the host (the char
/// CNN's highways and projection in inference), whose weights the caller keeps packed.
///
/// # Shapes
/// - lhs: `[M, K]`; output: `[M, N]`
pub fn bf16_product(lhs: &Tensor<2>, b: &Bf16Matrix) -> Option<Tensor<2>> {
    let [m, k] = lhs.dims();
    if m == 0 || k != b.k() {
        return None;
    }
    let lhs = HostTensor::of(lhs)?.contiguous();
    let mut out = HostTensor::zeros([m, b.n()]);
    matmul_bf16_parallel(lhs.values(), k, m, b, out.values_mut(), b.n());
    Some(out.into_tensor())
}

/// Each group's rows of `lhs` times its packed weight (`packed[g]` for rows `g·B .. (g+1)·B`),
/// `None` where `lhs` is not a two-dimensional flex tensor outside autodiff.
///
/// # Shapes
/// - lhs: `[G·B, K]`; output: `[G·B, N]`
pub(crate) fn grouped_product<const D: usize>(
    packed: &[PackedMatrix],
    lhs: &Tensor<D>,
) -> Option<Tensor<D>> {
    let rows = lhs.dims()[0];
    let n = packed[0].n();
    let lhs = HostTensor::of(lhs)?;
    let mut out = HostTensor::zeros([rows, n]);
    grouped_view_product(packed, lhs.strided()?, rows, out.values_mut());
    Some(out.into_tensor())
}

/// Each group's rows of `lhs` (`rows` rows read in place, `rows / G` a group) times its packed
/// weight, into `out` (row-major, `N` values a row).
pub(crate) fn grouped_view_product(
    packed: &[PackedMatrix],
    lhs: Strided,
    rows: usize,
    out: &mut [f32],
) {
    let batch = rows / packed.len();
    let n = packed[0].n();
    for (g, weight) in packed.iter().enumerate() {
        let rows = Strided {
            offset: lhs.offset + g * batch * lhs.row_stride,
            ..lhs
        };
        matmul_view_parallel(rows, batch, weight, &mut out[g * batch * n..], n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution, Tolerance};

    /// Products through the host kernel equal burn's: strided operands (transposed views, rows
    /// of a larger tensor), more rows than one pass of the kernel, groups of rows with their
    /// own weights; none runs under autodiff or with an inner dimension of 8 times the columns;
    /// for every instruction set this CPU has.
    #[test]
    fn host_products_equal_burns() {
        for limit in HostInstructions::EVERY {
            products_equal_burns(limit);
        }
    }

    fn products_equal_burns(limit: HostInstructions) {
        let device = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        let lhs = Tensor::<2>::random([300, 70], normal, &device);
        let rhs = Tensor::<2>::random([70, 45], normal, &device);
        let expected = lhs.clone().matmul(rhs.clone()).into_data();
        let close = Tolerance::absolute(1e-4);
        let got = host_product(&lhs, &rhs, limit);
        assert_eq!(
            got.is_some(),
            cfg!(feature = "flex"),
            "flex runs the host product"
        );
        let Some(got) = got else {
            return;
        };
        got.into_data().assert_approx_eq::<f32>(&expected, close);
        // Rows 300..600 of a larger tensor; the weight as the transpose of its transpose.
        let rows = Tensor::cat(vec![lhs.clone(), lhs.clone()], 0).narrow(0, 300, 300);
        let strided = rhs.clone().transpose().transpose();
        let got = host_product(&rows, &strided, limit).expect("flex tensors");
        got.into_data().assert_approx_eq::<f32>(&expected, close);
        // A transposed left factor (a weight gradient's `xᵀ·∂z`).
        let x = Tensor::<2>::random([70, 300], normal, &device);
        let got = host_product(&x.clone().transpose(), &rhs, limit).expect("flex tensors");
        let want = x.clone().transpose().matmul(rhs.clone()).into_data();
        got.into_data().assert_approx_eq::<f32>(&want, close);
        // A transposed right factor (the LSTM input gradient's `W_xᵀ`), and both transposed.
        let w = Tensor::<2>::random([45, 70], normal, &device);
        let got = host_product(&lhs, &w.clone().transpose(), limit).expect("flex tensors");
        let want = lhs.clone().matmul(w.clone().transpose()).into_data();
        got.into_data().assert_approx_eq::<f32>(&want, close);
        let got =
            host_product(&x.clone().transpose(), &w.clone().transpose(), limit).expect("flex");
        let want = x.clone().transpose().matmul(w.transpose()).into_data();
        got.into_data().assert_approx_eq::<f32>(&want, close);
        // Two groups of 150 rows, each with its own weight.
        let other = Tensor::<2>::random([70, 45], normal, &device);
        let packed = [rhs.clone(), other.clone()].map(|w| pack_weight(w, limit).expect("flex"));
        let grouped = grouped_product(&packed, &lhs).expect("flex");
        let halves = vec![
            lhs.clone().narrow(0, 0, 150).matmul(rhs.clone()),
            lhs.clone().narrow(0, 150, 150).matmul(other),
        ];
        let want = Tensor::cat(halves, 0).into_data();
        grouped.into_data().assert_approx_eq::<f32>(&want, close);
        // A long inner dimension against few columns: burn's.
        let narrow = Tensor::<2>::random([70, 8], normal, &device);
        assert!(host_product(&lhs, &narrow, limit).is_none());
        let autodiff = Tensor::<2>::random([4, 70], normal, &Device::autodiff(device.clone()));
        assert!(host_product(&autodiff, &autodiff.clone().transpose(), limit).is_none());
    }
}
