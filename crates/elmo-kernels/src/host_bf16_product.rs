//! `bf16` matrix products on the host CPU ([`matmul_bf16`]):
//! [`Precision::Mixed`](crate::Precision)'s products on a CPU, on the unit a [`Bf16Matrix`] was
//! packed for (`crate::host_amx`'s tiles or `crate::host_bf16_dot`'s vectors), the rows of `a`
//! rounded as `crate::host_bf16` lays them out.

use std::mem::MaybeUninit;
use std::ops::Range;

use crate::host_bf16::{Bf16Matrix, Bf16Rows, Output};
use crate::host_bf16_unit::Bf16Unit;
use crate::host_gemm::{Strided, as_written, panel_shares};

/// `c = a · b` for `m` rows, the operands rounded to `bf16` and the sums in `f32`: `a`
/// row-major with row stride `lda` (its first `K` columns read), `c` row-major with row stride
/// `ldc` (its first `N` columns written). On the calling thread.
///
/// # Panics
/// When `a` or `c` is too short for `m` rows.
pub fn matmul_bf16(a: &[f32], lda: usize, m: usize, b: &Bf16Matrix, c: &mut [f32], ldc: usize) {
    if m == 0 {
        return;
    }
    let rows = Bf16Rows::round(a, lda, m, b);
    // SAFETY: the product writes `f32` values.
    let out = Output::of(unsafe { as_written(c) }, ldc, m, b);
    // SAFETY: `out` holds the product (checked) and `c` is borrowed mutably for the call.
    unsafe { product(&rows, b, 0..b.n_panels(), out) };
}

/// [`matmul_bf16`] with the panels of `b` shared among rayon's threads (each writes its own
/// columns of `c`): for products whose caller is one thread.
///
/// # Panics
/// When `a` or `c` is too short for `m` rows.
pub fn matmul_bf16_parallel(
    a: &[f32],
    lda: usize,
    m: usize,
    b: &Bf16Matrix,
    c: &mut [f32],
    ldc: usize,
) {
    assert!(m == 0 || lda >= b.k(), "a's rows hold K values");
    // SAFETY: the product writes `f32` values.
    let c = unsafe { as_written(c) };
    matmul_bf16_view_parallel(Strided::rows(a, lda), m, b, c, ldc);
}

/// [`matmul_bf16_parallel`] for `a` read in place at any strides (a transposed tensor), into
/// `c` that need not be initialised: every value of its `[m, N]` product (row stride `ldc`) is
/// written, none read.
///
/// # Panics
/// When `a` does not hold `m` rows of `K` values or `c` is too short for them.
pub(crate) fn matmul_bf16_view_parallel(
    a: Strided,
    m: usize,
    b: &Bf16Matrix,
    c: &mut [MaybeUninit<f32>],
    ldc: usize,
) {
    use rayon::prelude::*;
    if m == 0 {
        return;
    }
    let rows = Bf16Rows::round_view(a, m, b);
    let out = Output::of(c, ldc, rows.m, b);
    panel_shares(b.n_panels())
        .into_par_iter()
        .for_each(|panels| {
            // SAFETY: as in `matmul_bf16`; the tasks' panels, hence their columns of `c`, are
            // disjoint.
            unsafe { product(&rows, b, panels, out) };
        });
}

/// The product of `rows` and the panels `panels` of `b` into `out` on `b`'s unit, on the
/// calling thread.
///
/// # Safety
/// `out` holds `rows.m` rows of `b.n` columns, of which no other thread reads or writes those
/// of `panels` meanwhile.
unsafe fn product(rows: &Bf16Rows, b: &Bf16Matrix, panels: Range<usize>, out: Output) {
    // SAFETY: `b` exists, so its unit was detected (and AMX granted); the rest is the caller's
    // promise.
    unsafe {
        match b.unit() {
            Bf16Unit::Amx => crate::host_amx::product(rows, b, panels, out),
            Bf16Unit::Avx512Bf16 => crate::host_bf16_dot::product(rows, b, panels, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_bf16::{bf16_bits, bf16_value};
    use crate::host_gemm::HostInstructions;

    fn seeded(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// The products of the rounded operands in `f64`, the reference of the tiles' sums.
    fn reference(a: &[f32], m: usize, k: usize, b: &[f32], n: usize) -> Vec<f64> {
        let round = |x: f32| f64::from(bf16_value(bf16_bits(x)));
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for kk in 0..k {
                let x = round(a[i * k + kk]);
                for j in 0..n {
                    c[i * n + j] += x * round(b[kk * n + j]);
                }
            }
        }
        c
    }

    /// The limits that pick each unit this CPU has: AMX (the widest), AVX512-BF16 (AVX-512 at
    /// most); none, and no packing, for AVX2.
    fn units() -> Vec<(HostInstructions, Bf16Unit)> {
        assert!(Bf16Unit::at_most(HostInstructions::Avx2).is_none());
        assert!(Bf16Unit::at_most(HostInstructions::Portable).is_none());
        assert!(Bf16Matrix::pack(&[1.0], 1, HostInstructions::Avx2).is_none());
        [HostInstructions::Widest, HostInstructions::Avx512]
            .into_iter()
            .filter_map(|limit| Some((limit, Bf16Unit::at_most(limit)?)))
            .collect()
    }

    #[test]
    fn each_units_products_equal_the_rounded_operands_products() {
        for (limit, unit) in units() {
            assert!(
                Bf16Matrix::pack(&[], 3, limit).is_none(),
                "no rows, no packing"
            );
            assert_eq!(
                Bf16Matrix::pack(&[1.0], 1, limit).map(|b| b.unit()),
                Some(unit)
            );
            products_equal_the_rounded_operands_products(limit);
        }
        if Bf16Unit::at_most(HostInstructions::Widest).is_none() {
            let none = Bf16Matrix::pack(&[1.0], 1, HostInstructions::Widest);
            assert!(none.is_none(), "no unit, no packing");
        }
    }

    fn products_equal_the_rounded_operands_products(limit: HostInstructions) {
        // Edges: K and N not whole blocks or panels; blocks of one row, of 16 rows or fewer
        // (two tiles) and of 17-31 (four), alone and after whole blocks; the vector unit's
        // blocks of 12 rows and each of their tails; several panels, and several groups of
        // them (`K` of 4,096: two panels a group).
        for (m, k, n) in [
            (1, 3, 5),
            (7, 40, 33),
            (16, 32, 32),
            (20, 48, 40),
            (33, 64, 64),
            (50, 64, 33),
            (70, 100, 97),
            (64, 512, 96),
            (40, 4096, 160),
            (12, 64, 48),
            (23, 96, 16),
            (25, 32, 64),
            (35, 64, 40),
        ] {
            let a = seeded(m * k, (m * k) as u64);
            let b = seeded(k * n, n as u64);
            let packed = Bf16Matrix::pack(&b, n, limit).expect("a unit");
            let expected = reference(&a, m, k, &b, n);
            // `c` wider than N (ldc > n): the columns past N keep their values.
            let ldc = n + 3;
            for parallel in [false, true] {
                let mut c = vec![7.0f32; m * ldc];
                match parallel {
                    false => matmul_bf16(&a, k, m, &packed, &mut c, ldc),
                    true => matmul_bf16_parallel(&a, k, m, &packed, &mut c, ldc),
                }
                for i in 0..m {
                    for j in 0..n {
                        let (got, want) = (f64::from(c[i * ldc + j]), expected[i * n + j]);
                        assert!(
                            (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "{limit:?} [{m}, {k}]·[{k}, {n}] at ({i}, {j}): {got} vs {want}"
                        );
                    }
                    assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|&v| v == 7.0));
                }
            }
        }
    }

    #[test]
    fn each_units_products_are_within_bf16_of_f32() {
        for (limit, _) in units() {
            products_are_within_bf16_of_f32(limit);
        }
    }

    fn products_are_within_bf16_of_f32(limit: HostInstructions) {
        let (m, k, n) = (16, 256, 64);
        let (a, b) = (seeded(m * k, 3), seeded(k * n, 4));
        let packed = Bf16Matrix::pack(&b, n, limit).expect("a unit");
        let mut c = vec![0.0f32; m * n];
        matmul_bf16(&a, k, m, &packed, &mut c, n);
        let mut worst = 0.0f64;
        let mut largest = 0.0f64;
        for i in 0..m {
            for j in 0..n {
                let exact: f64 = (0..k)
                    .map(|kk| f64::from(a[i * k + kk]) * f64::from(b[kk * n + j]))
                    .sum();
                worst = worst.max((f64::from(c[i * n + j]) - exact).abs());
                largest = largest.max(exact.abs());
            }
        }
        // Each operand within 2^-9 of its value: sums of 256 products of values in ±0.5.
        assert!(worst < 0.02 * largest, "{worst} vs largest {largest}");
        assert!(worst > 0.0, "the operands were rounded");
    }
}
