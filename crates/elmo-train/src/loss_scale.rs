//! Dynamic loss scaling for mixed-precision training (Micikevicius et al. 2018, "Mixed Precision
//! Training", §3.2, with the rule of PyTorch's `torch.amp.GradScaler`): the loss's gradient is
//! multiplied by a scale before backpropagation, so that small gradients survive the 16-bit
//! products (f16's smallest normal value is 6.1e-5, its smallest subnormal 6e-8), and the
//! gradients are divided by it before clipping and the update. A step whose gradients overflow
//! (a non-finite norm) is skipped and the scale halved; after [`GROWTH_INTERVAL`] finite steps
//! in a row it is doubled.

use serde::{Deserialize, Serialize};

use crate::step_losses::StepLosses;

/// The scale a mixed-precision run starts with: 2^16, as `GradScaler`.
pub const INITIAL_LOSS_SCALE: f64 = 65_536.0;

/// Finite steps in a row after which the scale is doubled (`GradScaler`'s 2,000).
pub const GROWTH_INTERVAL: u64 = 2_000;

/// The lowest scale: the halving stops here (a run whose gradients overflow even at 2^-24 has
/// diverged, and its loss says so).
pub const MIN_LOSS_SCALE: f64 = 1.0 / 16_777_216.0;

/// The highest scale: 2^24 (f16's largest value is 65,504; a larger scale only overflows).
pub const MAX_LOSS_SCALE: f64 = 16_777_216.0;

/// The state of dynamic loss scaling, saved in a checkpoint so that a resumed run scales as the
/// uninterrupted one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossScale {
    /// The factor the loss's gradient is multiplied by (a power of two).
    pub scale: f64,
    /// Finite steps in a row since the scale last changed.
    pub good_steps: u64,
}

impl Default for LossScale {
    fn default() -> Self {
        Self {
            scale: INITIAL_LOSS_SCALE,
            good_steps: 0,
        }
    }
}

/// What a step did with its gradients under a [`LossScale`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaledStep {
    /// The gradients were finite and the update applied.
    Applied,
    /// The gradients overflowed: no update.
    Skipped,
}

impl ScaledStep {
    /// What [`crate::optimizer_step::optimizer_step`] did with a step's gradients.
    pub fn of(losses: &StepLosses) -> Self {
        match losses.skipped {
            true => Self::Skipped,
            false => Self::Applied,
        }
    }
}

impl LossScale {
    /// Moves the scale on after a step: halved (and the count restarted) when it was skipped,
    /// doubled after [`GROWTH_INTERVAL`] applied steps in a row.
    pub fn update(&mut self, step: ScaledStep) {
        match step {
            ScaledStep::Skipped => {
                self.scale = (self.scale * 0.5).max(MIN_LOSS_SCALE);
                self.good_steps = 0;
            }
            ScaledStep::Applied => {
                self.good_steps += 1;
                if self.good_steps >= GROWTH_INTERVAL {
                    self.scale = (self.scale * 2.0).min(MAX_LOSS_SCALE);
                    self.good_steps = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflow_halves_the_scale_and_a_long_run_of_finite_steps_doubles_it() {
        let mut scale = LossScale::default();
        for _ in 0..GROWTH_INTERVAL - 1 {
            scale.update(ScaledStep::Applied);
        }
        assert_eq!(scale.scale, INITIAL_LOSS_SCALE);
        scale.update(ScaledStep::Skipped);
        assert_eq!(
            scale,
            LossScale {
                scale: INITIAL_LOSS_SCALE / 2.0,
                good_steps: 0
            }
        );
        for _ in 0..GROWTH_INTERVAL {
            scale.update(ScaledStep::Applied);
        }
        assert_eq!(
            scale,
            LossScale {
                scale: INITIAL_LOSS_SCALE,
                good_steps: 0
            }
        );
    }

    #[test]
    fn the_scale_stays_within_its_bounds() {
        let mut scale = LossScale::default();
        for _ in 0..100 {
            scale.update(ScaledStep::Skipped);
        }
        assert_eq!(scale.scale, MIN_LOSS_SCALE);
        let mut scale = LossScale {
            scale: MAX_LOSS_SCALE,
            good_steps: GROWTH_INTERVAL - 1,
        };
        scale.update(ScaledStep::Applied);
        assert_eq!(scale.scale, MAX_LOSS_SCALE);
    }
}
