//! Scalar mix of biLM layers, `γ · Σ_j softmax(s)_j · h_j` (Peters et al. 2018, eq. 1), with
//! AllenNLP's optional layer norm over all unmasked elements (allennlp/modules/scalar_mix.py).

use burn::module::{Module, Param};
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Device, Tensor, TensorData};

/// Configuration of a [`ScalarMix`].
#[derive(Debug, Clone)]
pub struct ScalarMixConfig {
    /// Number of layers mixed (`2L + 1` layers are `L + 1` tensors of `[fwd; bwd]`).
    pub n_layers: usize,
    /// Normalise each layer over all unmasked elements of the batch before mixing.
    pub do_layer_norm: bool,
    /// Initial pre-softmax weights `s` (zeros, i.e. an equal average, when `None`).
    pub initial_weights: Option<Vec<f32>>,
    /// Train the weights `s` (otherwise they stay fixed). `γ` follows the same setting.
    pub trainable: bool,
    /// Initial `γ`.
    pub initial_gamma: f32,
}

impl ScalarMixConfig {
    /// An equal-average, trainable mix without layer norm.
    pub fn new(n_layers: usize) -> Self {
        Self {
            n_layers,
            do_layer_norm: false,
            initial_weights: None,
            trainable: true,
            initial_gamma: 1.0,
        }
    }

    /// Creates the mix. Panics when `initial_weights` has the wrong length (a programming error).
    pub fn init(&self, device: &Device) -> ScalarMix {
        let weights = self
            .initial_weights
            .clone()
            .unwrap_or_else(|| vec![0.0; self.n_layers]);
        assert_eq!(weights.len(), self.n_layers, "one initial weight per layer");
        let weights = Param::from_tensor(Tensor::from_data(
            TensorData::new(weights, [self.n_layers]),
            device,
        ))
        .set_require_grad(self.trainable);
        let gamma = Param::from_tensor(Tensor::from_data(
            TensorData::new(vec![self.initial_gamma], [1]),
            device,
        ))
        .set_require_grad(self.trainable);
        ScalarMix {
            weights,
            gamma,
            do_layer_norm: self.do_layer_norm,
        }
    }
}

/// Learned (or fixed) weighted sum of layers.
#[derive(Module, Debug)]
pub struct ScalarMix {
    /// Pre-softmax layer weights `s`, `[n_layers]`.
    pub weights: Param<Tensor<1>>,
    /// Scale `γ`, `[1]`.
    pub gamma: Param<Tensor<1>>,
    /// Layer-normalise each layer first.
    #[module(skip)]
    pub do_layer_norm: bool,
}

/// AllenNLP's `tiny_value_of_dtype(float32)`.
const LAYER_NORM_EPSILON: f64 = 1e-13;

impl ScalarMix {
    /// Mixes the layers.
    ///
    /// # Shapes
    /// - layers: `n_layers` tensors `[B, T, D]`
    /// - mask: `[B, T]`, `true` for real tokens (only used with layer norm)
    /// - output: `[B, T, D]`
    pub fn forward(&self, layers: &[Tensor<3>], mask: &Tensor<2, Bool>) -> Tensor<3> {
        assert_eq!(
            layers.len(),
            self.weights.shape().dims::<1>()[0],
            "one tensor per mixed layer"
        );
        let normed = softmax(self.weights.val(), 0);
        let mask = mask.clone().float().unsqueeze_dim::<3>(2);
        let n_unmasked = if self.do_layer_norm {
            let d = layers[0].dims()[2] as f64;
            Some(mask.clone().sum().mul_scalar(d))
        } else {
            None
        };
        let mixed = layers
            .iter()
            .enumerate()
            .map(|(j, layer)| {
                let layer = match &n_unmasked {
                    Some(n) => masked_layer_norm(layer.clone(), &mask, n.clone()),
                    None => layer.clone(),
                };
                layer * normed.clone().narrow(0, j, 1).reshape([1, 1, 1])
            })
            .reduce(|a, b| a + b)
            .expect("at least one layer");
        mixed * self.gamma.val().reshape([1, 1, 1])
    }

    /// The regularisation `λ · Σ_j s_j²` on the pre-softmax weights (pulls the mix toward an equal
    /// average). Shape `[1]`.
    pub fn penalty(&self, lambda: f64) -> Tensor<1> {
        self.weights.val().powi_scalar(2).sum().mul_scalar(lambda)
    }

    /// The normalised layer weights `softmax(s)`.
    pub fn normalized_weights(&self) -> Tensor<1> {
        softmax(self.weights.val(), 0)
    }
}

/// AllenNLP's `_do_layer_norm`: one mean and variance over every unmasked element of the batch.
fn masked_layer_norm(tensor: Tensor<3>, mask: &Tensor<3>, n_unmasked: Tensor<1>) -> Tensor<3> {
    let masked = tensor.clone() * mask.clone();
    let mean = masked.clone().sum() / n_unmasked.clone();
    let mean3 = mean.reshape([1, 1, 1]);
    let centered = (masked - mean3.clone()) * mask.clone();
    let variance = centered.powi_scalar(2).sum() / n_unmasked;
    (tensor - mean3)
        / variance
            .add_scalar(LAYER_NORM_EPSILON)
            .sqrt()
            .reshape([1, 1, 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(device: &Device) -> Vec<Tensor<3>> {
        (0..3)
            .map(|j| Tensor::<3>::ones([2, 3, 4], device).mul_scalar(j as f64 + 1.0))
            .collect()
    }

    #[test]
    fn weighted_sum_penalty_and_fixed_weights() {
        let device = Device::flex().autodiff();
        let mask = Tensor::<2, Bool>::from_data(TensorData::new(vec![true; 6], [2, 3]), &device);
        let mix = ScalarMixConfig {
            initial_weights: Some(vec![0.0, 0.0, (2.0f32).ln()]),
            initial_gamma: 2.0,
            ..ScalarMixConfig::new(3)
        }
        .init(&device);
        // softmax = [1/4, 1/4, 1/2]; 2 * (1/4 + 2/4 + 3/2) = 4.5.
        let out = mix.forward(&layers(&device), &mask);
        let value: f32 = out.clone().mean().into_scalar();
        assert!((value - 4.5).abs() < 1e-5, "{value}");
        let penalty: f32 = mix.penalty(0.1).into_scalar();
        assert!(
            (penalty - 0.1 * 2f32.ln().powi(2)).abs() < 1e-6,
            "{penalty}"
        );
        let grads = out.sum().backward();
        assert!(mix.weights.val().grad(&grads).is_some());

        let fixed = ScalarMixConfig {
            trainable: false,
            ..ScalarMixConfig::new(3)
        }
        .init(&device);
        // The layers carry the graph here (a fixed mix alone would leave nothing to track).
        let tracked: Vec<Tensor<3>> = layers(&device)
            .into_iter()
            .map(Tensor::require_grad)
            .collect();
        let grads = fixed.forward(&tracked, &mask).sum().backward();
        assert!(tracked[0].grad(&grads).is_some());
        assert!(
            fixed.weights.val().grad(&grads).is_none(),
            "fixed weights must not train"
        );
    }
}
