//! Matrix products of `f32` tensors on burn's flex CPU backend through the host kernel of
//! `host_gemm` (the BLIS scheme: Van Zee & van de Geijn 2015), or with their operands rounded to
//! `bf16` on AMX's tiles or AVX512-BF16 (`host_bf16_product`, `ProductMode::host_bf16`), on
//! rayon's threads: the products of [`crate::half_product`] with `ProductMode::host` (the LSTM's
//! input projection and weight gradients, [`crate::transposed_product`]'s weight gradients) and
//! a training step's per-step products with their weights packed once per step
//! ([`crate::SplitWeight::on_host`]).

use std::mem::MaybeUninit;

use burn::tensor::Tensor;

use crate::host_bf16::Bf16Matrix;
use crate::host_bf16_product::matmul_bf16_view_parallel;
use crate::host_bf16_unit::Bf16Unit;
use crate::host_gemm::{HostInstructions, Isa, PackedMatrix, Strided, matmul_view_parallel};
use crate::host_tensor::HostTensor;

/// A `[K, N]` weight packed for the host's products: in `f32` for `host_gemm`'s kernel, or
/// rounded to `bf16` for the unit this CPU has ([`crate::Precision::Mixed`]).
#[derive(Debug)]
pub(crate) enum HostPacked {
    /// For `host_gemm`'s kernel.
    F32(PackedMatrix),
    /// For AMX's tiles or AVX512-BF16, with the instruction set of the `f32` passes around
    /// its products (`host_lstm_cell`'s cell passes).
    Bf16(Bf16Matrix, Isa),
}

impl HostPacked {
    /// Rows (`K`).
    pub(crate) fn k(&self) -> usize {
        match self {
            Self::F32(packed) => packed.k(),
            Self::Bf16(packed, _) => packed.k(),
        }
    }

    /// Columns (`N`).
    pub(crate) fn n(&self) -> usize {
        match self {
            Self::F32(packed) => packed.n(),
            Self::Bf16(packed, _) => packed.n(),
        }
    }

    /// The instruction set of the `f32` work around its products.
    pub(crate) fn isa(&self) -> Isa {
        match self {
            Self::F32(packed) => packed.isa(),
            Self::Bf16(_, isa) => *isa,
        }
    }

    /// `m` rows of `lhs` times this weight into `out` (row-major, `N` values a row: every
    /// one written, none read), on rayon's threads.
    fn product(&self, lhs: Strided, m: usize, out: &mut [MaybeUninit<f32>]) {
        match self {
            Self::F32(packed) => matmul_view_parallel(lhs, m, packed, out, packed.n()),
            Self::Bf16(packed, _) => matmul_bf16_view_parallel(lhs, m, packed, out, packed.n()),
        }
    }
}

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
/// rounded to `bf16` where `bf16` asks for it and this CPU has a unit for it within `limit`;
/// `None` for any other tensor.
pub(crate) fn pack_weight(
    weight: Tensor<2>,
    limit: HostInstructions,
    bf16: bool,
) -> Option<HostPacked> {
    let [k, n] = weight.dims();
    if n == 0 {
        return None;
    }
    read_in_place(&weight, |view| pack_view(view, k, n, limit, bf16))?
}

/// [`pack_weight`] for a view: `None` without rows or columns.
fn pack_view(
    view: Strided,
    k: usize,
    n: usize,
    limit: HostInstructions,
    bf16: bool,
) -> Option<HostPacked> {
    if k == 0 || n == 0 {
        return None;
    }
    if bf16 && let Some(packed) = Bf16Matrix::pack_view(view, k, n, limit) {
        return Some(HostPacked::Bf16(packed, Isa::at_most(limit)));
    }
    Some(HostPacked::F32(PackedMatrix::pack_view(view, k, n, limit)))
}

/// Products whose inner dimension is this many times their columns or more go to burn's
/// `matmul` ([`host_product`]): its `gemm` kernel is ahead there on a 2-vCPU Xeon (306 against
/// 238 GFLOP/s on `[1280, 8832] · [8832, 512]`, 295 against 214 on `[640, 16384] · [16384,
/// 512]`, `bench_matmul`), the host kernel elsewhere.
const LONG_INNER: usize = 8;

/// `lhs · rhs` through the host kernel (`rhs` packed for this product), where both are
/// two-dimensional `f32` flex tensors outside autodiff: with the operands rounded to `bf16`
/// where `bf16` asks for it and this CPU has a unit for it within `limit`, else in `f32` where
/// the inner dimension is shorter than [`LONG_INNER`] times the columns; `None` otherwise (the
/// caller runs burn's matmul).
///
/// # Shapes
/// - lhs: `[M, K]`; rhs: `[K, N]`; output: `[M, N]`
pub(crate) fn host_product<const D: usize>(
    lhs: &Tensor<D>,
    rhs: &Tensor<D>,
    limit: HostInstructions,
    bf16: bool,
) -> Option<Tensor<D>> {
    if D != 2 {
        return None;
    }
    let ([m, k], n) = ([lhs.dims()[0], lhs.dims()[1]], rhs.dims()[1]);
    let bf16 = bf16 && Bf16Unit::at_most(limit).is_some();
    if m == 0 || k == 0 || n == 0 || (!bf16 && k >= LONG_INNER * n) {
        return None;
    }
    // Both read in place as two-dimensional views: a `reshape` to `[M, K]` would copy a
    // transposed operand first (flex reshapes only contiguous tensors in place).
    let packed = read_in_place(rhs, |view| pack_view(view, k, n, limit, bf16))??;
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
    let lhs = Strided::rows(lhs.values(), k);
    // SAFETY: the product writes every value of its `[m, N]` output (row stride `N`).
    let out = unsafe {
        HostTensor::written([m, b.n()], |out| {
            matmul_bf16_view_parallel(lhs, m, b, out, b.n())
        })
    };
    Some(out.into_tensor())
}

/// Each group's rows of `lhs` times its packed weight (`packed[g]` for rows `g·B .. (g+1)·B`),
/// `None` where `lhs` is not a two-dimensional flex tensor outside autodiff.
///
/// # Shapes
/// - lhs: `[G·B, K]`; output: `[G·B, N]`
pub(crate) fn grouped_product<const D: usize>(
    packed: &[HostPacked],
    lhs: &Tensor<D>,
) -> Option<Tensor<D>> {
    let rows = lhs.dims()[0];
    let n = packed[0].n();
    let lhs = HostTensor::of(lhs)?;
    let view = lhs.strided()?;
    // SAFETY: the products write every value of the `[rows, N]` output.
    let out = unsafe {
        HostTensor::written([rows, n], |out| {
            grouped_view_product(packed, view, rows, out)
        })
    };
    Some(out.into_tensor())
}

/// Each group's rows of `lhs` (`rows` rows read in place, `rows / G` a group) times its packed
/// weight, into `out` (row-major, `N` values a row: every one of the `rows` rows written, none
/// read).
///
/// # Panics
/// When `rows` is not a multiple of the groups.
pub(crate) fn grouped_view_product(
    packed: &[HostPacked],
    lhs: Strided,
    rows: usize,
    out: &mut [MaybeUninit<f32>],
) {
    assert!(
        rows.is_multiple_of(packed.len()),
        "{rows} rows in {} groups",
        packed.len()
    );
    let batch = rows / packed.len();
    let n = packed[0].n();
    for (g, weight) in packed.iter().enumerate() {
        let rows = Strided {
            offset: lhs.offset + g * batch * lhs.row_stride,
            ..lhs
        };
        weight.product(rows, batch, &mut out[g * batch * n..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution, Tolerance};

    /// Products through the host kernel equal burn's: strided operands (transposed views, rows
    /// of a larger tensor), more rows than one pass of the kernel, groups of rows with their
    /// own weights; none runs under autodiff, nor in `f32` with an inner dimension of 8 times
    /// the columns; for every instruction set this CPU has, in `f32` and, where it has a unit
    /// for them, in `bf16` (against burn's product of the operands rounded to `bf16`).
    #[test]
    fn host_products_equal_burns() {
        for limit in HostInstructions::EVERY
            .into_iter()
            .chain([HostInstructions::Avx512])
        {
            products_equal_burns(limit, false);
            if Bf16Unit::at_most(limit).is_some() {
                products_equal_burns(limit, true);
            }
        }
    }

    /// `x` with its values rounded to `bf16` where `bf16` (the operands of a `bf16` product).
    fn rounded(x: Tensor<2>, bf16: bool) -> Tensor<2> {
        use crate::host_bf16::{bf16_bits, bf16_value};
        if !bf16 {
            return x;
        }
        let [m, n] = x.dims();
        let values: Vec<f32> = (x
            .clone()
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32 values"))
        .into_iter()
        .map(|v| bf16_value(bf16_bits(v)))
        .collect();
        Tensor::from_data(burn::tensor::TensorData::new(values, [m, n]), &x.device())
    }

    fn products_equal_burns(limit: HostInstructions, bf16: bool) {
        let device = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        let burns = |a: &Tensor<2>, b: &Tensor<2>| {
            rounded(a.clone(), bf16)
                .matmul(rounded(b.clone(), bf16))
                .into_data()
        };
        let lhs = Tensor::<2>::random([300, 70], normal, &device);
        let rhs = Tensor::<2>::random([70, 45], normal, &device);
        let expected = burns(&lhs, &rhs);
        // Sums of up to ~40 in f32 either way, in another order.
        let close = Tolerance::absolute(2e-4);
        let got = host_product(&lhs, &rhs, limit, bf16);
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
        let got = host_product(&rows, &strided, limit, bf16).expect("flex tensors");
        got.into_data().assert_approx_eq::<f32>(&expected, close);
        // A transposed left factor (a weight gradient's `xᵀ·∂z`).
        let x = Tensor::<2>::random([70, 300], normal, &device);
        let got = host_product(&x.clone().transpose(), &rhs, limit, bf16).expect("flex tensors");
        let want = burns(&x.clone().transpose(), &rhs);
        got.into_data().assert_approx_eq::<f32>(&want, close);
        // A transposed right factor (the LSTM input gradient's `W_xᵀ`), and both transposed.
        let w = Tensor::<2>::random([45, 70], normal, &device);
        let got = host_product(&lhs, &w.clone().transpose(), limit, bf16).expect("flex tensors");
        let want = burns(&lhs, &w.clone().transpose());
        got.into_data().assert_approx_eq::<f32>(&want, close);
        let got = host_product(&x.clone().transpose(), &w.clone().transpose(), limit, bf16)
            .expect("flex");
        let want = burns(&x.clone().transpose(), &w.clone().transpose());
        got.into_data().assert_approx_eq::<f32>(&want, close);
        // Wide (19 panels of 32 columns, several to a thread's group), as is and transposed.
        let wide = Tensor::<2>::random([70, 600], normal, &device);
        let got = host_product(&lhs, &wide, limit, bf16).expect("flex tensors");
        got.into_data()
            .assert_approx_eq::<f32>(&burns(&lhs, &wide), close);
        let wide_t = Tensor::<2>::random([600, 70], normal, &device).transpose();
        let got = host_product(&lhs, &wide_t, limit, bf16).expect("flex tensors");
        got.into_data()
            .assert_approx_eq::<f32>(&burns(&lhs, &wide_t), close);
        // Two groups of 150 rows, each with its own weight.
        let other = Tensor::<2>::random([70, 45], normal, &device);
        let packed =
            [rhs.clone(), other.clone()].map(|w| pack_weight(w, limit, bf16).expect("flex"));
        assert!(
            packed
                .iter()
                .all(|p| matches!(p, HostPacked::Bf16(..)) == bf16)
        );
        let grouped = grouped_product(&packed, &lhs).expect("flex");
        let want = Tensor::cat(
            vec![
                Tensor::<2>::from_data(burns(&lhs.clone().narrow(0, 0, 150), &rhs), &device),
                Tensor::<2>::from_data(burns(&lhs.clone().narrow(0, 150, 150), &other), &device),
            ],
            0,
        )
        .into_data();
        grouped.into_data().assert_approx_eq::<f32>(&want, close);
        // A long inner dimension against few columns: burn's in `f32`, the unit's in `bf16`.
        let narrow = Tensor::<2>::random([70, 8], normal, &device);
        let long = host_product(&lhs, &narrow, limit, bf16);
        assert_eq!(long.is_some(), bf16);
        if let Some(long) = long {
            long.into_data()
                .assert_approx_eq::<f32>(&burns(&lhs, &narrow), close);
        }
        let autodiff = Tensor::<2>::random([4, 70], normal, &Device::autodiff(device.clone()));
        let product = host_product(&autodiff, &autodiff.clone().transpose(), limit, bf16);
        assert!(product.is_none());
    }
}
