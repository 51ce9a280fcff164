//! `bf16` matrix products on the host CPU's AMX tiles (Intel's Advanced Matrix Extensions,
//! Intel 64 and IA-32 Architectures Software Developer's Manual vol. 1 ch. 18 and the
//! optimization manual's "AMX" chapter: `TDPBF16PS`): `crate::host_bf16_product`'s products
//! where the CPU has the tiles ([`crate::Bf16Unit::Amx`]), 32 rows by 32 columns of `c` at a time
//! in four `f32` tiles over all of `K`.
//!
//! AMX runs on Intel Xeon from the 4th generation (Sapphire Rapids) on Linux 5.16 or later,
//! which lends a process the tiles' state on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`);
//! `crate::host_bf16_unit` says whether this machine has it. The instructions are written as
//! inline assembly, as Rust's AMX intrinsics are not stable.

use std::ops::Range;

use crate::host_bf16::{Bf16Matrix, Bf16Rows, Output};

/// Bytes of the panels of `B` that every block of 32 rows passes before the next group: they
/// stay in L2 (2 MiB a core on the Xeons with AMX) while the rows' blocks pass, and a block
/// writes its rows of `c` across the group's columns (a few pages, not one per row).
#[cfg(target_arch = "x86_64")]
const GROUP_BYTES: usize = 512 * 1024;

/// The product of `rows` and the panels `panels` of `b` into `out` on AMX's tiles, on the
/// calling thread.
///
/// # Safety
/// AMX is detected and granted to this process (`crate::host_bf16_unit`); `out` holds `rows.m`
/// rows of `b.n` columns, of which no other thread reads or writes those of `panels` meanwhile.
pub(crate) unsafe fn product(rows: &Bf16Rows, b: &Bf16Matrix, panels: Range<usize>, out: Output) {
    // SAFETY: the caller's promise.
    unsafe { x86::product(rows, b, panels, out) }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;
    use std::ops::Range;

    use super::GROUP_BYTES;
    use crate::host_bf16::{Bf16Matrix, Bf16Rows, K_BLOCK, Output, PANEL, TILE_VALUES};

    /// The tile configuration (`LDTILECFG`'s 64 bytes, palette 1) for a block of `height`
    /// rows: tiles 0-1 the `C` results of its first 16 rows (16 `f32` a row), 2-3 those of the
    /// rest, 4 and 5 their `A` rows (32 `bf16` a row), 6-7 the `B` tiles (16 pairs × 16
    /// columns); tiles of no rows are left unconfigured.
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        bytes_per_row: [u16; 16],
        rows: [u8; 16],
    }

    impl TileConfig {
        fn for_height(height: usize) -> Self {
            let mut config = Self {
                palette: 1,
                start_row: 0,
                reserved: [0; 14],
                bytes_per_row: [0; 16],
                rows: [0; 16],
            };
            let (top, bottom) = (height.min(16) as u8, height.saturating_sub(16) as u8);
            for (tile, rows) in [(0, top), (1, top), (4, top), (6, 16), (7, 16)]
                .into_iter()
                .chain([(2, bottom), (3, bottom), (5, bottom)])
            {
                if rows > 0 {
                    config.rows[tile] = rows;
                    config.bytes_per_row[tile] = 64;
                }
            }
            config
        }
    }

    /// The product of `rows` and the panels `panels` of `b` into `out`, 32 rows by 32 columns
    /// at a time (four `C` tiles over all of `K`; a last block of fewer rows in tiles of as many
    /// rows, two of them for 16 rows or fewer), the panels in groups of [`GROUP_BYTES`] that
    /// every block of rows passes in turn, on the calling thread. A block's loads and products
    /// alternate, so that the tiles loaded first are multiplied while the others load.
    ///
    /// # Safety
    /// AMX is detected and granted to this process (`crate::host_bf16_unit`); `out`
    /// holds `rows.m` rows of `b.n` columns, of which no other thread reads or writes those of
    /// `panels` meanwhile.
    pub(super) unsafe fn product(
        rows: &Bf16Rows,
        b: &Bf16Matrix,
        panels: Range<usize>,
        out: Output,
    ) {
        let k_blocks = b.k_blocks();
        let lda = rows.stride * 2;
        let mut tile = [[0.0f32; PANEL]; 32];
        let panel_values = k_blocks * 2 * TILE_VALUES;
        let group = (GROUP_BYTES / (panel_values * 2)).max(1);
        // The height the tiles are configured for (0: none yet).
        let mut configured = 0;
        for group in (panels.start..panels.end)
            .step_by(group)
            .map(|first| first..(first + group).min(panels.end))
        {
            for first in (0..rows.m).step_by(32) {
                let height = 32.min(rows.m - first);
                if height != configured {
                    let config = TileConfig::for_height(height);
                    // SAFETY: a valid palette-1 layout (tiles of at most 16 rows × 64 bytes,
                    // unused ones zero); AMX is available (the caller's promise).
                    unsafe { asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly)) };
                    configured = height;
                }
                let a = &rows.data[first * rows.stride..][..32 * rows.stride];
                for p in group.clone() {
                    let panel = &b.data[p * panel_values..][..panel_values];
                    // SAFETY: the tiles used are those configured for `height`; every load
                    // reads at most 16 rows of 64 bytes within `a` (32 rows of `stride ≥ 32`
                    // values from block `kb`) or 16 within the panel's block.
                    unsafe { block(a.as_ptr(), lda, panel.as_ptr(), k_blocks, height > 16) };
                    let columns = PANEL.min(out.n - p * PANEL);
                    if height == 32 && columns == PANEL {
                        // A whole block: the tiles straight into `c`.
                        // SAFETY: rows `first .. first + 32 ≤ m` and columns `p·32 .. p·32 +
                        // 32 ≤ N` are within `c` (checked by `Output::of`) and this thread's
                        // (the contract).
                        unsafe {
                            store(out.values.add(first * out.ldc + p * PANEL), out.ldc, true)
                        };
                        continue;
                    }
                    // SAFETY: `tile` holds 32 rows of 32 values; the tiles store their
                    // configured rows, `height` in all.
                    unsafe { store(tile.as_mut_ptr().cast(), PANEL, height > 16) };
                    for (i, values) in tile.iter().take(height).enumerate() {
                        // SAFETY: row `first + i < m` and columns `p·32 .. p·32 + columns ≤ N`
                        // are within `c` (checked by `Output::of`) and this thread's (the
                        // contract); a raw copy, as `c` may hold no values yet.
                        unsafe {
                            out.values
                                .add((first + i) * out.ldc + p * PANEL)
                                .copy_from_nonoverlapping(values.as_ptr(), columns)
                        };
                    }
                }
            }
        }
        if configured > 0 {
            // SAFETY: releases this thread's tile state (configured above).
            unsafe { asm!("tilerelease", options(nomem, nostack)) };
        }
    }

    /// The `C` tiles of a block, zeroed, accumulate the products of `a`'s row tiles and a
    /// panel's two column tiles over `k_blocks` blocks of `K`: tiles 0-1 from `A` tile 4 (the
    /// first 16 rows), and where `tall` (more than 16 rows) tiles 2-3 from `A` tile 5 too.
    ///
    /// # Safety
    /// The tiles are configured for the block's height (more than 16 rows where `tall`, else 16
    /// or fewer); `a + kb·32` read as tiles of row stride `lda` bytes (the second 16 rows on,
    /// where `tall`) and `panel + kb·1024` as two tiles of 16 rows of 64 bytes are readable for
    /// `kb < k_blocks`.
    #[inline(always)]
    unsafe fn block(a: *const u16, lda: usize, panel: *const u16, k_blocks: usize, tall: bool) {
        // SAFETY: within the reads the caller guarantees, on configured tiles.
        unsafe {
            asm!("tilezero tmm0", "tilezero tmm1", options(nomem, nostack));
            if tall {
                asm!("tilezero tmm2", "tilezero tmm3", options(nomem, nostack));
            }
            for kb in 0..k_blocks {
                let a0 = a.add(kb * K_BLOCK);
                let b0 = panel.add(kb * 2 * TILE_VALUES);
                asm!(
                    "tileloadd tmm4, [{a0} + {lda}*1]",
                    "tileloadd tmm6, [{b0} + {s}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tileloadd tmm7, [{b1} + {s}*1]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    a0 = in(reg) a0,
                    b0 = in(reg) b0,
                    b1 = in(reg) b0.add(TILE_VALUES),
                    lda = in(reg) lda,
                    s = in(reg) 64usize,
                    options(nostack, readonly)
                );
                if tall {
                    // The second row tile, while the first's products run.
                    asm!(
                        "tileloadd tmm5, [{a1} + {lda}*1]",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a1 = in(reg) a0.add(8 * lda),
                        lda = in(reg) lda,
                        options(nostack, readonly)
                    );
                }
            }
        }
    }

    /// A block's `C` tiles at `c`, row stride `ldc` values: tiles 0-1 (its first 16 rows), and
    /// where `tall` tiles 2-3 (the rows after them).
    ///
    /// # Safety
    /// The tiles are configured as for [`block`] with the same `tall`, and `c .. c + 31·ldc +
    /// 32` (`c .. c + 15·ldc + 32` unless `tall`) is writable.
    #[inline(always)]
    unsafe fn store(c: *mut f32, ldc: usize, tall: bool) {
        // SAFETY: each store writes at most 16 rows of 64 bytes within the caller's block.
        unsafe {
            asm!(
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                c0 = in(reg) c,
                c1 = in(reg) c.add(16),
                s = in(reg) ldc * 4,
                options(nostack)
            );
            if tall {
                asm!(
                    "tilestored [{c2} + {s}*1], tmm2",
                    "tilestored [{c3} + {s}*1], tmm3",
                    c2 = in(reg) c.add(16 * ldc),
                    c3 = in(reg) c.add(16 * ldc + 16),
                    s = in(reg) ldc * 4,
                    options(nostack)
                );
            }
        }
    }
}

/// No AMX off x86-64: no [`Bf16Matrix`] is made, so no product runs.
#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use std::ops::Range;

    use crate::host_bf16::{Bf16Matrix, Bf16Rows, Output};

    /// Never called: a [`Bf16Matrix`] exists only where AMX was detected.
    ///
    /// # Safety
    /// None needed.
    pub(super) unsafe fn product(_: &Bf16Rows, _: &Bf16Matrix, _: Range<usize>, _: Output) {
        unreachable!("a Bf16Matrix exists only where AMX was detected")
    }
}
