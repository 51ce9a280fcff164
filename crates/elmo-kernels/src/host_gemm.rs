//! Matrix products on the host CPU for the LSTMP recurrence: the weight operand packed once into
//! column panels, then every step's `[B, K] · [K, N]` walks each panel once for all rows with a
//! register-blocked micro-kernel (the BLIS / GotoBLAS scheme: Van Zee & van de Geijn 2015),
//! compiled for AVX-512, AVX2 + FMA or plain SIMD and chosen at run time (the widest this CPU
//! has, up to a [`HostInstructions`] limit); the panels shared among threads where the caller is
//! one thread ([`matmul_packed_parallel`]).
//!
//! A general-purpose GEMM packs the weights again on every call; a recurrence multiplies by the
//! same weights at every step, so packing them once per sequence removes a full copy of the
//! weights from each step (32 MiB per step and direction for the `original` biLM).

use std::mem::MaybeUninit;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::line_aligned::LineAligned;

/// The widest instruction set the host kernels (the products' micro-kernels, the LSTM cell
/// passes, the char CNN's backward loops) use on an x86-64 CPU: each is compiled for AVX-512,
/// AVX2 with FMA and the target's default, and runs the widest this CPU has up to this limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostInstructions {
    /// The widest this CPU has (the default), AMX's tiles included.
    #[default]
    Widest,
    /// AVX-512 at most, AMX's tiles left out (for `bf16` products, AVX-512's `bf16` dot
    /// products where the CPU has them: AMD's Zen 4 and 5 have no wider).
    Avx512,
    /// AVX2 with FMA at most (AMD's Zen 1-3 and Intel's CPUs before AVX-512 have no wider).
    Avx2,
    /// What the target compiles to by default (SSE2 on x86-64).
    Portable,
}

impl HostInstructions {
    /// Every limit that picks its own `f32` kernels, widest first: for running each one this
    /// CPU has (tests, benchmarks). [`Self::Avx512`] is left out: it picks `Widest`'s `f32`
    /// kernels and differs only in the `bf16` unit (`crate::Bf16Unit::at_most`).
    pub const EVERY: [Self; 3] = [Self::Widest, Self::Avx2, Self::Portable];
}

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
    /// The widest this CPU has up to `limit`.
    pub(crate) fn at_most(limit: HostInstructions) -> Self {
        match limit {
            HostInstructions::Widest | HostInstructions::Avx512 => Self::detect(),
            #[cfg(target_arch = "x86_64")]
            HostInstructions::Avx2 if Self::detect() != Isa::Portable => Isa::Avx2,
            _ => Isa::Portable,
        }
    }

    /// The widest this CPU has.
    fn detect() -> Self {
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

/// `$dispatch(isa, args)`: the pass `$pass` (an `#[inline(always)]` function of one argument
/// of type `$args`) compiled for AVX-512, AVX2 with FMA and the target's default, run in the
/// one `isa` names: the host loops that the compiler vectorises themselves (the LSTM's cell
/// passes, Adagrad's update). With `$pass::<FUSED>` the pass takes a `const FUSED: bool`: `true`
/// where the instruction set has FMA (its [`mul_add`] one instruction), else [`PORTABLE_FMA`].
macro_rules! pass_for_isa {
    ($dispatch:ident, $pass:ident, $args:ident) => {
        $crate::host_gemm::pass_for_isa!(@ $dispatch, $args, $pass, $pass, $pass);
    };
    ($dispatch:ident, $pass:ident::<FUSED>, $args:ident) => {
        $crate::host_gemm::pass_for_isa!(
            @ $dispatch,
            $args,
            $pass::<true>,
            $pass::<true>,
            $pass::<{ $crate::host_gemm::PORTABLE_FMA }>
        );
    };
    (@ $dispatch:ident, $args:ident, $avx512:expr, $avx2:expr, $portable:expr) => {
        fn $dispatch(isa: $crate::host_gemm::Isa, args: $args) {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,fma")]
            unsafe fn avx512(args: $args) {
                ($avx512)(args)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2(args: $args) {
                ($avx2)(args)
            }
            match isa {
                // SAFETY: an `Isa` names an instruction set detected on this machine
                // (`Isa::at_most`).
                #[cfg(target_arch = "x86_64")]
                $crate::host_gemm::Isa::Avx512 => unsafe { avx512(args) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::host_gemm::Isa::Avx2 => unsafe { avx2(args) },
                $crate::host_gemm::Isa::Portable => ($portable)(args),
            }
        }
    };
}
pub(crate) use pass_for_isa;

/// Whether the target's default instruction set (the portable passes') has a fused
/// multiply-add: AArch64's, or x86-64 built with `fma`. Without one, [`mul_add`] multiplies and
/// adds, where `f32::mul_add` would call the C library's `fmaf` for every value.
pub(crate) const PORTABLE_FMA: bool = cfg!(any(target_arch = "aarch64", target_feature = "fma"));

/// `a·b + c`: rounded once where `FUSED` (one FMA instruction in the passes of
/// [`pass_for_isa`] that have one), else rounded after the product and after the sum.
#[inline(always)]
pub(crate) fn mul_add<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    match FUSED {
        true => a.mul_add(b, c),
        false => a * b + c,
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

    /// The `[rows, cols]` block at `(row0, col0)` into `out[r·out_row + c·out_col]`, read in
    /// runs of up to [`TILE_RUN`] values along the view's unit stride (down the columns of a
    /// transposed view), each run for every line of the other dimension before the next: a
    /// transposing copy then reads whole cache lines and writes within a few KiB. Every value
    /// of the block is written.
    ///
    /// # Panics
    /// When the view does not hold the block or `out` is too short for it.
    fn copy_block(
        &self,
        (row0, rows): (usize, usize),
        (col0, cols): (usize, usize),
        out: &mut [MaybeUninit<f32>],
        (out_row, out_col): (usize, usize),
    ) {
        if rows == 0 || cols == 0 {
            return;
        }
        // Runs along columns (within a row), or down rows where that is the unit stride.
        let down = self.row_stride == 1 && self.col_stride != 1;
        let (lines, run_len, line, step, out_line, out_step) = match down {
            false => (
                rows,
                cols,
                self.row_stride,
                self.col_stride,
                out_row,
                out_col,
            ),
            true => (
                cols,
                rows,
                self.col_stride,
                self.row_stride,
                out_col,
                out_row,
            ),
        };
        let start = self.offset + row0 * self.row_stride + col0 * self.col_stride;
        let block = Strided {
            offset: start,
            ..*self
        };
        assert!(block.holds(rows, cols), "the view holds the block");
        assert!(
            (lines - 1) * out_line + (run_len - 1) * out_step < out.len(),
            "out holds the block"
        );
        // In the transposing copy below, eight lines into eight values a position (a block of
        // AVX-512's micro-kernel rows): eight positions at a time through a transpose in
        // registers.
        #[cfg(target_arch = "x86_64")]
        let by_eight = lines == 8 && out_step == 8 && std::arch::is_x86_feature_detected!("avx");
        for first in (0..run_len).step_by(TILE_RUN) {
            let len = TILE_RUN.min(run_len - first);
            if step == 1 && out_line == 1 && out_step != 1 {
                // A transposing copy: the runs' values at one position, across the lines (in
                // L1 after the first position), to one contiguous stretch of `out`.
                #[allow(unused_mut)]
                let mut from = first;
                #[cfg(target_arch = "x86_64")]
                if by_eight {
                    while from + 8 <= first + len {
                        // SAFETY: AVX is detected; the view holds the block and `out` its
                        // copy (both asserted above), so lines 0-7 at positions `from ..
                        // from + 8` are read within `values` and written within `out`
                        // (`out_step` 8, `out_line` 1).
                        unsafe {
                            x86::transpose_8x8(
                                self.values.as_ptr().add(start + from),
                                line,
                                out.as_mut_ptr().add(from * 8).cast(),
                            )
                        };
                        from += 8;
                    }
                }
                for i in from..first + len {
                    let to = &mut out[i * out_step..i * out_step + lines];
                    for (l, to) in to.iter_mut().enumerate() {
                        to.write(self.values[start + l * line + i]);
                    }
                }
                continue;
            }
            for l in 0..lines {
                let from = &self.values[start + l * line + first * step..];
                let to = &mut out[l * out_line + first * out_step..];
                match (step, out_step) {
                    (1, 1) => to[..len]
                        .iter_mut()
                        .zip(&from[..len])
                        .for_each(|(to, v)| _ = to.write(*v)),
                    _ => {
                        let (to, from) =
                            (&mut to[..=(len - 1) * out_step], &from[..=(len - 1) * step]);
                        for i in 0..len {
                            to[i * out_step].write(from[i * step]);
                        }
                    }
                }
            }
        }
    }

    /// Whether the values hold an `[m, n]` matrix (every index it reads is in them).
    pub(crate) fn holds(&self, m: usize, n: usize) -> bool {
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
    data: LineAligned<f32>,
}

impl PackedMatrix {
    /// Packs a row-major `[k, n]` matrix for the products of the widest instruction set this
    /// CPU has up to `limit` ([`HostInstructions::Widest`]: the widest it has).
    ///
    /// # Panics
    /// When the length of `values` is not a multiple of `n`.
    pub fn pack_limited(values: &[f32], n: usize, limit: HostInstructions) -> Self {
        Self::pack_for(Isa::at_most(limit), values, n)
    }

    fn pack_for(isa: Isa, values: &[f32], n: usize) -> Self {
        assert!(
            n > 0 && values.len().is_multiple_of(n),
            "whole rows of {n} columns"
        );
        Self::pack_strided(isa, Strided::rows(values, n), values.len() / n, n)
    }

    /// Packs a `[k, n]` matrix read in place, for the widest instruction set this CPU has up to
    /// `limit`.
    pub(crate) fn pack_view(view: Strided, k: usize, n: usize, limit: HostInstructions) -> Self {
        Self::pack_strided(Isa::at_most(limit), view, k, n)
    }

    fn pack_strided(isa: Isa, view: Strided, k: usize, n: usize) -> Self {
        assert!(n > 0, "a matrix with columns");
        assert!(view.holds(k, n), "the values hold [k, n]");
        let panel = isa.panel();
        let n_panels = n.div_ceil(panel);
        // Panel by panel, on rayon's threads (a large weight is tens of MiB).
        let data = filled(n_panels * k * panel, k * panel, true, |p, packed| {
            let columns = panel.min(n - p * panel);
            view.copy_block((0, k), (p * panel, columns), packed, (panel, 1));
            for row in packed.chunks_exact_mut(panel) {
                row[columns..].fill(MaybeUninit::new(0.0));
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
    // SAFETY: the product writes `f32` values.
    let c = unsafe { as_written(c) };
    if b.k == 0 {
        return zero_product(c, m, b.n, ldc);
    }
    let rows = PackedRows::pack(a, m, b, false);
    // SAFETY: `c` holds the `[m, N]` product (checked) and is borrowed mutably for the call.
    unsafe { dispatch(&rows, b, 0..b.n_panels(), Output::of(c, ldc)) };
}

/// `c` as memory for a product to write, as the products that need not find their output
/// initialised take it.
///
/// # Safety
/// Only `f32` values are written through the result (as this crate's products write), never
/// an uninitialised one, so that `c` stays initialised.
pub(crate) unsafe fn as_written(c: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout; the caller writes only `f32` values.
    unsafe { &mut *(c as *mut [f32] as *mut [MaybeUninit<f32>]) }
}

/// A product with an empty inner dimension: its `[m, n]` values (row stride `ldc`), all zero.
pub(crate) fn zero_product(c: &mut [MaybeUninit<f32>], m: usize, n: usize, ldc: usize) {
    for row in 0..m {
        c[row * ldc..row * ldc + n].fill(MaybeUninit::new(0.0));
    }
}

/// The threads that [`matmul_packed_parallel`] shares a product among: those of rayon's pool
/// that the calling thread would use (the global pool unless the caller runs in another).
pub fn host_threads() -> usize {
    rayon::current_num_threads()
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
    // SAFETY: the product writes `f32` values.
    let c = unsafe { as_written(c) };
    matmul_view_parallel(row_major(a, lda, m, b), m, b, c, ldc);
}

/// [`matmul_packed_parallel`] for `a` read in place with any strides, into `c` that need not
/// be initialised: every value of its `[m, N]` product (row stride `ldc`) is written, none
/// read first.
///
/// # Panics
/// When `a` or `c` is too short for `m` rows.
pub(crate) fn matmul_view_parallel(
    a: Strided,
    m: usize,
    b: &PackedMatrix,
    c: &mut [MaybeUninit<f32>],
    ldc: usize,
) {
    use rayon::prelude::*;
    if m == 0 {
        return;
    }
    assert!(a.holds(m, b.k), "a is [m, K]");
    check_output(m, b, c.len(), ldc);
    if b.k == 0 {
        return zero_product(c, m, b.n, ldc);
    }
    let shares = panel_shares(b.n_panels());
    let out = Output::of(c, ldc);
    for first_row in (0..m).step_by(PASS_ROWS) {
        let pass = PASS_ROWS.min(m - first_row);
        let view = Strided {
            offset: a.offset + first_row * a.row_stride,
            ..a
        };
        let rows = PackedRows::pack(view, pass, b, shares.len() > 1);
        let out = Output { first_row, ..out };
        shares.par_iter().for_each(|panels| {
            // SAFETY: `c` holds the `[m, N]` product (checked) and is borrowed mutably for the
            // call; the tasks' panels, hence the columns they write, are disjoint.
            unsafe { dispatch(&rows, b, panels.clone(), out) };
        });
    }
}

/// `n_panels` panels cut into one contiguous share per thread of rayon's pool (fewer where
/// there are fewer panels, at least one): the tasks of a product whose threads each write
/// their own panels' columns.
pub(crate) fn panel_shares(n_panels: usize) -> Vec<Range<usize>> {
    let n_tasks = rayon::current_num_threads().min(n_panels).max(1);
    (0..n_tasks)
        .map(|task| task * n_panels / n_tasks..(task + 1) * n_panels / n_tasks)
        .collect()
}

/// Where [`run`] writes the product: `c`, its row `first_row + i` for row `i` of the packed
/// rows, `ldc` values a row. The threads of [`matmul_view_parallel`] share one, each writing
/// the columns of its own panels.
#[derive(Debug, Clone, Copy)]
struct Output {
    values: *mut f32,
    len: usize,
    ldc: usize,
    first_row: usize,
}

// SAFETY: the threads that share an `Output` write disjoint columns of it (their own panels'),
// and its values outlive them (`c` is borrowed mutably for the call that spawns them).
unsafe impl Send for Output {}
// SAFETY: as above.
unsafe impl Sync for Output {}

impl Output {
    /// `c` from its first row.
    fn of(c: &mut [MaybeUninit<f32>], ldc: usize) -> Self {
        Self {
            values: c.as_mut_ptr().cast(),
            len: c.len(),
            ldc,
            first_row: 0,
        }
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
    data: LineAligned<f32>,
}

impl PackedRows {
    /// Packs `m` rows of `a` for products with `b`; the blocks on rayon's threads where
    /// `parallel`.
    fn pack(a: Strided, m: usize, b: &PackedMatrix, parallel: bool) -> Self {
        let (k, mr) = (b.k, b.isa.rows());
        let data = filled(m.div_ceil(mr) * k * mr, k * mr, parallel, |blk, block| {
            let real = mr.min(m - blk * mr);
            a.copy_block((blk * mr, real), (0, k), block, (1, mr));
            for step in block.chunks_exact_mut(mr) {
                step[real..].fill(MaybeUninit::new(0.0));
            }
        });
        Self { m, k, data }
    }
}

/// Values per run of [`Strided::copy_block`] (four cache lines).
const TILE_RUN: usize = 64;

/// `len` values made chunk by chunk (`chunk` values each, the last one shorter), on rayon's
/// threads where `parallel`: `fill(index, chunk)` writes every value of its chunk. Packed
/// operands are written whole, so their memory is not zeroed first (a third of the time of
/// packing a weight, where the allocator hands back memory that a product freed), and start a
/// cache line, as the micro-kernels load them.
fn filled(
    len: usize,
    chunk: usize,
    parallel: bool,
    fill: impl Fn(usize, &mut [MaybeUninit<f32>]) + Sync,
) -> LineAligned<f32> {
    use rayon::prelude::*;
    // SAFETY: the chunks cover every value, and `fill` writes every value of its chunk.
    unsafe {
        LineAligned::written(len, |values| match parallel {
            true => (values.par_chunks_mut(chunk.max(1)).enumerate())
                .for_each(|(index, chunk)| fill(index, chunk)),
            false => (values.chunks_mut(chunk.max(1)).enumerate())
                .for_each(|(index, chunk)| fill(index, chunk)),
        })
    }
}

/// [`run`] with the micro-kernel of the instruction set `b` was packed for.
///
/// # Safety
/// As [`run`]'s.
#[inline(always)]
unsafe fn dispatch(rows: &PackedRows, b: &PackedMatrix, panels: Range<usize>, out: Output) {
    match b.isa {
        // SAFETY: `b.isa` was detected on this machine when `b` was packed; `out` as the caller
        // guarantees.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::matmul_avx512(rows, b, panels, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::matmul_avx2(rows, b, panels, out) },
        // SAFETY: `out` as the caller guarantees; the portable kernel runs everywhere.
        Isa::Portable => unsafe {
            run::<16, 4>(
                rows,
                b,
                panels,
                out,
                |a, panel, stride, c, ldc, accumulate, _| {
                    block_portable::<16, 4>(a, panel, stride, c, ldc, accumulate)
                },
            )
        },
    }
}

/// For every group of panels of `panels` (as many as keep their columns of `c` for all rows
/// in [`GROUP_BYTES`]), every slice of `K` (`kc_for` rows, which stay in L1 while the blocks
/// pass), every panel of the group and every block of `rows`: `block(a_slice, panel_slice,
/// panel_stride, tile, ldc, accumulate, real)` computes the product of the slices (the first
/// `real` of the block's `MR` rows at least) into the tile of `c` at `tile` (row stride `ldc`),
/// added to the tile's values where `accumulate` (the slices after the first). Tiles at the
/// edge of `c` (fewer rows or columns) go through a copy of their values, with the same
/// arithmetic; a block of fewer than `MR` rows (a product of one row, a batch's last block)
/// need not compute its padding rows. `panel_stride` is the distance to the same row of
/// the next panel, for the prefetch.
///
/// The slices of `K` outside the panels: the packed rows of `a` are read once per slice and
/// panel, a slice of them at a time (`m · kc` values, in L2), where a panel's whole `K` of
/// them (for a step's `∂z·Wᵀ` at `original`'s widths, `[32, 16,384]`: 2 MiB a panel) would
/// come from L3 again for every panel.
///
/// # Safety
/// `out` holds the `rows.m` rows from `out.first_row` with the columns of `panels`' panels,
/// which no other thread reads or writes meanwhile; `block` is called with a tile of `MR` rows
/// of `NR` values (row stride `ldc`) that it may read and write.
#[inline(always)]
unsafe fn run<const NR: usize, const MR: usize>(
    rows: &PackedRows,
    b: &PackedMatrix,
    panels: Range<usize>,
    out: Output,
    mut block: impl FnMut(&[f32], &[f32], usize, *mut f32, usize, bool, usize),
) {
    assert_eq!(b.panel, NR, "b packed for this kernel");
    assert_eq!(rows.k, b.k, "rows of a packed against b");
    let (k, n, m) = (b.k, b.n, rows.m);
    let kc = kc_for::<NR>().min(k).max(1);
    let ldc = out.ldc;
    let mut edge = [[0.0f32; NR]; MR];
    let group = (GROUP_BYTES / (m * NR * size_of::<f32>()).max(1)).max(1);
    for first in panels.clone().step_by(group) {
        let group = first..(first + group).min(panels.end);
        // A slice of K at a time for every panel of the group; the slices' sums add up in `c`.
        for start in (0..k).step_by(kc) {
            let len = kc.min(k - start);
            let accumulate = start > 0;
            for p in group.clone() {
                let columns = NR.min(n - p * NR);
                // The panel's slice stays in L1 while every block of `a` passes over it.
                let b_slice = &b.data[p * k * NR + start * NR..];
                for (blk, a_block) in rows.data.chunks_exact(k * MR).enumerate() {
                    let a_slice = &a_block[start * MR..(start + len) * MR];
                    let real = MR.min(m - blk * MR);
                    let at = (out.first_row + blk * MR) * ldc + p * NR;
                    assert!(
                        at + (real - 1) * ldc + columns <= out.len,
                        "the tile within c"
                    );
                    if real == MR && columns == NR {
                        // SAFETY: the tile is within `c` (asserted) and this caller's (the
                        // function's contract).
                        block(
                            a_slice,
                            b_slice,
                            k * NR,
                            unsafe { out.values.add(at) },
                            ldc,
                            accumulate,
                            MR,
                        );
                        continue;
                    }
                    // SAFETY: as above, for the tile's real rows and columns (raw copies: before
                    // the first slice's products `c` may hold no values yet).
                    let c_row = |i: usize| unsafe { out.values.add(at + i * ldc) };
                    if accumulate {
                        for (i, values) in edge.iter_mut().take(real).enumerate() {
                            // SAFETY: the tile's row, written by the earlier slices.
                            unsafe {
                                c_row(i).copy_to_nonoverlapping(values.as_mut_ptr(), columns)
                            };
                        }
                    }
                    block(
                        a_slice,
                        b_slice,
                        k * NR,
                        edge.as_mut_ptr().cast(),
                        NR,
                        accumulate,
                        real,
                    );
                    for (i, values) in edge.iter().take(real).enumerate() {
                        // SAFETY: the tile's row, within `c` and this caller's.
                        unsafe { c_row(i).copy_from_nonoverlapping(values.as_ptr(), columns) };
                    }
                }
            }
        }
    }
}

/// Bytes of `c` (all rows, a group's panels' columns) that a group of panels accumulates while
/// the slices of `K` pass: half or less of the 512 KiB-2 MiB L2 of current x86-64 cores.
const GROUP_BYTES: usize = 256 * 1024;

/// Bytes of a panel's slice that the blocks of `a` pass over while it stays in L1 (32 KiB of
/// the 32-48 KiB L1 data caches of current x86-64 cores; the rest holds the block of `a`).
const SLICE_BYTES: usize = 32 * 1024;

/// Rows of `K` per slice of a panel of `NR` columns (256 for AVX-512's 32 columns).
fn kc_for<const NR: usize>() -> usize {
    SLICE_BYTES / (NR * size_of::<f32>())
}

/// The portable kernel: `MR × NR` accumulators, what the compiler makes of plain loops (with
/// fused multiply-adds where the target has them, as AArch64 does: one `FMLA` where a multiply
/// and an add would be two).
///
/// # Safety
/// `c` holds `MR` rows of `NR` values with row stride `ldc`, which the caller may read and
/// write.
unsafe fn block_portable<const NR: usize, const MR: usize>(
    a: &[f32],
    panel: &[f32],
    _panel_stride: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    // SAFETY: row `i` of the tile, within it by the function's contract.
    let row = |i: usize| unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), NR) };
    let mut acc = [[0.0f32; NR]; MR];
    if accumulate {
        for (i, acc) in acc.iter_mut().enumerate() {
            acc.copy_from_slice(row(i));
        }
    }
    for (x, b) in a.chunks_exact(MR).zip(panel.chunks_exact(NR)) {
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] = mul_add::<PORTABLE_FMA>(x[i], b[j], acc[i][j]);
            }
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        row(i).copy_from_slice(acc);
    }
}

/// The x86-64 micro-kernels: `8 × 32` (AVX-512) or `6 × 16` (AVX2) accumulators in registers
/// over all of `K` (two vectors per row), one broadcast of `a` per row and step of `K`, the same
/// rows of the next panel prefetched towards L2 for the next pass (a prefetch past the last
/// panel reads nothing).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{Output, PackedMatrix, PackedRows, run};

    /// Eight values of each of eight lines (`src`, `src + stride`, ...) written position by
    /// position, `dst[8·j + l]` = line `l`'s value `j`: an 8 × 8 transpose in AVX registers.
    ///
    /// # Safety
    /// AVX is available; `src + l·stride + j` for `l, j < 8` is readable and `dst .. dst + 64`
    /// writable.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn transpose_8x8(src: *const f32, stride: usize, dst: *mut f32) {
        // SAFETY: within the reads and writes the caller guarantees.
        unsafe {
            let row = |l: usize| _mm256_loadu_ps(src.add(l * stride));
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            let (r4, r5, r6, r7) = (row(4), row(5), row(6), row(7));
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let columns = [
                _mm256_permute2f128_ps::<0x20>(s0, s4),
                _mm256_permute2f128_ps::<0x20>(s1, s5),
                _mm256_permute2f128_ps::<0x20>(s2, s6),
                _mm256_permute2f128_ps::<0x20>(s3, s7),
                _mm256_permute2f128_ps::<0x31>(s0, s4),
                _mm256_permute2f128_ps::<0x31>(s1, s5),
                _mm256_permute2f128_ps::<0x31>(s2, s6),
                _mm256_permute2f128_ps::<0x31>(s3, s7),
            ];
            for (j, column) in columns.into_iter().enumerate() {
                _mm256_storeu_ps(dst.add(8 * j), column);
            }
        }
    }

    macro_rules! micro_kernel {
        ($matmul:ident, $name:ident, $features:literal, $mr:literal, [$($fewer:literal),*],
         $nr:literal, $half:literal, $zero:ident, $load:ident, $set1:ident, $fmadd:ident,
         $store:ident) => {
            /// # Safety
            #[doc = concat!("`", $features, "` present and `b` packed for it.")]
            #[target_feature(enable = $features)]
            pub unsafe fn $matmul(
                rows: &PackedRows,
                b: &PackedMatrix,
                panels: Range<usize>,
                out: Output,
            ) {
                // SAFETY: `out` as the caller guarantees; the features are enabled here, and
                // `run` hands the block a packed block of `a`, a panel of `K` rows and a tile.
                // A block of fewer rows computes only those (one FMA per row and vector: a
                // product of one row is bound by reading `b`, not by the padding's FMAs).
                unsafe {
                    run::<$nr, $mr>(
                        rows,
                        b,
                        panels,
                        out,
                        |a, panel, stride, c, ldc, accumulate, real| match real {
                            $($fewer => $name::<$fewer>(a, panel, stride, c, ldc, accumulate),)*
                            _ => $name::<$mr>(a, panel, stride, c, ldc, accumulate),
                        },
                    )
                }
            }

            /// The first `R` rows (of the block's
            #[doc = concat!($mr, ") of the tile.")]
            ///
            /// # Safety
            #[doc = concat!("`", $features, "` present; `a` holds `K × ", $mr,
                                                    "` packed values and `panel` `K × ", $nr,
                                                    "`; `c` holds `R` ≤ ", $mr, " rows of ", $nr,
                                                    " values with row stride `ldc`, which the \
                                                    caller may read and write.")]
            #[target_feature(enable = $features)]
            pub unsafe fn $name<const R: usize>(
                a: &[f32],
                panel: &[f32],
                panel_stride: usize,
                c: *mut f32,
                ldc: usize,
                accumulate: bool,
            ) {
                let k = a.len() / $mr;
                assert!(panel.len() >= $nr * k, "the panel holds K rows");
                let (a, b) = (a.as_ptr(), panel.as_ptr());
                let mut low = [$zero(); $mr];
                let mut high = [$zero(); $mr];
                if accumulate {
                    for i in 0..R {
                        // SAFETY: row `i` of the tile, by the function's contract.
                        unsafe {
                            low[i] = $load(c.add(i * ldc));
                            high[i] = $load(c.add(i * ldc + $half));
                        }
                    }
                }
                for p in 0..k {
                    // SAFETY: in bounds by the function's contract.
                    unsafe {
                        let next = b.wrapping_add(panel_stride + p * $nr);
                        _mm_prefetch::<_MM_HINT_T1>(next as *const i8);
                        _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add($half) as *const i8);
                        let b0 = $load(b.add(p * $nr));
                        let b1 = $load(b.add(p * $nr + $half));
                        for i in 0..R {
                            let x = $set1(*a.add(p * $mr + i));
                            low[i] = $fmadd(x, b0, low[i]);
                            high[i] = $fmadd(x, b1, high[i]);
                        }
                    }
                }
                for i in 0..R {
                    // SAFETY: row `i` of the tile, by the function's contract.
                    unsafe {
                        $store(c.add(i * ldc), low[i]);
                        $store(c.add(i * ldc + $half), high[i]);
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
        [1, 2, 3, 4, 5, 6, 7],
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
        [1, 2, 3, 4, 5],
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
        let mut isas = HostInstructions::EVERY.map(Isa::at_most).to_vec();
        isas.dedup();
        isas
    }

    #[test]
    fn products_of_every_tail_equal_a_float64_reference() {
        for isa in isas() {
            // Row counts across the block sizes, columns across the panel widths.
            for (m, k, n) in [
                (1, 3, 1),
                (2, 5, 40),
                (6, 300, 33),
                (7, 9, 17),
                (9, 24, 33),
                (13, 96, 48),
                (20, 16, 70),
                // K past a panel slice (256 rows for AVX-512, 512 else): sums of slices.
                (11, 600, 40),
                (3, 1100, 17),
                // Enough rows for several groups of panels (their columns of `c` past
                // `GROUP_BYTES`), each group summing its slices of K before the next.
                (520, 300, 200),
                // No inner dimension: a product of zeros, written as any other.
                (4, 0, 37),
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

    /// `copy_block` writes every value of a block and nothing else, for views and outputs of
    /// every stride layout: row-major, transposed (unit row stride) and neither (the general
    /// path), blocks longer than one run of `TILE_RUN`.
    #[test]
    fn blocks_are_copied_whole_through_any_strides() {
        let (rows, cols) = (70, 150);
        let source = values(3 * rows * cols, 7);
        let views = [(0, cols, 1), (5, 1, rows), (1, 2 * cols + 1, 2)];
        for (offset, row_stride, col_stride) in views {
            let view = Strided {
                values: &source,
                offset,
                row_stride,
                col_stride,
            };
            let ((row0, n_rows), (col0, n_cols)) = ((3, 66), (7, 140));
            for (out_row, out_col) in [(n_cols + 2, 1), (1, n_rows + 1), (2 * n_cols, 2)] {
                let len = (n_rows - 1) * out_row + (n_cols - 1) * out_col + 5;
                let mut out = vec![MaybeUninit::new(f32::NAN); len];
                view.copy_block((row0, n_rows), (col0, n_cols), &mut out, (out_row, out_col));
                // SAFETY: every value was initialised (NaN, or written by the copy).
                let out: Vec<f32> = out
                    .into_iter()
                    .map(|v| unsafe { v.assume_init() })
                    .collect();
                let mut written = 0;
                for r in 0..n_rows {
                    for c in 0..n_cols {
                        let want =
                            source[offset + (row0 + r) * row_stride + (col0 + c) * col_stride];
                        assert_eq!(
                            out[r * out_row + c * out_col],
                            want,
                            "strides ({row_stride}, {col_stride}) to ({out_row}, {out_col}): [{r}, {c}]"
                        );
                        written += 1;
                    }
                }
                let untouched = out.iter().filter(|v| v.is_nan()).count();
                assert_eq!(untouched + written, len, "only the block is written");
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
            let packed =
                PackedMatrix::pack_view(transposed(&b_t, ldb_t), k, n, HostInstructions::Widest);
            let ldc = n + 1;
            let mut c = vec![f32::NAN; m * ldc];
            // SAFETY: the product writes `f32` values.
            let out = unsafe { as_written(&mut c) };
            pool.install(|| matmul_view_parallel(transposed(&a_t, lda_t), m, &packed, out, ldc));
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
