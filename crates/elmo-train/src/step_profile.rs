//! Where a training step's time goes, per phase, for tuning a backend: a [`StepProfile`] given
//! to a step ([`crate::optimizer_step::StepSettings::profile`]) synchronises the device at every phase
//! boundary (so that a GPU's queued work is counted in the phase that queued it) and adds the
//! wall time since the previous boundary to that phase. Without one a step does neither.
//! `cargo xtask bench train -- --phases` prints the phases. Only the packed (stateful) fast path
//! has boundaries inside the forward and backward passes; a sentence-mode step (autodiff
//! throughout) counts both in its first phase.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use burn::tensor::Device;

/// The last boundary's time and each phase's total, in the order first seen.
type Phases = (Option<Instant>, Vec<(&'static str, Duration)>);

/// The phases' totals of the steps it was given to.
#[derive(Debug, Default)]
pub struct StepProfile {
    state: Mutex<Phases>,
}

impl StepProfile {
    /// An empty profile.
    pub fn new() -> Self {
        Self::default()
    }

    /// A step starts: waits for the device, then starts the clock of its first phase.
    pub fn start(&self, device: &Device) {
        let _ = device.sync();
        self.lock().0 = Some(Instant::now());
    }

    /// `phase` ends here: waits for the device and adds the time since the last boundary to it.
    pub fn mark(&self, device: &Device, phase: &'static str) {
        let _ = device.sync();
        let now = Instant::now();
        let mut state = self.lock();
        let elapsed = state.0.map_or(Duration::ZERO, |last| now - last);
        state.0 = Some(now);
        match state.1.iter_mut().find(|(name, _)| *name == phase) {
            Some((_, total)) => *total += elapsed,
            None => state.1.push((phase, elapsed)),
        }
    }

    /// The phases' totals since the last call (and clears them).
    pub fn take(&self) -> Vec<(&'static str, Duration)> {
        let mut state = self.lock();
        state.0 = None;
        std::mem::take(&mut state.1)
    }

    fn lock(&self) -> MutexGuard<'_, Phases> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_in_the_order_first_seen() {
        let profile = StepProfile::new();
        let device = Device::flex();
        for _ in 0..2 {
            profile.start(&device);
            std::thread::sleep(Duration::from_millis(2));
            profile.mark(&device, "first");
            profile.mark(&device, "second");
        }
        let phases = profile.take();
        let names: Vec<_> = phases.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["first", "second"]);
        assert!(phases[0].1 >= Duration::from_millis(4), "{phases:?}");
        assert!(profile.take().is_empty());
    }
}
