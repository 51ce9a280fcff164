//! The losses of an optimizer step and their running sums between two metrics lines (kept in a
//! checkpoint so that a resumed run writes the same metrics).

use serde::{Deserialize, Serialize};

/// The losses of one optimizer step (host values).
#[derive(Debug, Clone, Copy)]
pub struct StepLosses {
    /// Joint loss (NaN or infinite: the update was not applied).
    pub loss: f64,
    /// Summed forward NLL and its target count.
    pub forward_nll: f64,
    /// Forward targets.
    pub n_forward: u64,
    /// Summed backward NLL.
    pub backward_nll: f64,
    /// Backward targets.
    pub n_backward: u64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Mixed precision: the scaled gradients overflowed and the update was skipped.
    pub skipped: bool,
}

/// Running sums of the losses since the last metrics line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LossWindow {
    /// Steps in the window.
    pub steps: u64,
    /// Σ of the joint loss.
    pub loss: f64,
    /// Σ forward NLL and its target count.
    pub forward_nll: f64,
    /// Forward targets.
    pub forward_targets: u64,
    /// Σ backward NLL.
    pub backward_nll: f64,
    /// Backward targets.
    pub backward_targets: u64,
    /// Σ of gradient norms (of the steps not skipped).
    pub grad_norm: f64,
    /// Steps skipped for overflowing gradients (mixed precision; absent in older checkpoints).
    #[serde(default)]
    pub skipped: u64,
}

impl LossWindow {
    /// Adds one step.
    pub fn add(&mut self, losses: &StepLosses) {
        self.steps += 1;
        self.loss += losses.loss;
        self.forward_nll += losses.forward_nll;
        self.forward_targets += losses.n_forward;
        self.backward_nll += losses.backward_nll;
        self.backward_targets += losses.n_backward;
        match losses.skipped {
            true => self.skipped += 1,
            false => self.grad_norm += losses.grad_norm,
        }
    }

    /// The mean gradient norm of the steps not skipped (0 without any).
    pub fn mean_grad_norm(&self) -> f64 {
        self.grad_norm / (self.steps - self.skipped).max(1) as f64
    }
}
