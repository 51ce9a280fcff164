//! `bf16` matrix products on the host CPU's AMX tiles (Intel's Advanced Matrix Extensions,
//! Intel 64 and IA-32 Architectures Software Developer's Manual vol. 1 ch. 18 and the
//! optimization manual's "AMX" chapter: `TDPBF16PS`): [`Precision::Mixed`](crate::Precision)'s
//! products on a CPU, as a GPU's tensor cores run them. The weight operand is rounded to `bf16`
//! and packed once into the tiles' pair-interleaved layout ([`Bf16Matrix`]); each product
//! rounds the rows of `a` to `bf16` and accumulates in `f32`. Each step then streams half the
//! bytes of the `f32` weights, and the tiles multiply ~16x the `f32` FMA rate of AVX-512.
//!
//! AMX runs on Intel Xeon from the 4th generation (Sapphire Rapids) on Linux 5.16 or later,
//! which lends a process the tiles' state on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`);
//! [`host_bf16_products`] says whether this machine has it. The instructions are written as
//! inline assembly, as Rust's AMX intrinsics are not stable.

use std::sync::OnceLock;

use crate::host_gemm::panel_shares;

/// Columns of a panel: two tiles of 16 `f32` results.
const PANEL: usize = 32;
/// Values of `K` per tile pass: a tile row of 64 bytes of `bf16`.
const K_BLOCK: usize = 32;
/// `u16` values of one `B` tile: 16 rows of 64 bytes.
const TILE_VALUES: usize = 512;
/// Bytes of the panels of `B` that every block of 32 rows passes before the next group: they
/// stay in L2 (2 MiB a core on the Xeons with AMX) while the rows' blocks pass, and a block
/// writes its rows of `c` across the group's columns (a few pages, not one per row).
const GROUP_BYTES: usize = 512 * 1024;

/// Whether this CPU and OS run AMX's `bf16` tile products (detected once; the first call asks
/// Linux for the tiles' state).
pub fn host_bf16_products() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let leaf1 = __cpuid(1);
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    if !osxsave || __cpuid(0).eax < 7 {
        return false;
    }
    let leaf7 = __cpuid_count(7, 0);
    let (amx_bf16, amx_tile) = (leaf7.edx & (1 << 22) != 0, leaf7.edx & (1 << 24) != 0);
    if !(amx_bf16 && amx_tile) {
        return false;
    }
    // SAFETY: OSXSAVE is set, so XGETBV runs; XCR0 bits 17-18 are the tiles' state.
    let xcr0 = unsafe { x86::xgetbv0() };
    if xcr0 & (0b11 << 17) != 0b11 << 17 {
        return false;
    }
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) changes only this process's
    // permission to use the tiles' state; an older kernel answers an error.
    unsafe { x86::request_tile_state() }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

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

/// A `[K, N]` matrix rounded to `bf16` and packed for [`matmul_bf16`]: panel `p` holds columns
/// `p·32 .. (p+1)·32`, as `K/32` blocks of two `B` tiles (16 columns each), a tile 16 rows of
/// 16 pairs `(k, k+1)`; `K` and `N` padded with zeros to whole blocks and panels. Made only on
/// a machine with AMX ([`host_bf16_products`]).
#[derive(Debug, Clone)]
pub struct Bf16Matrix {
    k: usize,
    n: usize,
    data: Vec<u16>,
}

impl Bf16Matrix {
    /// Packs a row-major `[k, n]` matrix; `None` where this machine has no AMX, or for a
    /// matrix of no rows.
    ///
    /// # Panics
    /// When the length of `values` is not a multiple of `n`.
    pub fn pack(values: &[f32], n: usize) -> Option<Self> {
        use rayon::prelude::*;
        assert!(
            n > 0 && values.len().is_multiple_of(n),
            "whole rows of {n} columns"
        );
        if values.is_empty() || !host_bf16_products() {
            return None;
        }
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
        Some(Self { k, n, data })
    }

    /// Rows (`K`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns (`N`).
    pub fn n(&self) -> usize {
        self.n
    }

    fn k_blocks(&self) -> usize {
        self.k.div_ceil(K_BLOCK)
    }

    fn n_panels(&self) -> usize {
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
struct Bf16Rows {
    m: usize,
    stride: usize,
    data: Vec<u16>,
}

impl Bf16Rows {
    fn round(a: &[f32], lda: usize, m: usize, b: &Bf16Matrix) -> Self {
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
    let out = Output::of(c, ldc, m, b);
    // SAFETY: `b` exists, so AMX was detected and granted; `out` holds the product (checked)
    // and `c` is borrowed mutably for the call.
    unsafe { x86::product(&rows, b, 0..b.n_panels(), out) };
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
    use rayon::prelude::*;
    if m == 0 {
        return;
    }
    let rows = Bf16Rows::round(a, lda, m, b);
    let out = Output::of(c, ldc, m, b);
    panel_shares(b.n_panels())
        .into_par_iter()
        .for_each(|panels| {
            // SAFETY: as in `matmul_bf16`; the tasks' panels, hence their columns of `c`, are
            // disjoint.
            unsafe { x86::product(&rows, b, panels, out) };
        });
}

/// Where a product writes: `c` with row stride `ldc`, its first `n` columns (of as many rows as
/// the product has, checked by [`Output::of`]).
#[derive(Debug, Clone, Copy)]
struct Output {
    values: *mut f32,
    ldc: usize,
    n: usize,
}

// SAFETY: the threads that share an `Output` write disjoint columns of it (their own panels'),
// and its values outlive them (`c` is borrowed mutably for the call that spawns them).
unsafe impl Send for Output {}
// SAFETY: as above.
unsafe impl Sync for Output {}

impl Output {
    fn of(c: &mut [f32], ldc: usize, m: usize, b: &Bf16Matrix) -> Self {
        assert!(ldc >= b.n && c.len() >= (m - 1) * ldc + b.n, "c is [m, N]");
        Self {
            values: c.as_mut_ptr(),
            ldc,
            n: b.n,
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;
    use std::ops::Range;

    use super::{Bf16Matrix, Bf16Rows, GROUP_BYTES, K_BLOCK, Output, PANEL, TILE_VALUES};

    /// XCR0, the OS-enabled state components.
    ///
    /// # Safety
    /// The CPU has OSXSAVE.
    #[cfg(target_os = "linux")]
    pub(super) unsafe fn xgetbv0() -> u64 {
        let (eax, edx): (u32, u32);
        // SAFETY: XGETBV with ECX = 0 reads XCR0 where OSXSAVE is set (the caller's promise).
        unsafe {
            asm!("xgetbv", in("ecx") 0u32, out("eax") eax, out("edx") edx,
                 options(nomem, nostack, preserves_flags));
        }
        (u64::from(edx) << 32) | u64::from(eax)
    }

    /// Asks Linux for this process's permission to use the tiles' state:
    /// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; whether it was granted.
    ///
    /// # Safety
    /// Runs on Linux x86-64.
    #[cfg(target_os = "linux")]
    pub(super) unsafe fn request_tile_state() -> bool {
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
        const XFEATURE_XTILEDATA: u64 = 18;
        let ret: i64;
        // SAFETY: the system call reads its two integer arguments and changes nothing but the
        // process's permission; it clobbers RCX and R11 as every `syscall` does.
        unsafe {
            asm!("syscall",
                 inlateout("rax") SYS_ARCH_PRCTL => ret,
                 in("rdi") ARCH_REQ_XCOMP_PERM,
                 in("rsi") XFEATURE_XTILEDATA,
                 lateout("rcx") _, lateout("r11") _,
                 options(nostack));
        }
        ret == 0
    }

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
    /// AMX is detected and granted to this process ([`super::host_bf16_products`]); `out`
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
                        // contract).
                        let to = unsafe {
                            std::slice::from_raw_parts_mut(
                                out.values.add((first + i) * out.ldc + p * PANEL),
                                columns,
                            )
                        };
                        to.copy_from_slice(&values[..columns]);
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

    use super::{Bf16Matrix, Bf16Rows, Output};

    /// Never called: a [`Bf16Matrix`] exists only where AMX was detected.
    ///
    /// # Safety
    /// None needed.
    pub(super) unsafe fn product(_: &Bf16Rows, _: &Bf16Matrix, _: Range<usize>, _: Output) {
        unreachable!("a Bf16Matrix exists only where AMX was detected")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn tile_products_equal_the_rounded_operands_products() {
        assert!(Bf16Matrix::pack(&[], 3).is_none(), "no rows, no packing");
        if !host_bf16_products() {
            assert!(Bf16Matrix::pack(&[1.0], 1).is_none(), "no AMX, no packing");
            return;
        }
        // Edges: K and N not whole blocks or panels; blocks of one row, of 16 rows or fewer
        // (two tiles) and of 17-31 (four), alone and after whole blocks; several panels, and
        // several groups of them (`K` of 4,096: two panels a group).
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
        ] {
            let a = seeded(m * k, (m * k) as u64);
            let b = seeded(k * n, n as u64);
            let packed = Bf16Matrix::pack(&b, n).expect("AMX detected");
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
                            "[{m}, {k}]·[{k}, {n}] at ({i}, {j}): {got} vs {want}"
                        );
                    }
                    assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|&v| v == 7.0));
                }
            }
        }
    }

    #[test]
    fn tile_products_are_within_bf16_of_f32() {
        if !host_bf16_products() {
            return;
        }
        let (m, k, n) = (16, 256, 64);
        let (a, b) = (seeded(m * k, 3), seeded(k * n, 4));
        let packed = Bf16Matrix::pack(&b, n).expect("AMX detected");
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
