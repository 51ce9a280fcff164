//! Tuning of the C allocator (glibc's `malloc`) for burn's CPU backends: a process-wide
//! setting for applications that run on flex or ndarray.

/// Makes glibc's `malloc` serve large blocks from its heap and keep freed memory for reuse,
/// instead of mapping fresh pages for every large block and returning them when it is freed.
///
/// burn's CPU backends allocate a new buffer for the result of almost every tensor operation;
/// an `original` training step makes many of tens of MiB (a layer's gates over all steps,
/// `[20, 32, 16,384]` floats, 42 MB). By default glibc maps each block above its threshold (at
/// most 32 MiB) afresh and unmaps it on free, so every such buffer costs a page fault per 4 KiB
/// and the zeroing of its pages: a third of an `original` training step's time was spent in
/// the kernel (2-vCPU Xeon, `bench_train --preset original --batch-size 32`, 6.0 s of system
/// time in 18 s). With blocks up to 1 GiB from the heap, up to 1 GiB of free memory kept at its
/// top and 64 MiB of headroom per growth: 1.1-1.3 s of system time, and the step 1.2x faster;
/// the peak resident memory grows by what the heap keeps (docs/benchmarks.md).
///
/// The setting is global to the process, so it is an application's choice: the `elmo` CLI
/// makes it for its CPU backends. It does nothing with another C library.
pub fn keep_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const GIB: libc::c_int = 1 << 30;
        // SAFETY: `mallopt` only sets the allocator's parameters; any value is accepted or
        // refused (it returns 0 then, and the default stays).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, GIB);
            libc::mallopt(libc::M_TRIM_THRESHOLD, GIB);
            libc::mallopt(libc::M_TOP_PAD, 64 << 20);
        }
    }
}
