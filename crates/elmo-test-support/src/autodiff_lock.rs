//! One differentiating test at a time in a test process: a workaround for a race in burn-autodiff
//! 0.22's shared graph, measured in elmo-train's `training` tests.

/// Holds the tests of a process that differentiate to one at a time while it lives. burn-autodiff
/// 0.22's graph is shared by every thread of a process, and backward passes on two threads over
/// graphs that reuse parameter leaves can trip its consumed-graph check ("graph tape has already
/// been consumed"): once in a `cargo xtask spirv` run and in 1 of 12 runs of elmo-train's
/// `training` tests in the `vulkan` build on 2 cores, never with the failing test alone (6 runs)
/// or with this lock (8 runs, 22.9-24.9 s a run against 24-27 s in parallel).
pub fn autodiff_one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
