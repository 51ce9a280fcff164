//! Matrix products on the host CPU for the LSTMP recurrence: the weight operand packed once into
//! column panels, then every step's `[B, K] · [K, N]` walks each panel once for all rows with a
//! register-blocked micro-kernel (the BLIS / GotoBLAS scheme: Van Zee & van de Geijn 2015),
//! compiled for AVX-512, AVX2 + FMA or plain SIMD and chosen at run time.
//!
//! A general-purpose GEMM packs the weights again on every call; a recurrence multiplies by the
//! same weights at every step, so packing them once per sequence removes a full copy of the
//! weights from each step (32 MiB per step and direction for the `original` biLM).

/// Which instruction set the micro-kernels (and `host_lstm`'s cell pass) use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// 512-bit vectors with FMA: panels of 32 columns, 8 rows per block.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// 256-bit vectors with FMA: panels of 16 columns, 6 rows per block.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// What the target compiles to by default: panels of 16 columns, 4 rows per block.
    Portable,
}

impl Isa {
    /// The widest this CPU has.
    pub(crate) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// Columns per panel.
    fn panel(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => 32,
            _ => 16,
        }
    }
}

/// A `[K, N]` matrix packed for [`matmul_packed`]: panel `p` holds columns `p·NR .. (p+1)·NR`
/// (zero past `N`) as `K` rows of `NR` contiguous values.
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    k: usize,
    n: usize,
    panel: usize,
    isa: Isa,
    data: Vec<f32>,
}

impl PackedMatrix {
    /// Packs a row-major `[k, n]` matrix.
    ///
    /// # Panics
    /// When the length of `values` is not a multiple of `n`.
    pub fn pack(values: &[f32], n: usize) -> Self {
        Self::pack_for(Isa::detect(), values, n)
    }

    fn pack_for(isa: Isa, values: &[f32], n: usize) -> Self {
        assert!(
            n > 0 && values.len().is_multiple_of(n),
            "whole rows of {n} columns"
        );
        let (panel, k) = (isa.panel(), values.len() / n);
        let n_panels = n.div_ceil(panel);
        let mut data = vec![0.0f32; n_panels * k * panel];
        for (row, values) in values.chunks_exact(n).enumerate() {
            for (p, columns) in values.chunks(panel).enumerate() {
                let at = (p * k + row) * panel;
                data[at..at + columns.len()].copy_from_slice(columns);
            }
        }
        Self {
            k,
            n,
            panel,
            isa,
            data,
        }
    }

    /// The instruction set it was packed for (detected on this machine).
    pub(crate) fn isa(&self) -> Isa {
        self.isa
    }

    /// Rows (`K`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns (`N`).
    pub fn n(&self) -> usize {
        self.n
    }
}

/// `c = a · b` for `m` rows: `a` row-major with row stride `lda` (its first `K` columns read),
/// `c` row-major with row stride `ldc` (its first `N` columns written).
///
/// # Panics
/// When `a` or `c` is too short for `m` rows.
pub fn matmul_packed(a: &[f32], lda: usize, m: usize, b: &PackedMatrix, c: &mut [f32], ldc: usize) {
    if m == 0 {
        return;
    }
    assert!(lda >= b.k && a.len() >= (m - 1) * lda + b.k, "a is [m, K]");
    assert!(ldc >= b.n && c.len() >= (m - 1) * ldc + b.n, "c is [m, N]");
    match b.isa {
        // SAFETY: `b.isa` was detected on this machine when `b` was packed.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::matmul_avx512(a, lda, m, b, c, ldc) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::matmul_avx2(a, lda, m, b, c, ldc) },
        Isa::Portable => run::<16, 4>(a, lda, m, b, c, ldc, block_portable::<16, 4>),
    }
}

/// Packs `a` in blocks of `MR` rows, each `K` steps of `MR` values (rows past `m` zero), so that
/// a block reads one contiguous stream; then for every panel, every slice of its rows (`kc_for`
/// rows of `K`, which stay in L1 while the blocks pass) and every block, `block(a_slice,
/// panel_slice, panel_stride, out)` computes the `MR × NR` product of the slice into `out`,
/// whose real rows and columns are copied into `c` (first slice) or added to it (the others).
/// `panel_stride` is the distance to the same row of the next panel, for the prefetch.
#[inline(always)]
fn run<const NR: usize, const MR: usize>(
    a: &[f32],
    lda: usize,
    m: usize,
    b: &PackedMatrix,
    c: &mut [f32],
    ldc: usize,
    mut block: impl FnMut(&[f32], &[f32], usize, &mut [[f32; NR]; MR]),
) {
    assert_eq!(b.panel, NR, "b packed for this kernel");
    let (k, n) = (b.k, b.n);
    let n_blocks = m.div_ceil(MR);
    let mut packed = vec![0.0f32; n_blocks * k * MR];
    for (row, values) in a.chunks(lda).take(m).enumerate() {
        let (blk, i) = (row / MR, row % MR);
        let block = &mut packed[blk * k * MR..(blk + 1) * k * MR];
        for (p, &v) in values[..k].iter().enumerate() {
            block[p * MR + i] = v;
        }
    }
    let kc = kc_for::<NR>().min(k).max(1);
    let mut out = [[0.0f32; NR]; MR];
    for p in 0..b.data.len() / (k * NR) {
        let columns = NR.min(n - p * NR);
        // The panel's rows a slice of K at a time, so that the slice stays in L1 while every
        // block of `a` passes over it; the slices' sums add up in `c`.
        for start in (0..k).step_by(kc) {
            let len = kc.min(k - start);
            let b_slice = &b.data[p * k * NR + start * NR..];
            for (blk, a_block) in packed.chunks_exact(k * MR).enumerate() {
                block(
                    &a_block[start * MR..(start + len) * MR],
                    b_slice,
                    k * NR,
                    &mut out,
                );
                let rows = MR.min(m - blk * MR);
                for (i, values) in out.iter().take(rows).enumerate() {
                    let at = (blk * MR + i) * ldc + p * NR;
                    let c = &mut c[at..at + columns];
                    if start == 0 {
                        c.copy_from_slice(&values[..columns]);
                    } else {
                        c.iter_mut().zip(values).for_each(|(c, v)| *c += v);
                    }
                }
            }
        }
    }
}

/// Bytes of a panel's slice that the blocks of `a` pass over while it stays in L1 (32 KiB of
/// the 32-48 KiB L1 data caches of current x86-64 cores; the rest holds the block of `a`).
const SLICE_BYTES: usize = 32 * 1024;

/// Rows of `K` per slice of a panel of `NR` columns (256 for AVX-512's 32 columns).
fn kc_for<const NR: usize>() -> usize {
    SLICE_BYTES / (NR * size_of::<f32>())
}

/// The portable kernel: `MR × NR` accumulators, what the compiler makes of plain loops.
fn block_portable<const NR: usize, const MR: usize>(
    a: &[f32],
    panel: &[f32],
    _panel_stride: usize,
    out: &mut [[f32; NR]; MR],
) {
    let mut acc = [[0.0f32; NR]; MR];
    for (x, b) in a.chunks_exact(MR).zip(panel.chunks_exact(NR)) {
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] += x[i] * b[j];
            }
        }
    }
    *out = acc;
}

/// The x86-64 micro-kernels: `8 × 32` (AVX-512) or `6 × 16` (AVX2) accumulators in registers
/// over all of `K` (two vectors per row), one broadcast of `a` per row and step of `K`, the same
/// rows of the next panel prefetched towards L2 for the next pass (a prefetch past the last
/// panel reads nothing).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{PackedMatrix, run};

    macro_rules! micro_kernel {
        ($matmul:ident, $name:ident, $features:literal, $mr:literal, $nr:literal, $half:literal,
         $zero:ident, $load:ident, $set1:ident, $fmadd:ident, $store:ident) => {
            /// # Safety
            #[doc = concat!("`", $features, "` present and `b` packed for it.")]
            #[target_feature(enable = $features)]
            pub unsafe fn $matmul(
                a: &[f32],
                lda: usize,
                m: usize,
                b: &PackedMatrix,
                c: &mut [f32],
                ldc: usize,
            ) {
                // SAFETY: the features are enabled here; `run` hands the block a packed block
                // of `a` and a panel of `K` rows.
                run::<$nr, $mr>(a, lda, m, b, c, ldc, |a, panel, stride, out| unsafe {
                    $name(a, panel, stride, out)
                })
            }

            /// # Safety
            #[doc = concat!("`", $features, "` present; `a` holds `K × ", $mr,
                                                    "` packed values and `panel` `K × ", $nr, "`.")]
            #[target_feature(enable = $features)]
            pub unsafe fn $name(
                a: &[f32],
                panel: &[f32],
                panel_stride: usize,
                out: &mut [[f32; $nr]; $mr],
            ) {
                let k = a.len() / $mr;
                assert!(panel.len() >= $nr * k, "the panel holds K rows");
                let (a, b) = (a.as_ptr(), panel.as_ptr());
                let mut low = [$zero(); $mr];
                let mut high = [$zero(); $mr];
                for p in 0..k {
                    // SAFETY: in bounds by the function's contract.
                    unsafe {
                        let next = b.wrapping_add(panel_stride + p * $nr);
                        _mm_prefetch::<_MM_HINT_T1>(next as *const i8);
                        _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add($half) as *const i8);
                        let b0 = $load(b.add(p * $nr));
                        let b1 = $load(b.add(p * $nr + $half));
                        for i in 0..$mr {
                            let x = $set1(*a.add(p * $mr + i));
                            low[i] = $fmadd(x, b0, low[i]);
                            high[i] = $fmadd(x, b1, high[i]);
                        }
                    }
                }
                for (i, row) in out.iter_mut().enumerate() {
                    // SAFETY: `row` holds NR values.
                    unsafe {
                        $store(row.as_mut_ptr(), low[i]);
                        $store(row.as_mut_ptr().add($half), high[i]);
                    }
                }
            }
        };
    }

    micro_kernel!(
        matmul_avx512,
        block_avx512,
        "avx512f,fma",
        8,
        32,
        16,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps
    );
    micro_kernel!(
        matmul_avx2,
        block_avx2,
        "avx2,fma",
        6,
        16,
        8,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_storeu_ps
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn reference(a: &[f32], lda: usize, m: usize, b: &[f32], k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for p in 0..k {
                for j in 0..n {
                    c[i * n + j] += f64::from(a[i * lda + p]) * f64::from(b[p * n + j]);
                }
            }
        }
        c.into_iter().map(|v| v as f32).collect()
    }

    /// Every instruction set this machine has (the portable kernel always).
    fn isas() -> Vec<Isa> {
        let mut isas = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            let has = |f: &str| match f {
                "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
                _ => std::arch::is_x86_feature_detected!("avx2"),
            } && std::arch::is_x86_feature_detected!("fma");
            if has("avx2") {
                isas.push(Isa::Avx2);
            }
            if has("avx512f") {
                isas.push(Isa::Avx512);
            }
        }
        isas
    }

    #[test]
    fn products_of_every_tail_equal_a_float64_reference() {
        for isa in isas() {
            // Row counts across the block sizes, columns across the panel widths.
            for (m, k, n) in [
                (1, 3, 1),
                (7, 9, 17),
                (9, 24, 33),
                (13, 96, 48),
                (20, 16, 70),
                // K past a panel slice (256 rows for AVX-512, 512 else): sums of slices.
                (11, 600, 40),
                (3, 1100, 17),
            ] {
                let b = values(k * n, 1);
                let packed = PackedMatrix::pack_for(isa, &b, n);
                assert_eq!((packed.k(), packed.n()), (k, n));
                let lda = k + 3;
                let a = values(m * lda, 3);
                let ldc = n + 2;
                let mut c = vec![f32::NAN; m * ldc];
                matmul_packed(&a, lda, m, &packed, &mut c, ldc);
                let expected = reference(&a, lda, m, &b, k, n);
                let tolerance = 1e-5 * (k as f32 / 96.0).max(1.0);
                for i in 0..m {
                    for j in 0..n {
                        let (got, want) = (c[i * ldc + j], expected[i * n + j]);
                        assert!(
                            (got - want).abs() <= tolerance,
                            "{isa:?} m {m} n {n}: [{i}, {j}] {got} vs {want}"
                        );
                    }
                    // Columns past N are not written.
                    assert!(c[i * ldc + n].is_nan());
                }
            }
        }
    }
}
