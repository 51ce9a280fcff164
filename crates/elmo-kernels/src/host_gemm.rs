//! Matrix products on the host CPU for the LSTMP recurrence: the weight operand packed once into
//! column panels, then every step's `[B, K] · [K, N]` walks each panel once for all rows with a
//! register-blocked micro-kernel (the BLIS / GotoBLAS scheme: Van Zee & van de Geijn 2015),
//! compiled for AVX-512, AVX2 + FMA or plain SIMD and chosen at run time; the panels shared
//! among threads where the caller is one thread ([`matmul_packed_parallel`]).
//!
//! A general-purpose GEMM packs the weights again on every call; a recurrence multiplies by the
//! same weights at every step, so packing them once per sequence removes a full copy of the
//! weights from each step (32 MiB per step and direction for the `original` biLM).

use std::ops::Range;

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

    /// Rows per block of the micro-kernel.
    fn rows(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => 8,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => 6,
            Isa::Portable => 4,
        }
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

/// A matrix read in place: value `(i, j)` at `values[offset + i·row_stride + j·col_stride]`
/// (a transposed tensor has a column stride and unit row stride).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Strided<'a> {
    pub values: &'a [f32],
    pub offset: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> Strided<'a> {
    /// Row-major values with row stride `lda`.
    pub(crate) fn rows(values: &'a [f32], lda: usize) -> Self {
        Self {
            values,
            offset: 0,
            row_stride: lda,
            col_stride: 1,
        }
    }

    /// `len` values of row `i` from column `j` into `out[0], out[step], ...`.
    #[inline(always)]
    fn row_into(&self, i: usize, j: usize, len: usize, out: &mut [f32], step: usize) {
        let start = self.offset + i * self.row_stride + j * self.col_stride;
        if self.col_stride == 1 && step == 1 {
            out[..len].copy_from_slice(&self.values[start..start + len]);
            return;
        }
        for (c, at) in (0..len).zip((0..).step_by(step)) {
            out[at] = self.values[start + c * self.col_stride];
        }
    }

    /// Whether the values hold an `[m, n]` matrix (every index it reads is in them).
    fn holds(&self, m: usize, n: usize) -> bool {
        m == 0
            || n == 0
            || self.offset + (m - 1) * self.row_stride + (n - 1) * self.col_stride
                < self.values.len()
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
        Self::pack_strided(isa, Strided::rows(values, n), values.len() / n, n)
    }

    /// Packs a `[k, n]` matrix read in place (for the instruction set of this machine).
    pub(crate) fn pack_view(view: Strided, k: usize, n: usize) -> Self {
        Self::pack_strided(Isa::detect(), view, k, n)
    }

    fn pack_strided(isa: Isa, view: Strided, k: usize, n: usize) -> Self {
        use rayon::prelude::*;
        assert!(n > 0, "a matrix with columns");
        assert!(view.holds(k, n), "the values hold [k, n]");
        let panel = isa.panel();
        let n_panels = n.div_ceil(panel);
        let mut data = vec![0.0f32; n_panels * k * panel];
        // Panel by panel, on rayon's threads (a large weight is tens of MiB).
        data.par_chunks_mut((k * panel).max(1))
            .enumerate()
            .for_each(|(p, packed)| {
                let columns = panel.min(n - p * panel);
                for row in 0..k {
                    view.row_into(row, p * panel, columns, &mut packed[row * panel..], 1);
                }
            });
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

    /// Panels of `NR` columns.
    fn n_panels(&self) -> usize {
        self.n.div_ceil(self.panel)
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
    let a = row_major(a, lda, m, b);
    check_output(m, b, c.len(), ldc);
    let rows = PackedRows::pack(a, m, b, false);
    let store = |row: usize, column: usize, values: &[f32], add: bool| {
        let at = row * ldc + column;
        write(&mut c[at..at + values.len()], values, add);
    };
    dispatch(&rows, b, 0..b.n_panels(), store);
}

/// Rows of `a` per pass of [`matmul_packed_parallel`]: their packed copy stays in L2 (or L3
/// for a long `K`) while every panel of `b` passes.
const PASS_ROWS: usize = 256;

/// [`matmul_packed`] on rayon's threads: `a` in passes of 256 rows, each packed by all threads
/// and multiplied with the panels of `b` shared among them (each thread writes its own columns
/// of `c`). For products whose caller is one thread: a training step's, and large ones.
///
/// # Panics
/// When `a` or `c` is too short for `m` rows.
pub fn matmul_packed_parallel(
    a: &[f32],
    lda: usize,
    m: usize,
    b: &PackedMatrix,
    c: &mut [f32],
    ldc: usize,
) {
    if m == 0 {
        return;
    }
    matmul_view_parallel(row_major(a, lda, m, b), m, b, c, ldc);
}

/// [`matmul_packed_parallel`] for `a` read in place with any strides.
///
/// # Panics
/// When `a` or `c` is too short for `m` rows.
pub(crate) fn matmul_view_parallel(
    a: Strided,
    m: usize,
    b: &PackedMatrix,
    c: &mut [f32],
    ldc: usize,
) {
    use rayon::prelude::*;
    if m == 0 {
        return;
    }
    assert!(a.holds(m, b.k), "a is [m, K]");
    check_output(m, b, c.len(), ldc);
    let n_panels = b.n_panels();
    let n_tasks = rayon::current_num_threads().min(n_panels).max(1);
    let out = SharedOutput {
        values: c.as_mut_ptr(),
        len: c.len(),
    };
    for first_row in (0..m).step_by(PASS_ROWS) {
        let pass = PASS_ROWS.min(m - first_row);
        let view = Strided {
            offset: a.offset + first_row * a.row_stride,
            ..a
        };
        let rows = PackedRows::pack(view, pass, b, n_tasks > 1);
        (0..n_tasks).into_par_iter().for_each(|task| {
            let panels = task * n_panels / n_tasks..(task + 1) * n_panels / n_tasks;
            let (first, end) = (panels.start * b.panel, (panels.end * b.panel).min(b.n));
            let store = |row: usize, column: usize, values: &[f32], add: bool| {
                // Each task writes only the columns of its own panels.
                assert!(
                    first <= column && column + values.len() <= end,
                    "the task's columns"
                );
                let at = (first_row + row) * ldc + column;
                // SAFETY: `at + len` is within `c` (asserted); the tasks' panels, hence the
                // columns they write, are disjoint, and `c` is borrowed mutably for the call.
                write(unsafe { out.columns(at, values.len()) }, values, add);
            };
            dispatch(&rows, b, panels, store);
        });
    }
}

/// A block's values into `c`: replacing its values (a first slice of `K`) or added to them.
#[inline(always)]
fn write(c: &mut [f32], values: &[f32], add: bool) {
    match add {
        false => c.copy_from_slice(values),
        true => c.iter_mut().zip(values).for_each(|(c, v)| *c += v),
    }
}

/// `c` of [`matmul_packed_parallel`], written by several threads at disjoint columns.
struct SharedOutput {
    values: *mut f32,
    len: usize,
}

// SAFETY: the threads write disjoint ranges of the values (their own panels' columns).
unsafe impl Sync for SharedOutput {}

impl SharedOutput {
    /// # Safety
    /// No other thread reads or writes `at .. at + len` meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn columns(&self, at: usize, len: usize) -> &mut [f32] {
        assert!(at + len <= self.len, "within c");
        // SAFETY: in bounds (asserted); exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.values.add(at), len) }
    }
}

/// `m ≥ 1` rows of a row-major `a` with row stride `lda`, checked to hold `[m, K]`.
fn row_major<'a>(a: &'a [f32], lda: usize, m: usize, b: &PackedMatrix) -> Strided<'a> {
    assert!(lda >= b.k && a.len() >= (m - 1) * lda + b.k, "a is [m, K]");
    Strided::rows(a, lda)
}

/// Checks that `c` (length `c_len`, row stride `ldc`) holds the `[m, N]` product, `m ≥ 1`.
fn check_output(m: usize, b: &PackedMatrix, c_len: usize, ldc: usize) {
    assert!(ldc >= b.n && c_len >= (m - 1) * ldc + b.n, "c is [m, N]");
}

/// `m` rows of `a` packed in blocks of `MR` rows (the micro-kernel's, for `b`'s instruction
/// set), each block `K` steps of `MR` values (rows past `m` zero), so that a block reads one
/// contiguous stream.
struct PackedRows {
    m: usize,
    k: usize,
    data: Vec<f32>,
}

impl PackedRows {
    /// Packs `m` rows of `a` for products with `b`; the blocks on rayon's threads where
    /// `parallel`.
    fn pack(a: Strided, m: usize, b: &PackedMatrix, parallel: bool) -> Self {
        use rayon::prelude::*;
        let (k, mr) = (b.k, b.isa.rows());
        let mut data = vec![0.0f32; m.div_ceil(mr) * k * mr];
        let pack_block = |(blk, block): (usize, &mut [f32])| {
            for i in 0..mr.min(m - blk * mr) {
                a.row_into(blk * mr + i, 0, k, &mut block[i..], mr);
            }
        };
        match parallel {
            true => data.par_chunks_mut(k * mr).enumerate().for_each(pack_block),
            false => data.chunks_mut(k * mr).enumerate().for_each(pack_block),
        }
        Self { m, k, data }
    }
}

/// [`run`] with the micro-kernel of the instruction set `b` was packed for.
#[inline(always)]
fn dispatch(
    rows: &PackedRows,
    b: &PackedMatrix,
    panels: Range<usize>,
    store: impl FnMut(usize, usize, &[f32], bool),
) {
    match b.isa {
        // SAFETY: `b.isa` was detected on this machine when `b` was packed.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::matmul_avx512(rows, b, panels, store) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::matmul_avx2(rows, b, panels, store) },
        Isa::Portable => run::<16, 4>(rows, b, panels, store, block_portable::<16, 4>),
    }
}

/// For every panel of `panels`, every slice of its rows (`kc_for` rows of `K`, which stay in
/// L1 while the blocks pass) and every block of `rows`, `block(a_slice, panel_slice,
/// panel_stride, out)` computes the `MR × NR` product of the slice into `out`, whose real rows
/// and columns go to `store(row, column, values, add)` (`add`: false for the first slice, whose
/// values replace `c`'s, true for the others, added to them). `panel_stride` is the distance to
/// the same row of the next panel, for the prefetch.
#[inline(always)]
fn run<const NR: usize, const MR: usize>(
    rows: &PackedRows,
    b: &PackedMatrix,
    panels: Range<usize>,
    mut store: impl FnMut(usize, usize, &[f32], bool),
    mut block: impl FnMut(&[f32], &[f32], usize, &mut [[f32; NR]; MR]),
) {
    assert_eq!(b.panel, NR, "b packed for this kernel");
    assert_eq!(rows.k, b.k, "rows of a packed against b");
    let (k, n, m) = (b.k, b.n, rows.m);
    let kc = kc_for::<NR>().min(k).max(1);
    let mut out = [[0.0f32; NR]; MR];
    for p in panels {
        let columns = NR.min(n - p * NR);
        // The panel's rows a slice of K at a time, so that the slice stays in L1 while every
        // block of `a` passes over it; the slices' sums add up in `c`.
        for start in (0..k).step_by(kc) {
            let len = kc.min(k - start);
            let b_slice = &b.data[p * k * NR + start * NR..];
            for (blk, a_block) in rows.data.chunks_exact(k * MR).enumerate() {
                block(
                    &a_block[start * MR..(start + len) * MR],
                    b_slice,
                    k * NR,
                    &mut out,
                );
                let real = MR.min(m - blk * MR);
                for (i, values) in out.iter().take(real).enumerate() {
                    store(blk * MR + i, p * NR, &values[..columns], start > 0);
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
    use std::ops::Range;

    use super::{PackedMatrix, PackedRows, run};

    macro_rules! micro_kernel {
        ($matmul:ident, $name:ident, $features:literal, $mr:literal, $nr:literal, $half:literal,
         $zero:ident, $load:ident, $set1:ident, $fmadd:ident, $store:ident) => {
            /// # Safety
            #[doc = concat!("`", $features, "` present and `b` packed for it.")]
            #[target_feature(enable = $features)]
            pub unsafe fn $matmul(
                rows: &PackedRows,
                b: &PackedMatrix,
                panels: Range<usize>,
                store: impl FnMut(usize, usize, &[f32], bool),
            ) {
                // SAFETY: the features are enabled here; `run` hands the block a packed block
                // of `a` and a panel of `K` rows.
                run::<$nr, $mr>(rows, b, panels, store, |a, panel, stride, out| unsafe {
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

    /// The product on several threads, in passes of rows, with `a` read through strides (a
    /// transposed view: unit row stride) and `b` packed from one, equals the reference: every
    /// column of `c` written once (by the thread of its panel), the rows of every pass.
    #[test]
    fn parallel_products_of_strided_operands_equal_a_float64_reference() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (m, k, n) in [
            (1, 5, 3),
            (7, 40, 100),
            (PASS_ROWS + 9, 30, 70),
            (300, 600, 33),
        ] {
            // `a` stored transposed, [k, m] row-major with 2 extra columns; `b` as [n, k].
            let (lda_t, ldb_t) = (m + 2, k + 1);
            let a_t = values(k * lda_t, 5);
            let b_t = values(n * ldb_t, 6);
            let a: Vec<f32> = (0..m * k).map(|x| a_t[(x % k) * lda_t + x / k]).collect();
            let b: Vec<f32> = (0..k * n).map(|x| b_t[(x % n) * ldb_t + x / n]).collect();
            let transposed = |values, stride| Strided {
                values,
                offset: 0,
                row_stride: 1,
                col_stride: stride,
            };
            let packed = PackedMatrix::pack_view(transposed(&b_t, ldb_t), k, n);
            let ldc = n + 1;
            let mut c = vec![f32::NAN; m * ldc];
            pool.install(|| matmul_view_parallel(transposed(&a_t, lda_t), m, &packed, &mut c, ldc));
            let expected = reference(&a, k, m, &b, k, n);
            let tolerance = 1e-5 * (k as f32 / 96.0).max(1.0);
            for i in 0..m {
                for j in 0..n {
                    let (got, want) = (c[i * ldc + j], expected[i * n + j]);
                    assert!(
                        (got - want).abs() <= tolerance,
                        "m {m} n {n}: [{i}, {j}] {got} vs {want}"
                    );
                }
                assert!(c[i * ldc + n].is_nan(), "columns past N are not written");
            }
            // The same through the row-major entry point.
            let mut rows = vec![0.0f32; m * n];
            pool.install(|| matmul_packed_parallel(&a, k, m, &packed, &mut rows, n));
            for i in 0..m {
                assert_eq!(&rows[i * n..(i + 1) * n], &c[i * ldc..i * ldc + n]);
            }
        }
    }
}
