//! Inverted dropout with masks from a seeded host RNG (bilm-tf's dropout on every LSTM input and on
//! the top output): unlike the backend's global RNG, the masks depend only on the seed, whatever
//! else runs in the process (exact resume, reproducible runs).

use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A stream of dropout masks.
pub(crate) struct DropoutMasks {
    keep: f64,
    rng: Option<ChaCha8Rng>,
}

impl DropoutMasks {
    /// Masks that drop with `probability`; none at all without a seed (evaluation).
    pub(crate) fn new(probability: f64, seed: Option<u64>) -> Self {
        Self {
            keep: 1.0 - probability,
            rng: seed
                .filter(|_| probability > 0.0)
                .map(ChaCha8Rng::seed_from_u64),
        }
    }

    /// The next mask (each value `0` or `1/keep`), `None` when dropout is off.
    pub(crate) fn next_mask(&mut self, dims: [usize; 3], device: &Device) -> Option<Tensor<3>> {
        let rng = self.rng.as_mut()?;
        let scale = (1.0 / self.keep) as f32;
        let keep = self.keep as f32;
        let values: Vec<f32> = (0..dims.iter().product::<usize>())
            .map(|_| {
                if rng.random::<f32>() < keep {
                    scale
                } else {
                    0.0
                }
            })
            .collect();
        Some(Tensor::from_data(TensorData::new(values, dims), device))
    }

    /// `x` times the next mask.
    pub(crate) fn apply(&mut self, x: Tensor<3>) -> Tensor<3> {
        match self.next_mask(x.dims(), &x.device()) {
            Some(mask) => x * mask,
            None => x,
        }
    }
}
