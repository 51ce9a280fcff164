//! Which unit of the host CPU runs `bf16` products ([`Bf16Unit`]), detected once: AMX's tiles
//! (CPUID, XCR0 and Linux's grant of the tiles' state, Intel SDM vol. 1 ch. 18) or AVX-512's
//! `bf16` dot products (CPUID), within the caller's [`HostInstructions`] limit.

use std::sync::OnceLock;

use crate::host_gemm::HostInstructions;

/// What runs a CPU's `bf16` products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Unit {
    /// AMX's tiles (`TDPBF16PS`): Intel Xeon from the 4th generation (Sapphire Rapids), on
    /// Linux 5.16 or later.
    Amx,
    /// AVX-512's `bf16` dot products (`VDPBF16PS`) on 512-bit vectors: AMD Zen 4 and 5 by
    /// default; any CPU that has them where the limit is [`HostInstructions::Avx512`].
    Avx512Bf16,
}

impl Bf16Unit {
    /// The unit this CPU has for `bf16` products within `limit`, else none (`f32` products):
    /// - [`HostInstructions::Widest`]: AMX where the tiles are granted, else AVX512-BF16 on an
    ///   AMD CPU (Zen 4 and 5). Intel's CPUs run `VDPBF16PS` at half the rate of an `f32` FMA
    ///   (measured on a Xeon with AMX: ~0.5 a cycle, 16 products a cycle against the FMA's
    ///   32), so that only products of a few rows, which stream the weights, gain from it
    ///   there; the widest choice leaves it out on them (Cooper Lake keeps `f32`).
    /// - [`HostInstructions::Avx512`]: AVX512-BF16 on any CPU that has it (the vector unit's
    ///   products on a CPU with AMX, for tests and benchmarks).
    /// - narrower limits: none.
    ///
    /// Detected once; the first call that may use AMX asks Linux for the tiles' state.
    pub fn at_most(limit: HostInstructions) -> Option<Self> {
        static AMX: OnceLock<bool> = OnceLock::new();
        // CPUID traps to the hypervisor in a VM: each answer is read once (std's feature
        // detection in `dot_available` keeps its own).
        static AMD: OnceLock<bool> = OnceLock::new();
        match limit {
            HostInstructions::Widest if *AMX.get_or_init(amx_available) => Some(Self::Amx),
            HostInstructions::Widest if *AMD.get_or_init(on_amd) && dot_available() => {
                Some(Self::Avx512Bf16)
            }
            HostInstructions::Avx512 if dot_available() => Some(Self::Avx512Bf16),
            _ => None,
        }
    }
}

/// Whether this CPU runs `bf16` products within `limit` ([`Bf16Unit::at_most`]): the products
/// of [`crate::Precision::Mixed`] on the host.
pub fn host_bf16_products(limit: HostInstructions) -> bool {
    Bf16Unit::at_most(limit).is_some()
}

/// Whether this CPU and OS run AMX's `bf16` tile products (the call asks Linux for the tiles'
/// state).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_available() -> bool {
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
    let xcr0 = unsafe { xgetbv0() };
    if xcr0 & (0b11 << 17) != 0b11 << 17 {
        return false;
    }
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) changes only this process's
    // permission to use the tiles' state; an older kernel answers an error.
    unsafe { request_tile_state() }
}

/// No AMX off Linux x86-64.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn amx_available() -> bool {
    false
}

/// Whether this CPU runs AVX-512's `bf16` dot products (and the OS keeps 512-bit state).
#[cfg(target_arch = "x86_64")]
fn dot_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// None off x86-64.
#[cfg(not(target_arch = "x86_64"))]
fn dot_available() -> bool {
    false
}

/// Whether this CPU is AMD's (CPUID's vendor "AuthenticAMD"). Intel's cores run `VDPBF16PS` at
/// half an `f32` FMA's rate (measured on a Xeon with AMX: 16 products a cycle against 32), so
/// that it pays there only for products of a few rows; a Zen 4 core runs `f32` FMAs at half
/// that Xeon's rate, and its `VDPBF16PS` rate is not measured yet.
#[cfg(target_arch = "x86_64")]
fn on_amd() -> bool {
    let leaf0 = std::arch::x86_64::__cpuid(0);
    let vendor = [leaf0.ebx, leaf0.edx, leaf0.ecx]
        .map(u32::to_le_bytes)
        .concat();
    vendor == b"AuthenticAMD"
}

/// None off x86-64.
#[cfg(not(target_arch = "x86_64"))]
fn on_amd() -> bool {
    false
}

/// XCR0, the OS-enabled state components.
///
/// # Safety
/// The CPU has OSXSAVE.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn xgetbv0() -> u64 {
    use std::arch::asm;
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
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn request_tile_state() -> bool {
    use std::arch::asm;
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
