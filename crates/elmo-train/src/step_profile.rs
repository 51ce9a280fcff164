//! Where a training step's time goes, per phase, for tuning a backend: with the environment
//! variable `ELMO_STEP_PROFILE` set, every phase boundary of [`crate::trainer::optimizer_step`]
//! synchronises the device (so that a GPU's queued work is counted in the phase that queued it)
//! and adds the wall time since the previous boundary to that phase. Off (the default), a
//! boundary costs one relaxed atomic load. `cargo xtask bench train` prints the phases when set.
//! Only the packed (stateful) fast path has boundaries inside the forward and backward passes;
//! a sentence-mode step (autodiff throughout) counts both in its first phase.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use burn::tensor::Device;

/// 0: not read yet, 1: off, 2: on.
static ENABLED: AtomicU8 = AtomicU8::new(0);

/// The last boundary's time and each phase's total, in the order first seen.
type Phases = (Option<Instant>, Vec<(&'static str, Duration)>);

static STATE: Mutex<Phases> = Mutex::new((None, Vec::new()));

/// Whether `ELMO_STEP_PROFILE` is set (read once).
pub fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("ELMO_STEP_PROFILE").is_some();
            ENABLED.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        state => state == 2,
    }
}

/// A step starts: waits for the device, then starts the clock of its first phase.
pub fn start(device: &Device) {
    if enabled() {
        let _ = device.sync();
        lock().0 = Some(Instant::now());
    }
}

/// `phase` ends here: waits for the device and adds the time since the last boundary to it.
pub fn mark(device: &Device, phase: &'static str) {
    if !enabled() {
        return;
    }
    let _ = device.sync();
    let now = Instant::now();
    let mut state = lock();
    let elapsed = state.0.map_or(Duration::ZERO, |last| now - last);
    state.0 = Some(now);
    match state.1.iter_mut().find(|(name, _)| *name == phase) {
        Some((_, total)) => *total += elapsed,
        None => state.1.push((phase, elapsed)),
    }
}

/// The phases' totals since the last call (and clears them).
pub fn take() -> Vec<(&'static str, Duration)> {
    let mut state = lock();
    state.0 = None;
    std::mem::take(&mut state.1)
}

fn lock() -> MutexGuard<'static, Phases> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_in_the_order_first_seen() {
        ENABLED.store(2, Ordering::Relaxed);
        let device = Device::flex();
        for _ in 0..2 {
            start(&device);
            std::thread::sleep(Duration::from_millis(2));
            mark(&device, "first");
            mark(&device, "second");
        }
        let phases = take();
        ENABLED.store(0, Ordering::Relaxed);
        // Other tests of this binary may add their own phases meanwhile: look at these two.
        let find = |phase| phases.iter().position(|(name, _)| *name == phase);
        let (Some(first), Some(second)) = (find("first"), find("second")) else {
            panic!("phases missing: {phases:?}");
        };
        assert!(first < second, "{phases:?}");
        assert!(phases[first].1 >= Duration::from_millis(4), "{phases:?}");
    }
}
