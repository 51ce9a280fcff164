//! The operands of the host CPU's `bf16` products ([`Precision::Mixed`](crate::Precision)'s
//! products on a CPU, as a GPU's tensor cores run them; `crate::host_bf16_product`): the weight
//! rounded to `bf16` (nearest, ties to even) and packed once into AMX's pair-interleaved tile
//! layout ([`Bf16Matrix`]), each product's rows of `a` rounded as they are copied
//! ([`Bf16Rows`]), and where the `f32` sums go ([`Output`]). Each step then streams half the
//! bytes of the `f32` weights. Both units ([`Bf16Unit`]) read this layout: AMX's tiles
//! (`crate::host_amx`, Intel Xeon from the 4th generation), which multiply ~16x the `f32` FMA
//! rate of AVX-512, and, on an AMD CPU with AVX-512's `bf16` dot products (Zen 4 and 5), the
//! vector unit (`crate::host_bf16_dot`, `VDPBF16PS`), for which a tile row of a panel is one
//! 512-bit vector.

use std::mem::MaybeUninit;

use crate::host_bf16_unit::Bf16Unit;
use crate::host_gemm::{HostInstructions, Strided};
use crate::line_aligned::LineAligned;

/// A packed value of zero (the padding of [`Bf16Matrix`] and [`Bf16Rows`]).
const ZERO: MaybeUninit<u16> = MaybeUninit::new(0);

/// Columns of a panel: two tiles (or 512-bit vectors) of 16 `f32` results.
pub(crate) const PANEL: usize = 32;
/// Values of `K` per tile pass: a tile row of 64 bytes of `bf16`.
pub(crate) const K_BLOCK: usize = 32;
/// `u16` values of one `B` tile: 16 rows of 64 bytes.
pub(crate) const TILE_VALUES: usize = 512;

/// `x` rounded to the nearest `bf16` (ties to even; a NaN stays a NaN).
#[inline(always)]
pub(crate) fn bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = (bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16) as u16;
    let quiet = ((bits >> 16) | 0x40) as u16;
    // A select, not a branch, so that loops of it vectorise.
    if x.is_nan() { quiet } else { rounded }
}

/// The `f32` value of `bf16` bits.
#[cfg(test)]
pub(crate) fn bf16_value(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// A `[K, N]` matrix rounded to `bf16` and packed for [`crate::matmul_bf16`]: panel `p` holds
/// columns `p·32 .. (p+1)·32`, as `K/32` blocks of two `B` tiles (16 columns each), a tile 16
/// rows of 16 pairs `(k, k+1)`; `K` and `N` padded with zeros to whole blocks and panels. Made
/// only on a machine with a [`Bf16Unit`], for the unit its products run on.
// Read by the units' kernels, which are x86-64 code: elsewhere none is ever made.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Debug, Clone)]
pub struct Bf16Matrix {
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) data: LineAligned<u16>,
    unit: Bf16Unit,
}

impl Bf16Matrix {
    /// Packs a row-major `[k, n]` matrix for the products of the unit this CPU has within
    /// `limit` ([`Bf16Unit::at_most`]); `None` where it has none, or for a matrix of no rows.
    ///
    /// # Panics
    /// When the length of `values` is not a multiple of `n`.
    pub fn pack(values: &[f32], n: usize, limit: HostInstructions) -> Option<Self> {
        assert!(
            n > 0 && values.len().is_multiple_of(n),
            "whole rows of {n} columns"
        );
        Self::pack_view(Strided::rows(values, n), values.len() / n, n, limit)
    }

    /// [`Self::pack`] for a `[k, n]` matrix read in place at any strides (a transposed tensor,
    /// rows of a larger one); `None` where this CPU has no unit within `limit`, or for a matrix
    /// of no rows or columns.
    ///
    /// # Panics
    /// When the view does not hold `[k, n]`.
    pub(crate) fn pack_view(
        view: Strided,
        k: usize,
        n: usize,
        limit: HostInstructions,
    ) -> Option<Self> {
        use rayon::prelude::*;
        if k == 0 || n == 0 {
            return None;
        }
        assert!(view.holds(k, n), "the values hold [{k}, {n}]");
        let unit = Bf16Unit::at_most(limit)?;
        let k_blocks = k.div_ceil(K_BLOCK);
        let panel_values = k_blocks * 2 * TILE_VALUES;
        let n_panels = n.div_ceil(PANEL);
        // Written whole, padding included (`LineAligned::written`).
        let len = n_panels * panel_values;
        // Groups of panels, a few per thread: each reads its columns of every row.
        let group = n_panels
            .div_ceil(2 * rayon::current_num_threads())
            .clamp(1, 16);
        let layout = PanelLayout {
            view,
            k,
            n,
            panel_values,
        };
        // SAFETY: the groups cover every panel, and `pack_panels` writes every value of its
        // panels.
        let data = unsafe {
            LineAligned::written(len, |values| {
                (values.par_chunks_mut(group * panel_values))
                    .enumerate()
                    .for_each(|(g, panels)| layout.pack_panels(g * group, panels))
            })
        };
        Some(Self { k, n, data, unit })
    }

    /// Rows (`K`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns (`N`).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The unit its products run on.
    pub fn unit(&self) -> Bf16Unit {
        self.unit
    }

    pub(crate) fn k_blocks(&self) -> usize {
        self.k.div_ceil(K_BLOCK)
    }

    pub(crate) fn n_panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }
}

/// What [`Bf16Matrix::pack_view`] packs: a `[k, n]` view into panels of `panel_values`.
#[derive(Clone, Copy)]
struct PanelLayout<'a> {
    view: Strided<'a>,
    k: usize,
    n: usize,
    panel_values: usize,
}

impl PanelLayout<'_> {
    /// Panels `first ..` (as many as `panels` holds) packed into `panels`, every value written
    /// (zeros past `K` and `N`), with 512-bit vectors where this CPU has AVX-512 (as every CPU
    /// with a [`Bf16Unit`] does).
    fn pack_panels(self, first: usize, panels: &mut [MaybeUninit<u16>]) {
        #[cfg(target_arch = "x86_64")]
        if wide_vectors() {
            // SAFETY: the CPU has AVX-512F and BW (detected).
            return unsafe { self.pack_panels_avx512(first, panels) };
        }
        self.pack_panels_for_target(first, panels);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn pack_panels_avx512(self, first: usize, panels: &mut [MaybeUninit<u16>]) {
        self.pack_panels_for_target(first, panels);
    }

    /// A row-major view block by block of `K` (32 rows of each panel's columns: the panels'
    /// columns of 32 rows are read before the next rows, a few pages at a time), another view
    /// panel by panel (a transposed view's columns are its contiguous runs).
    #[inline(always)]
    fn pack_panels_for_target(self, first: usize, panels: &mut [MaybeUninit<u16>]) {
        let n_panels = panels.len() / self.panel_values;
        let k_blocks = self.panel_values / (2 * TILE_VALUES);
        match self.view.col_stride {
            1 => {
                for block in 0..k_blocks {
                    for p in 0..n_panels {
                        self.pack_tiles(first, panels, p, block);
                    }
                }
            }
            _ => {
                for p in 0..n_panels {
                    for block in 0..k_blocks {
                        self.pack_tiles(first, panels, p, block);
                    }
                }
            }
        }
    }

    /// The two tiles of panel `p` (of those from `first`) in block `block` of `K`. (A method,
    /// not a closure, so that it is compiled inline with the caller's vectors.)
    #[inline(always)]
    fn pack_tiles(self, first: usize, panels: &mut [MaybeUninit<u16>], p: usize, block: usize) {
        let at = p * self.panel_values + block * 2 * TILE_VALUES;
        let pair = &mut panels[at..at + 2 * TILE_VALUES];
        for (half, tile) in pair.chunks_exact_mut(TILE_VALUES).enumerate() {
            self.pack_tile((first + p) * PANEL + half * 16, block, tile);
        }
    }

    /// One `B` tile: columns `first .. first + 16` (those below `n`) of block `block` of `K`,
    /// zeros past them.
    #[inline(always)]
    fn pack_tile(self, first: usize, block: usize, tile: &mut [MaybeUninit<u16>]) {
        let Self { view, k, n, .. } = self;
        let cols = n.saturating_sub(first).min(16);
        if cols == 0 {
            tile.fill(ZERO);
            return;
        }
        let rows = k.saturating_sub(block * K_BLOCK).min(K_BLOCK);
        if view.col_stride != 1 && view.row_stride == 1 && rows == K_BLOCK {
            // A transposed view: each of the tile's columns is a run of 32 values, whose
            // `(k, k+1)` pairs go down the tile's 16 pair rows.
            let mut pairs = [[0u32; 16]; 16];
            for (col, pairs) in pairs.iter_mut().enumerate().take(cols) {
                let at = view.offset + (first + col) * view.col_stride + block * K_BLOCK;
                let run = &view.values[at..at + K_BLOCK];
                for (pair, values) in pairs.iter_mut().zip(run.chunks_exact(2)) {
                    *pair =
                        u32::from(bf16_bits(values[0])) | (u32::from(bf16_bits(values[1])) << 16);
                }
            }
            for (pair, out) in tile.chunks_exact_mut(32).enumerate() {
                for (col, out) in out.chunks_exact_mut(2).enumerate() {
                    let both = pairs[col][pair];
                    out[0] = MaybeUninit::new(both as u16);
                    out[1] = MaybeUninit::new((both >> 16) as u16);
                }
            }
            return;
        }
        if view.col_stride != 1 {
            // Down the columns of another strided view (or a last block of `K`): the tile's
            // 16 columns × up to 32 rows, all within L1.
            tile.fill(ZERO);
            for col in 0..cols {
                let at = view.offset + (first + col) * view.col_stride;
                for r in 0..rows {
                    let x = view.values[at + (block * K_BLOCK + r) * view.row_stride];
                    tile[(r / 2) * 32 + col * 2 + r % 2] = MaybeUninit::new(bf16_bits(x));
                }
            }
            return;
        }
        for (pair, out) in tile.chunks_exact_mut(32).enumerate() {
            let row = block * K_BLOCK + 2 * pair;
            let source = |r: usize| {
                (r < k).then(|| &view.values[view.offset + r * view.row_stride + first..][..cols])
            };
            pack_pair(source(row), source(row + 1), out);
        }
    }
}

/// Whether this CPU has AVX-512F and BW, for the rounding loops' 512-bit vectors.
#[cfg(target_arch = "x86_64")]
fn wide_vectors() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
}

/// One tile row of a [`Bf16Matrix`]: rows `k` and `k + 1` of up to 16 columns (`None` past
/// `K`) rounded and interleaved as `(k, k+1)` pairs, the rest zero. Full rows run as one
/// branch-free loop that the compiler vectorises.
#[inline(always)]
fn pack_pair(even: Option<&[f32]>, odd: Option<&[f32]>, out: &mut [MaybeUninit<u16>]) {
    fn full(row: Option<&[f32]>) -> Option<&[f32; 16]> {
        row.and_then(|r| r.try_into().ok())
    }
    if let (Some(even), Some(odd)) = (full(even), full(odd)) {
        // Each pair as one `u32` (the even value in its low half), so that the rounding is
        // one loop of 16 lanes; the halves are then stored in order.
        let mut pairs = [0u32; 16];
        for (pair, (&even, &odd)) in pairs.iter_mut().zip(even.iter().zip(odd)) {
            *pair = u32::from(bf16_bits(even)) | (u32::from(bf16_bits(odd)) << 16);
        }
        for (to, pair) in out.chunks_exact_mut(2).zip(pairs) {
            to[0] = MaybeUninit::new(pair as u16);
            to[1] = MaybeUninit::new((pair >> 16) as u16);
        }
        return;
    }
    out.fill(ZERO);
    for (e, row) in [even, odd].into_iter().enumerate() {
        for (col, &x) in row.unwrap_or(&[]).iter().enumerate() {
            out[col * 2 + e] = MaybeUninit::new(bf16_bits(x));
        }
    }
}

/// `m` rows of `a` rounded to `bf16`, row-major with `K` padded to whole blocks and the rows to
/// a multiple of 32 (zeros).
// Read by the units' kernels, which are x86-64 code: elsewhere none is ever made.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Bf16Rows {
    pub(crate) m: usize,
    pub(crate) stride: usize,
    pub(crate) data: LineAligned<u16>,
}

impl Bf16Rows {
    /// Row-major rows of `lda` values: [`Self::round_view`].
    pub(crate) fn round(a: &[f32], lda: usize, m: usize, b: &Bf16Matrix) -> Self {
        assert!(
            m > 0 && lda >= b.k && a.len() >= (m - 1) * lda + b.k,
            "a is [m, K]"
        );
        Self::round_view(Strided::rows(a, lda), m, b)
    }

    /// `m` rows of `a` read in place at any strides (a transposed tensor: its rows down the
    /// columns of its values), rounded on rayon's threads where there are many.
    ///
    /// # Panics
    /// Without rows, or when the view does not hold `[m, K]`.
    pub(crate) fn round_view(a: Strided, m: usize, b: &Bf16Matrix) -> Self {
        use rayon::prelude::*;
        assert!(m > 0 && a.holds(m, b.k), "a is [m, K]");
        let stride = b.k_blocks() * K_BLOCK;
        // Written whole, padding included (`LineAligned::written`).
        let len = m.next_multiple_of(32) * stride;
        // Blocks of 16 rows: a transposed view's 16 values of one column are one cache line.
        let block = 16 * stride;
        let rows = RowLayout {
            a,
            m,
            k: b.k,
            stride,
        };
        let round_block =
            |(i, out): (usize, &mut [MaybeUninit<u16>])| rows.round_block(i * 16, out);
        // SAFETY: the blocks cover every row, and `round_block` writes every value of its block
        // of rows.
        let data = unsafe {
            LineAligned::written(len, |values| match m * b.k >= PARALLEL_VALUES {
                true => values
                    .par_chunks_mut(block)
                    .enumerate()
                    .for_each(round_block),
                false => values.chunks_mut(block).enumerate().for_each(round_block),
            })
        };
        Self { m, stride, data }
    }
}

/// What [`Bf16Rows::round_view`] rounds: `m` rows of `k` values of `a`, `stride` apart.
#[derive(Clone, Copy)]
struct RowLayout<'a> {
    a: Strided<'a>,
    m: usize,
    k: usize,
    stride: usize,
}

impl RowLayout<'_> {
    /// Rows `first .. first + 16` (those below `m`) into `out`, every value written (zeros
    /// past `K` and `m`), with 512-bit vectors where this CPU has AVX-512.
    fn round_block(self, first: usize, out: &mut [MaybeUninit<u16>]) {
        #[cfg(target_arch = "x86_64")]
        if wide_vectors() {
            // SAFETY: the CPU has AVX-512F and BW (detected).
            return unsafe { self.round_block_avx512(first, out) };
        }
        self.round_block_for_target(first, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn round_block_avx512(self, first: usize, out: &mut [MaybeUninit<u16>]) {
        self.round_block_for_target(first, out);
    }

    #[inline(always)]
    fn round_block_for_target(self, first: usize, out: &mut [MaybeUninit<u16>]) {
        let Self { a, k, stride, .. } = self;
        let rows = 16.min(self.m.saturating_sub(first));
        if a.col_stride == 1 {
            for (r, out) in out.chunks_exact_mut(stride).take(rows).enumerate() {
                let from = &a.values[a.offset + (first + r) * a.row_stride..][..k];
                for (to, &x) in out.iter_mut().zip(from) {
                    *to = MaybeUninit::new(bf16_bits(x));
                }
            }
        } else if rows > 0 {
            self.round_transposed(first, rows, out);
        }
        // The padding: past `K` in each row, and the rows past `m` (to whole blocks of 32).
        for out in out.chunks_exact_mut(stride).take(rows) {
            out[k..].fill(ZERO);
        }
        out[rows * stride..].fill(ZERO);
    }

    /// [`Self::round_block_for_target`]'s `rows` rows from `first` of a view whose rows are
    /// not contiguous, their first `K` values of `out`'s rows.
    #[inline(always)]
    fn round_transposed(self, first: usize, rows: usize, out: &mut [MaybeUninit<u16>]) {
        let Self { a, k, stride, .. } = self;
        // A transposed view: 16 columns of the block's rows at a time, each a run of 16
        // values where its row stride is 1, transposed through `runs` (in L1).
        let mut runs = [[0u16; 16]; 16];
        for first_k in (0..k).step_by(16) {
            let width = 16.min(k - first_k);
            for (kk, run) in runs.iter_mut().enumerate().take(width) {
                let at = a.offset + (first_k + kk) * a.col_stride + first * a.row_stride;
                match a.row_stride {
                    1 => {
                        let from = &a.values[at..at + rows];
                        for (to, &x) in run.iter_mut().zip(from) {
                            *to = bf16_bits(x);
                        }
                    }
                    row_stride => {
                        for (r, to) in run.iter_mut().enumerate().take(rows) {
                            *to = bf16_bits(a.values[at + r * row_stride]);
                        }
                    }
                }
            }
            for (r, out) in out.chunks_exact_mut(stride).take(rows).enumerate() {
                for (kk, to) in out[first_k..first_k + width].iter_mut().enumerate() {
                    *to = MaybeUninit::new(runs[kk][r]);
                }
            }
        }
    }
}

/// Operands of this many values or more are rounded on rayon's threads ([`Bf16Rows`]).
const PARALLEL_VALUES: usize = 1 << 16;

/// Where a product writes: `c` with row stride `ldc`, its first `n` columns (of as many rows as
/// the product has, checked by [`Output::of`]).
// Read by the units' kernels, which are x86-64 code: elsewhere none is ever made.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub(crate) values: *mut f32,
    pub(crate) ldc: usize,
    pub(crate) n: usize,
}

// SAFETY: the threads that share an `Output` write disjoint columns of it (their own panels'),
// and its values outlive them (`c` is borrowed mutably for the call that spawns them).
unsafe impl Send for Output {}
// SAFETY: as above.
unsafe impl Sync for Output {}

impl Output {
    pub(crate) fn of(c: &mut [MaybeUninit<f32>], ldc: usize, m: usize, b: &Bf16Matrix) -> Self {
        assert!(ldc >= b.n && c.len() >= (m - 1) * ldc + b.n, "c is [m, N]");
        Self {
            values: c.as_mut_ptr().cast(),
            ldc,
            n: b.n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value the packing never makes here (the values below round to others), standing for
    /// memory that held something else.
    const GARBAGE: MaybeUninit<u16> = MaybeUninit::new(0xbeef);

    /// `[k, n]` views of one buffer: row-major (a row stride past `n`), transposed (unit row
    /// stride), and with neither stride 1.
    fn views(values: &[f32], k: usize, n: usize) -> [Strided<'_>; 3] {
        let view = |row_stride, col_stride| Strided {
            values,
            offset: 3,
            row_stride,
            col_stride,
        };
        [view(n + 2, 1), view(1, k + 1), view(2 * n + 1, 2)]
    }

    /// Values enough for each of [`views`]' `[k, n]` views of them.
    fn buffer(k: usize, n: usize) -> Vec<f32> {
        let len = 3 + (k + 1) * (2 * n + 2) + 2 * n;
        (0..len).map(|i| (i % 251) as f32 / 128.0 - 1.0).collect()
    }

    /// Value `(i, j)` of a view.
    fn at(view: &Strided, i: usize, j: usize) -> f32 {
        view.values[view.offset + i * view.row_stride + j * view.col_stride]
    }

    /// Every value of a packed matrix is written, the padding past `K` and `N` with zeros,
    /// into memory that held other values: panels packed together and one at a time, for
    /// each kind of view, equal the layout computed value by value.
    #[test]
    fn packing_writes_every_value_padding_included() {
        for (k, n) in [(1, 1), (31, 17), (32, 32), (33, 40), (64, 70), (100, 16)] {
            let buffer = buffer(k, n);
            for view in views(&buffer, k, n) {
                assert!(view.holds(k, n));
                let k_blocks = k.div_ceil(K_BLOCK);
                let panel_values = k_blocks * 2 * TILE_VALUES;
                let n_panels = n.div_ceil(PANEL);
                let layout = PanelLayout {
                    view,
                    k,
                    n,
                    panel_values,
                };
                let mut together = vec![GARBAGE; n_panels * panel_values];
                layout.pack_panels(0, &mut together);
                let mut apart = vec![GARBAGE; n_panels * panel_values];
                for (p, panel) in apart.chunks_mut(panel_values).enumerate() {
                    layout.pack_panels(p, panel);
                }
                for (index, (&together, &apart)) in together.iter().zip(&apart).enumerate() {
                    let (p, within) = (index / panel_values, index % panel_values);
                    let (kb, within) = (within / (2 * TILE_VALUES), within % (2 * TILE_VALUES));
                    let (half, within) = (within / TILE_VALUES, within % TILE_VALUES);
                    let (pair, col, e) = (within / 32, within % 32 / 2, within % 2);
                    let (row, column) = (kb * K_BLOCK + 2 * pair + e, p * PANEL + half * 16 + col);
                    let expected = match row < k && column < n {
                        true => bf16_bits(at(&view, row, column)),
                        false => 0,
                    };
                    // SAFETY: every value was initialised (with garbage at least).
                    let got = unsafe { [together.assume_init(), apart.assume_init()] };
                    assert_eq!(
                        got,
                        [expected; 2],
                        "[{k}, {n}], strides {:?}: ({row}, {column})",
                        (view.row_stride, view.col_stride)
                    );
                }
            }
        }
    }

    /// Every value of a product's rounded rows is written, the padding past `K` and the rows
    /// past `m` (to whole blocks of 32) with zeros, into memory that held other values.
    #[test]
    fn rounding_writes_every_value_padding_included() {
        for (m, k) in [(1, 1), (5, 31), (16, 32), (17, 33), (40, 64), (33, 100)] {
            let buffer = buffer(m, k);
            for a in views(&buffer, m, k) {
                assert!(a.holds(m, k));
                let stride = k.div_ceil(K_BLOCK) * K_BLOCK;
                let rows = RowLayout { a, m, k, stride };
                let mut data = vec![GARBAGE; m.next_multiple_of(32) * stride];
                for (i, block) in data.chunks_mut(16 * stride).enumerate() {
                    rows.round_block(i * 16, block);
                }
                for (index, value) in data.iter().enumerate() {
                    let (r, kk) = (index / stride, index % stride);
                    let expected = match r < m && kk < k {
                        true => bf16_bits(at(&a, r, kk)),
                        false => 0,
                    };
                    // SAFETY: every value was initialised (with garbage at least).
                    let got = unsafe { value.assume_init() };
                    let strides = (a.row_stride, a.col_stride);
                    assert_eq!(
                        got, expected,
                        "[{m}, {k}], strides {strides:?}: ({r}, {kk})"
                    );
                }
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even 1.
        assert_eq!(bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(bf16_value(bf16_bits(-2.5)), -2.5);
        assert!(bf16_value(bf16_bits(f32::NAN)).is_nan());
        assert_eq!(bf16_value(bf16_bits(f32::INFINITY)), f32::INFINITY);
    }
}
