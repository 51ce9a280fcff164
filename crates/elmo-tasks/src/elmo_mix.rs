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
}

impl ElmoMixerConfig {
    /// Creates the mixer (`γ = 1`; `s = 0` for `all` and `average`, one-hot on the top for `top`).
    ///
    /// # Panics
    /// When `dropout` is not in `[0, 1)` (burn's `Dropout` refuses it;
    /// [`crate::encoder::SentenceEncoderConfig::validate`] checks a task's settings first).
    pub fn init(&self, device: &Device) -> ElmoMixer {
        let mut mix = ScalarMixConfig::new(self.n_layers);
        match self.kind {
            MixKind::All => {}
            MixKind::Average => mix.trainable = false,
            MixKind::Top => {
                // softmax([-40, ..., -40, 0]) is 1 on the top layer to float32 precision.
                let mut weights = vec![-40.0; self.n_layers];
                if let Some(top) = weights.last_mut() {
                    *top = 0.0;
                }
                mix.initial_weights = Some(weights);
                mix.trainable = false;
            }
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
