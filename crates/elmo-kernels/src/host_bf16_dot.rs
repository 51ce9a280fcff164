//! `bf16` matrix products on AVX-512's `bf16` dot products (`VDPBF16PS`, Intel 64 and IA-32
//! Architectures Software Developer's Manual vol. 2): `crate::host_bf16_product`'s products on a
//! CPU without AMX's tiles
//! ([`crate::Bf16Unit::Avx512Bf16`]: AMD Zen 4 and 5), on the same packed operands. A tile row
//! of a `B` panel (16 columns' `(k, k+1)` pairs, 64 bytes) is one 512-bit vector; each row's
//! pair of `a` is broadcast against it, and one instruction adds both products of the pair to
//! 16 `f32` sums (twice the products of an `f32` FMA) from half the bytes of weight.

use std::ops::Range;

use crate::host_bf16::{Bf16Matrix, Bf16Rows, Output};

/// Rows of `c` per block: 12 rows × 2 vectors of sums (24 of the 32 registers), the panel's two
/// vectors and a broadcast.
#[cfg(target_arch = "x86_64")]
const ROWS: usize = 12;

/// The product of `rows` and the panels `panels` of `b` into `out`: for each panel, blocks of
/// [`ROWS`] rows (fewer in the last) over all of `K`, the panel read from L1 while the blocks
/// pass; on the calling thread.
///
/// # Safety
/// This CPU has AVX512-BF16 (`crate::host_bf16_unit`); `out` holds `rows.m` rows of `b.n`
/// columns, of which no other thread reads or writes those of `panels` meanwhile.
pub(crate) unsafe fn product(rows: &Bf16Rows, b: &Bf16Matrix, panels: Range<usize>, out: Output) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's promise.
    unsafe {
        x86::product(rows, b, panels, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (rows, b, panels, out);
        unreachable!("a Bf16Matrix for the vector unit exists only on x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m512, __m512bh, _mm512_dpbf16_ps, _mm512_loadu_si512, _mm512_mask_storeu_ps,
        _mm512_set1_epi32, _mm512_setzero_ps, _mm512_storeu_ps,
    };
    use std::ops::Range;

    use super::ROWS;
    use crate::host_bf16::{Bf16Matrix, Bf16Rows, K_BLOCK, Output, PANEL, TILE_VALUES};

    /// See [`super::product`].
    ///
    /// # Safety
    /// As there.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn product(
        rows: &Bf16Rows,
        b: &Bf16Matrix,
        panels: Range<usize>,
        out: Output,
    ) {
        let panel_values = b.k_blocks() * 2 * TILE_VALUES;
        for p in panels {
            let panel = &b.data[p * panel_values..][..panel_values];
            let columns = PANEL.min(out.n - p * PANEL);
            let mut first = 0;
            while first < rows.m {
                let height = ROWS.min(rows.m - first);
                let a = &rows.data[first * rows.stride..][..height * rows.stride];
                // SAFETY: `c`'s rows `first .. first + height ≤ m` and columns `p·32 .. p·32 +
                // columns ≤ N` are within it (checked by `Output::of`) and this thread's (the
                // contract).
                let c = unsafe { out.values.add(first * out.ldc + p * PANEL) };
                // SAFETY: as above; `a` holds `height` rows of `stride` values and `panel`
                // the panel's `k_blocks` blocks.
                unsafe {
                    match height {
                        ROWS => block::<ROWS>(a, rows.stride, panel, c, out.ldc, columns),
                        11 => block::<11>(a, rows.stride, panel, c, out.ldc, columns),
                        10 => block::<10>(a, rows.stride, panel, c, out.ldc, columns),
                        9 => block::<9>(a, rows.stride, panel, c, out.ldc, columns),
                        8 => block::<8>(a, rows.stride, panel, c, out.ldc, columns),
                        7 => block::<7>(a, rows.stride, panel, c, out.ldc, columns),
                        6 => block::<6>(a, rows.stride, panel, c, out.ldc, columns),
                        5 => block::<5>(a, rows.stride, panel, c, out.ldc, columns),
                        4 => block::<4>(a, rows.stride, panel, c, out.ldc, columns),
                        3 => block::<3>(a, rows.stride, panel, c, out.ldc, columns),
                        2 => block::<2>(a, rows.stride, panel, c, out.ldc, columns),
                        _ => block::<1>(a, rows.stride, panel, c, out.ldc, columns),
                    }
                }
                first += height;
            }
        }
    }

    /// `R` rows of `c` at `c` (row stride `ldc`, its first `columns` ≤ 32 columns written) =
    /// `a`'s `R` rows (row stride `stride`, pairs of `bf16`) times one panel: per pair of `K`,
    /// the panel's two vectors of 16 columns' pairs and each row's pair broadcast.
    ///
    /// # Safety
    /// `a` holds `R` rows of `stride` values (`stride` = the panel's blocks × 32), `panel` one
    /// whole panel, and `c .. c + (R − 1)·ldc + columns` is writable by this thread.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn block<const R: usize>(
        a: &[u16],
        stride: usize,
        panel: &[u16],
        c: *mut f32,
        ldc: usize,
        columns: usize,
    ) {
        let k_blocks = stride / K_BLOCK;
        assert!(
            a.len() >= R * stride && panel.len() >= k_blocks * 2 * TILE_VALUES,
            "a block's rows and panel"
        );
        let mut sums = [[_mm512_setzero_ps(); 2]; R];
        let (a, panel) = (a.as_ptr(), panel.as_ptr());
        for kb in 0..k_blocks {
            for pair in 0..K_BLOCK / 2 {
                let at = kb * K_BLOCK + 2 * pair;
                // SAFETY: each load reads 64 bytes within block `kb`'s two tiles, and each
                // broadcast 4 bytes within row `i < R` (`at + 2 ≤ stride`), checked above.
                unsafe {
                    let tile_row = panel.add(kb * 2 * TILE_VALUES + pair * 32);
                    let left: __m512bh = std::mem::transmute(_mm512_loadu_si512(tile_row.cast()));
                    let right: __m512bh =
                        std::mem::transmute(_mm512_loadu_si512(tile_row.add(TILE_VALUES).cast()));
                    for (i, row) in sums.iter_mut().enumerate() {
                        // The pair `(k, k+1)` as one 32-bit lane, `k` in its low half as in
                        // the panel's pairs.
                        let bits = a.add(i * stride + at).cast::<i32>().read_unaligned();
                        let broadcast: __m512bh = std::mem::transmute(_mm512_set1_epi32(bits));
                        row[0] = _mm512_dpbf16_ps(row[0], broadcast, left);
                        row[1] = _mm512_dpbf16_ps(row[1], broadcast, right);
                    }
                }
            }
        }
        // SAFETY: `c`'s rows and columns are this thread's (the contract).
        unsafe { store(&sums, c, ldc, columns) };
    }

    /// The sums of a block into `c`, `columns` of each row (masked stores past them).
    ///
    /// # Safety
    /// `c .. c + (R − 1)·ldc + columns` is writable by this thread, `columns ≤ 32`.
    #[target_feature(enable = "avx512f")]
    unsafe fn store<const R: usize>(
        sums: &[[__m512; 2]; R],
        c: *mut f32,
        ldc: usize,
        columns: usize,
    ) {
        let mask = |n: usize| -> u16 { if n >= 16 { u16::MAX } else { (1u16 << n) - 1 } };
        let (left, right) = (mask(columns), mask(columns.saturating_sub(16)));
        for (i, row) in sums.iter().enumerate() {
            // SAFETY: the caller lets this thread write `c`'s first `columns` columns of `R`
            // rows; masked lanes are not written.
            unsafe {
                let to = c.add(i * ldc);
                if columns == 32 {
                    _mm512_storeu_ps(to, row[0]);
                    _mm512_storeu_ps(to.add(16), row[1]);
                } else {
                    _mm512_mask_storeu_ps(to, left, row[0]);
                    _mm512_mask_storeu_ps(to.wrapping_add(16), right, row[1]);
                }
            }
        }
    }
}
