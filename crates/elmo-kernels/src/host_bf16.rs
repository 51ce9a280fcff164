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

use crate::host_bf16_unit::Bf16Unit;
use crate::host_gemm::HostInstructions;

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
#[derive(Debug, Clone)]
pub struct Bf16Matrix {
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) data: Vec<u16>,
    unit: Bf16Unit,
}

impl Bf16Matrix {
    /// Packs a row-major `[k, n]` matrix for the products of the unit this CPU has within
    /// `limit` ([`Bf16Unit::at_most`]); `None` where it has none, or for a matrix of no rows.
    ///
    /// # Panics
    /// When the length of `values` is not a multiple of `n`.
    pub fn pack(values: &[f32], n: usize, limit: HostInstructions) -> Option<Self> {
        use rayon::prelude::*;
        assert!(
            n > 0 && values.len().is_multiple_of(n),
            "whole rows of {n} columns"
        );
        if values.is_empty() {
            return None;
        }
        let unit = Bf16Unit::at_most(limit)?;
        let k = values.len() / n;
        let k_blocks = k.div_ceil(K_BLOCK);
        let panel_values = k_blocks * 2 * TILE_VALUES;
        let mut data = vec![0u16; n.div_ceil(PANEL) * panel_values];
        (data.par_chunks_mut(panel_values).enumerate()).for_each(|(p, panel)| {
            for (t, tile) in panel.chunks_exact_mut(TILE_VALUES).enumerate() {
                let (block, half) = (t / 2, t % 2);
                let first = p * PANEL + half * 16;
                let cols = n.saturating_sub(first).min(16);
                for (pair, out) in tile.chunks_exact_mut(32).enumerate() {
                    let row = block * K_BLOCK + 2 * pair;
                    let source =
                        |r: usize| (r < k && cols > 0).then(|| &values[r * n + first..][..cols]);
                    pack_pair(source(row), source(row + 1), out);
                }
            }
        });
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

/// One tile row of a [`Bf16Matrix`]: rows `k` and `k + 1` of up to 16 columns (`None` past
/// `K`) rounded and interleaved as `(k, k+1)` pairs, the rest left zero. Full rows run as one
/// branch-free loop that the compiler vectorises.
#[inline(always)]
fn pack_pair(even: Option<&[f32]>, odd: Option<&[f32]>, out: &mut [u16]) {
    fn full(row: Option<&[f32]>) -> Option<&[f32; 16]> {
        row.and_then(|r| r.try_into().ok())
    }
    if let (Some(even), Some(odd)) = (full(even), full(odd)) {
        for (col, pair) in out.chunks_exact_mut(2).enumerate() {
            pair[0] = bf16_bits(even[col]);
            pair[1] = bf16_bits(odd[col]);
        }
        return;
    }
    for (e, row) in [even, odd].into_iter().enumerate() {
        for (col, &x) in row.unwrap_or(&[]).iter().enumerate() {
            out[col * 2 + e] = bf16_bits(x);
        }
    }
}

/// `m` rows of `a` rounded to `bf16`, row-major with `K` padded to whole blocks and the rows to
/// a multiple of 32 (zeros).
pub(crate) struct Bf16Rows {
    pub(crate) m: usize,
    pub(crate) stride: usize,
    pub(crate) data: Vec<u16>,
}

impl Bf16Rows {
    pub(crate) fn round(a: &[f32], lda: usize, m: usize, b: &Bf16Matrix) -> Self {
        assert!(
            m > 0 && lda >= b.k && a.len() >= (m - 1) * lda + b.k,
            "a is [m, K]"
        );
        let stride = b.k_blocks() * K_BLOCK;
        let mut data = vec![0u16; m.next_multiple_of(32) * stride];
        for (row, out) in data.chunks_exact_mut(stride).take(m).enumerate() {
            for (to, &x) in out.iter_mut().zip(&a[row * lda..row * lda + b.k]) {
                *to = bf16_bits(x);
            }
        }
        Self { m, stride, data }
    }
}

/// Where a product writes: `c` with row stride `ldc`, its first `n` columns (of as many rows as
/// the product has, checked by [`Output::of`]).
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
    pub(crate) fn of(c: &mut [f32], ldc: usize, m: usize, b: &Bf16Matrix) -> Self {
        assert!(ldc >= b.n && c.len() >= (m - 1) * ldc + b.n, "c is [m, N]");
        Self {
            values: c.as_mut_ptr(),
            ldc,
            n: b.n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
