//! A task's own view of ELMo: a scalar mix of the frozen biLM's layers (Peters et al. 2018,
//! eq. 1), dropout on the result, and the optional λ‖s‖² penalty; one per place ELMo enters
//! the task model (§3.3: input, and optionally the task RNN's output).

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig};
use burn::tensor::{Bool, Device, Tensor};
use elmo_model::{ScalarMix, ScalarMixConfig};
use serde::{Deserialize, Serialize};

/// Which layers the mix uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MixKind {
    /// Learned softmax weights over all layers (ELMo).
    All,
    /// The top layer only (fixed).
    Top,
    /// A fixed equal average of all layers.
    Average,
    /// One layer only (fixed): 0 the token layer, `j` the `j`-th LSTM layer, as the paper
    /// probes each layer alone (§5.3, Tables 5 and 6).
    Layer(usize),
}

impl MixKind {
    /// The one layer a fixed mix of `n_layers` layers keeps (`None`: all and average).
    pub fn single_layer(self, n_layers: usize) -> Option<usize> {
        match self {
            Self::All | Self::Average => None,
            Self::Top => Some(n_layers.saturating_sub(1)),
            Self::Layer(layer) => Some(layer),
        }
    }
}

/// Where ELMo is concatenated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElmoPlace {
    /// `[x_k; ELMo_k]` into the task RNN.
    Input,
    /// `[h_k; ELMo_k]` after the task RNN.
    Output,
    /// Both, with separate mixes.
    Both,
}

impl ElmoPlace {
    /// ELMo enters at the input.
    pub fn at_input(self) -> bool {
        matches!(self, Self::Input | Self::Both)
    }
    /// ELMo enters at the output.
    pub fn at_output(self) -> bool {
        matches!(self, Self::Output | Self::Both)
    }
}

/// Configuration of an [`ElmoMixer`].
#[derive(Debug, Clone)]
pub struct ElmoMixerConfig {
    /// biLM layers (`L + 1`).
    pub n_layers: usize,
    /// Which layers.
    pub kind: MixKind,
    /// Dropout on the mixed vector (paper: 0.5).
    pub dropout: f64,
    /// Layer-normalise each biLM layer before weighting (§3.2; AllenNLP's `do_layer_norm`).
    pub layer_norm: bool,
}

impl ElmoMixerConfig {
    /// Creates the mixer (`γ = 1`; `s = 0` for `all` and `average`, one-hot on the top layer
    /// for `top` and on layer `j` for `layer(j)`).
    ///
    /// # Panics
    /// When `dropout` is not in `[0, 1)` (burn's `Dropout` refuses it) or a single layer is
    /// not one of the `n_layers` ([`crate::encoder::SentenceEncoderConfig::validate`] checks a
    /// task's settings first).
    pub fn init(&self, device: &Device) -> ElmoMixer {
        let mut mix = ScalarMixConfig::new(self.n_layers);
        mix.do_layer_norm = self.layer_norm;
        if self.kind != MixKind::All {
            mix.trainable = false;
        }
        if let Some(layer) = self.kind.single_layer(self.n_layers) {
            assert!(layer < self.n_layers, "layer {layer} of {}", self.n_layers);
            // softmax([-40, ..., 0, ..., -40]) is 1 on the layer to float32 precision.
            let mut weights = vec![-40.0; self.n_layers];
            weights[layer] = 0.0;
            mix.initial_weights = Some(weights);
        }
        ElmoMixer {
            mix: mix.init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

/// Scalar mix + dropout.
#[derive(Module, Debug)]
pub struct ElmoMixer {
    /// The task-specific weights `s` and scale `γ`.
    pub mix: ScalarMix,
    /// Dropout on the mixed representation.
    pub dropout: Dropout,
}

impl ElmoMixer {
    /// `dropout(γ Σ softmax(s)_j h_j)`.
    ///
    /// # Shapes
    /// - layers: `L + 1` tensors `[B, T, D]`; mask `[B, T]`, `true` for real tokens
    /// - output: `[B, T, D]`
    pub fn forward(&self, layers: &[Tensor<3>], mask: &Tensor<2, Bool>) -> Tensor<3> {
        self.dropout.forward(self.mix.forward(layers, mask))
    }

    /// `λ ‖s‖²`, shape `[1]`.
    pub fn penalty(&self, lambda: f64) -> Tensor<1> {
        self.mix.penalty(lambda)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::TensorData;

    use super::*;

    /// A fixed mix passes its one layer through unchanged (`γ = 1`, no dropout), `top` the last;
    /// `average` is the mean; a single layer out of range is refused before `init`.
    #[test]
    fn a_single_layer_mix_is_that_layer() {
        let device = Device::flex();
        let layers: Vec<Tensor<3>> = (0..3)
            .map(|j| {
                let values: Vec<f32> = (0..8).map(|i| (i * 3 + j * 11) as f32 - 7.5).collect();
                Tensor::from_data(TensorData::new(values, [1, 2, 4]), &device)
            })
            .collect();
        let mask = Tensor::<2, Bool>::from_data(TensorData::new(vec![true, true], [1, 2]), &device);
        let mixed = |kind: MixKind| {
            let mixer = ElmoMixerConfig {
                n_layers: 3,
                kind,
                dropout: 0.0,
                layer_norm: false,
            }
            .init(&device);
            mixer.forward(&layers, &mask).into_data()
        };
        let tolerance = burn::tensor::Tolerance::absolute(1e-5);
        for (kind, expected) in [
            (MixKind::Layer(0), layers[0].clone()),
            (MixKind::Layer(1), layers[1].clone()),
            (MixKind::Layer(2), layers[2].clone()),
            (MixKind::Top, layers[2].clone()),
            (
                MixKind::Average,
                (layers[0].clone() + layers[1].clone() + layers[2].clone()).div_scalar(3.0),
            ),
        ] {
            mixed(kind).assert_approx_eq::<f32>(&expected.into_data(), tolerance);
        }
    }
}
