//! The shared sentence encoder of every head: the task's own word embedding `x_k`, ELMo joined as
//! `[x_k; ELMo_k]` at the input and/or `[h_k; ELMo_k]` at the output (Peters et al. 2018, §3.3),
//! and a masked BiLSTM.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig};
use burn::tensor::{Device, Int, Tensor};
use elmo_model::bilm::mask_from_lengths;
use serde::{Deserialize, Serialize};

use crate::bilstm::{BiLstmLayer, BiLstmLayerConfig};
use crate::elmo_mix::{ElmoMixer, ElmoMixerConfig, ElmoPlace, MixKind};

/// How ELMo enters a task model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElmoSettings {
    /// biLM layers (`L + 1`).
    pub n_layers: usize,
    /// Width of a biLM layer (`2P`).
    pub d_layer: usize,
    /// Which layers are mixed.
    pub mix: MixKind,
    /// Where ELMo is concatenated.
    pub place: ElmoPlace,
    /// Dropout on ELMo (paper: 0.5).
    pub dropout: f64,
}

/// Configuration of a [`SentenceEncoder`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentenceEncoderConfig {
    /// Task word vocabulary size.
    pub n_words: usize,
    /// Word embedding width.
    pub d_word: usize,
    /// BiLSTM width per direction.
    pub d_hidden: usize,
    /// Dropout on the word embeddings and the BiLSTM output.
    pub dropout: f64,
    /// ELMo, or none (the baseline).
    pub elmo: Option<ElmoSettings>,
}

impl SentenceEncoderConfig {
    /// Creates the encoder with random weights.
    pub fn init(&self, device: &Device) -> SentenceEncoder {
        let mixer = |used: bool| {
            self.elmo.as_ref().filter(|_| used).map(|e| {
                ElmoMixerConfig {
                    n_layers: e.n_layers,
                    kind: e.mix,
                    dropout: e.dropout,
                }
                .init(device)
            })
        };
        let elmo_input = self.elmo.as_ref().is_some_and(|e| e.place.at_input());
        let elmo_output = self.elmo.as_ref().is_some_and(|e| e.place.at_output());
        let d_elmo = self.elmo.as_ref().map_or(0, |e| e.d_layer);
        SentenceEncoder {
            words: EmbeddingConfig::new(self.n_words, self.d_word).init(device),
            input_mix: mixer(elmo_input),
            output_mix: mixer(elmo_output),
            lstm: BiLstmLayerConfig {
                d_input: self.d_word + if elmo_input { d_elmo } else { 0 },
                d_hidden: self.d_hidden,
            }
            .init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            d_output: 2 * self.d_hidden + if elmo_output { d_elmo } else { 0 },
        }
    }
}

/// Word ids, lengths and (with ELMo) the biLM layers of a batch of sentences.
#[derive(Debug, Clone)]
pub struct SentenceBatch {
    /// `[B, T]` word ids (padding 0).
    pub words: Tensor<2, Int>,
    /// Real tokens per row.
    pub lengths: Vec<usize>,
    /// `L + 1` tensors `[B, T, 2P]` from the frozen biLM.
    pub elmo: Option<Vec<Tensor<3>>>,
}

/// Word embedding (+ ELMo) → BiLSTM (+ ELMo).
#[derive(Module, Debug)]
pub struct SentenceEncoder {
    /// The task's own word embedding `x_k`.
    pub words: Embedding,
    /// The mix joined at the BiLSTM input.
    pub input_mix: Option<ElmoMixer>,
    /// The mix joined at the BiLSTM output.
    pub output_mix: Option<ElmoMixer>,
    /// The contextualiser.
    pub lstm: BiLstmLayer,
    /// Dropout on embeddings and outputs.
    pub dropout: Dropout,
    /// Output width.
    #[module(skip)]
    pub d_output: usize,
}

impl SentenceEncoder {
    /// Encodes a batch.
    ///
    /// # Shapes
    /// - output: `[B, T, d_output]`, zero at padded positions
    ///
    /// # Panics
    /// When the model uses ELMo and the batch has no biLM layers (a programming error).
    pub fn forward(&self, batch: &SentenceBatch) -> Tensor<3> {
        let device = batch.words.device();
        let n_steps = batch.words.dims()[1];
        let mask = mask_from_lengths(&batch.lengths, n_steps, &device);
        let elmo = |mixer: &ElmoMixer| {
            let layers = batch
                .elmo
                .as_ref()
                .expect("a model with ELMo needs the biLM layers of its batch");
            mixer.forward(layers, &mask)
        };
        let mut x = self
            .dropout
            .forward(self.words.forward(batch.words.clone()));
        if let Some(mixer) = &self.input_mix {
            x = Tensor::cat(vec![x, elmo(mixer)], 2);
        }
        let mut h = self.dropout.forward(self.lstm.forward(x, &batch.lengths));
        if let Some(mixer) = &self.output_mix {
            h = Tensor::cat(vec![h, elmo(mixer)], 2);
        }
        let keep = mask.float().unsqueeze_dim::<3>(2);
        h * keep
    }

    /// `λ ‖s‖²` of every mix (zero without ELMo), shape `[1]`.
    pub fn penalty(&self, lambda: f64, device: &Device) -> Tensor<1> {
        [&self.input_mix, &self.output_mix]
            .into_iter()
            .flatten()
            .map(|m| m.penalty(lambda))
            .fold(Tensor::zeros([1], device), |a, b| a + b)
    }
}
