//! Weight averaging (Polyak & Juditsky 1992; Merity et al. 2018, "Regularizing and Optimizing
//! LSTM Language Models", §3: ASGD with the non-monotone trigger): the running mean of the
//! weights after every step from a trigger on, kept beside the trained weights, saved in every
//! checkpoint (`average.bpk`) and used by validation and by everything that reads the run.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use crate::config::Averaging;

/// Where the averaging stands, saved in every checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AveragingState {
    /// The first step in the mean (1-based); `None` until averaging has started.
    pub since_step: Option<u64>,
    /// Steps in the mean.
    pub n_averaged: u64,
    /// Validation perplexities before averaging started (the non-monotone trigger's history).
    pub validations: Vec<f64>,
}

impl AveragingState {
    /// Whether the weights after step `step` (1-based) go into the mean. Starts the averaging
    /// when `averaging` says it starts at this step; `Off` stops and forgets it.
    pub fn includes(&mut self, averaging: &Averaging, step: u64) -> bool {
        match averaging {
            Averaging::Off => {
                *self = Self::default();
                return false;
            }
            Averaging::FromStep { start } if self.since_step.is_none() && step >= *start => {
                self.since_step = Some(step);
            }
            _ => {}
        }
        self.since_step.is_some_and(|since| step >= since)
    }

    /// Takes a validation perplexity of the trained (not yet averaged) weights after step
    /// `step`; under [`Averaging::WhenFlat`] starts the averaging from the next step when the
    /// perplexity is worse than the best one before the last `patience` validations. Returns
    /// whether it started.
    pub fn observe_validation(
        &mut self,
        averaging: &Averaging,
        perplexity: f64,
        step: u64,
    ) -> bool {
        let Averaging::WhenFlat { patience } = *averaging else {
            return false;
        };
        if self.since_step.is_some() {
            return false;
        }
        let before_the_last = self.validations.len().saturating_sub(patience as usize);
        let best = self.validations[..before_the_last]
            .iter()
            .copied()
            .reduce(f64::min);
        let flat = best.is_some_and(|best| perplexity > best || perplexity.is_nan());
        self.validations.push(perplexity);
        if flat {
            self.since_step = Some(step + 1);
        }
        flat
    }
}

/// The running mean of a module's weights.
#[derive(Debug, Clone)]
pub struct WeightAverage<M> {
    /// The mean (on the plain device).
    pub mean: M,
    /// Weight sets in it.
    pub n_averaged: u64,
}

impl<M: Module> WeightAverage<M> {
    /// A mean of one: `module`'s weights (moved off autodiff).
    pub fn start(module: &M) -> Self {
        Self {
            mean: module.valid(),
            n_averaged: 1,
        }
    }

    /// Adds `module`'s weights: `mean ← mean + (θ − mean) / n`.
    pub fn add(&mut self, module: &M) {
        let mut weights = Weights::default();
        module.valid().visit(&mut weights);
        self.n_averaged += 1;
        let mut update = Update {
            weights: weights.0.into_iter(),
            rate: 1.0 / self.n_averaged as f64,
        };
        self.mean = self.mean.clone().map(&mut update);
    }
}

/// A module's float weights in visiting order, flattened.
#[derive(Default)]
struct Weights(Vec<Tensor<1>>);

impl ModuleVisitor for Weights {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.val().flatten(0, D - 1));
    }
}

/// Moves each weight of the mean towards the next of `weights` (same module type, so the
/// same visiting order and shapes).
struct Update {
    weights: std::vec::IntoIter<Tensor<1>>,
    rate: f64,
}

impl ModuleMapper for Update {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(weight) = self.weights.next() else {
            return param;
        };
        let rate = self.rate;
        param.map(|mean| {
            let weight: Tensor<D> = weight.reshape(mean.shape());
            mean.clone() + (weight - mean).mul_scalar(rate)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::Device;

    fn linear(device: &Device, value: f32) -> Linear {
        let mut layer = LinearConfig::new(3, 2).init(device);
        layer.weight = layer.weight.map(|w| w.zeros_like().add_scalar(value));
        layer.bias = layer
            .bias
            .map(|b| b.map(|b| b.zeros_like().add_scalar(2.0 * value)));
        layer
    }

    fn values(layer: &Linear) -> Vec<f32> {
        let mut weights = Weights::default();
        layer.visit(&mut weights);
        weights
            .0
            .into_iter()
            .flat_map(|t| t.into_data().try_to_vec::<f32>().unwrap_or_default())
            .collect()
    }

    #[test]
    fn the_mean_of_three_weight_sets() {
        let device = Device::flex();
        let mut average = WeightAverage::start(&linear(&device, 1.0));
        average.add(&linear(&device, 2.0));
        average.add(&linear(&device, 6.0));
        assert_eq!(average.n_averaged, 3);
        let mean = values(&average.mean);
        assert_eq!(mean.len(), 3 * 2 + 2);
        for (i, v) in mean.iter().enumerate() {
            let expected = if i < 6 { 3.0 } else { 6.0 };
            assert!((v - expected).abs() < 1e-6, "{i}: {v}");
        }
    }

    #[test]
    fn starts_from_a_step_or_when_validation_is_flat() {
        let from = Averaging::FromStep { start: 3 };
        let mut state = AveragingState::default();
        let included: Vec<bool> = (1..=4).map(|s| state.includes(&from, s)).collect();
        assert_eq!(included, [false, false, true, true]);
        assert_eq!(state.since_step, Some(3));
        // Off forgets it.
        assert!(!state.includes(&Averaging::Off, 5));
        assert_eq!(state, AveragingState::default());

        // Merity et al.: worse than the best validation before the last `patience` ones.
        let flat = Averaging::WhenFlat { patience: 2 };
        let mut state = AveragingState::default();
        let started: Vec<bool> = [100.0, 90.0, 95.0, 92.0, 89.0, 91.0, 89.5, 93.0]
            .into_iter()
            .enumerate()
            .map(|(i, p)| state.observe_validation(&flat, p, 10 * (i as u64 + 1)))
            .collect();
        // 92 > 100? no; 89 beats all; 91 > min(100, 90, 95) = 90: starts (after step 60).
        assert_eq!(
            started,
            [false, false, false, false, false, true, false, false]
        );
        assert_eq!(state.since_step, Some(61));
        assert!(!state.includes(&flat, 60));
        assert!(state.includes(&flat, 61));
        // Other settings never start it from a validation.
        let mut other = AveragingState::default();
        assert!(!other.observe_validation(&Averaging::Off, f64::NAN, 1));
        assert!(!other.observe_validation(&from, 1.0, 1));
    }
}
