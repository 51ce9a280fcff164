//! The state of the reduce-on-plateau learning-rate schedule ([`LrSchedule::Plateau`]): the
//! current factor, the best validation perplexity and the validations since it, saved in every
//! checkpoint so that a resumed run decays exactly as an uninterrupted one.

use serde::{Deserialize, Serialize};

use crate::config::LrSchedule;

/// Where the plateau schedule stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlateauState {
    /// The factor on the optimizer's rate (1 until the first decay).
    pub scale: f64,
    /// The last validation perplexity that counted as progress (PyTorch's `ReduceLROnPlateau`
    /// keeps its `best` the same way), so that small gains add up until they make progress.
    pub best: Option<f64>,
    /// Validations in a row that did not beat `best` by the threshold.
    pub bad_validations: u32,
}

impl Default for PlateauState {
    fn default() -> Self {
        Self {
            scale: 1.0,
            best: None,
            bad_validations: 0,
        }
    }
}

impl PlateauState {
    /// The factor on the learning rate under `schedule` (1 unless it is `Plateau`).
    pub fn factor(&self, schedule: &LrSchedule) -> f64 {
        match schedule {
            LrSchedule::Plateau { .. } => self.scale,
            _ => 1.0,
        }
    }

    /// Takes one validation perplexity into account; returns whether the rate was decayed.
    /// Schedules other than `Plateau` leave the state alone.
    pub fn observe(&mut self, schedule: &LrSchedule, perplexity: f64) -> bool {
        let LrSchedule::Plateau {
            decay,
            threshold,
            patience,
        } = *schedule
        else {
            return false;
        };
        let progress = perplexity.is_finite()
            && self
                .best
                .is_none_or(|best| perplexity < best * (1.0 - threshold));
        if progress {
            self.best = Some(perplexity);
            self.bad_validations = 0;
            return false;
        }
        self.bad_validations += 1;
        if self.bad_validations <= patience {
            return false;
        }
        self.scale *= decay;
        self.bad_validations = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decays_after_patience_validations_without_progress() {
        let schedule = LrSchedule::Plateau {
            decay: 0.5,
            threshold: 0.01,
            patience: 1,
        };
        let mut state = PlateauState::default();
        // 100 → 95 is progress; 94.5 and 94.4 are within 1% of 95: the second one decays.
        // 90 is progress; 89.9 and 89.8 are not, and decay; 89.5 is not either, but 89.0 is
        // (1.1% below 90, the reference, though only 0.6% below 89.5).
        let decayed: Vec<bool> = [100.0, 95.0, 94.5, 94.4, 90.0, 89.9, 89.8, 89.5, 89.0]
            .into_iter()
            .map(|p| state.observe(&schedule, p))
            .collect();
        assert_eq!(
            decayed,
            [false, false, false, true, false, false, true, false, false],
            "{state:?}"
        );
        assert_eq!(state.factor(&schedule), 0.25);
        assert_eq!(state.factor(&LrSchedule::Constant), 1.0);
        assert_eq!(state.best, Some(89.0));
        assert_eq!(state.bad_validations, 0);
        // Other schedules never decay.
        let mut constant = PlateauState::default();
        assert!(!constant.observe(&LrSchedule::Constant, 1.0));
        assert!(!constant.observe(&LrSchedule::Constant, 2.0));
        assert_eq!(constant, PlateauState::default());
    }
}
