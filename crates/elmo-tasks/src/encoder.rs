//! The shared sentence encoder of every head: the task's own token representation `x_k` (a word
//! embedding, optionally joined by a character CNN), ELMo joined as `[x_k; ELMo_k]` at the input
//! and/or `[h_k; ELMo_k]` at the output (Peters et al. 2018, §3.3), and a masked BiLSTM.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig};
use burn::tensor::{Device, Int, Tensor};
use elmo_model::bilm::mask_from_lengths;
use elmo_model::char_cnn::{CharCnnEncoder, CharCnnEncoderConfig};
use elmo_model::options::CnnActivation;
use serde::{Deserialize, Serialize};

use crate::bilstm::{BiLstmLayer, BiLstmLayerConfig};
use crate::elmo_mix::{ElmoMixer, ElmoMixerConfig, ElmoPlace, MixKind};
use crate::error::{Result, TaskError};

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
    /// Layer-normalise each biLM layer before the mix (§3.2: "in some cases" helpful). Task
    /// directories written before this setting had none.
    #[serde(default)]
    pub layer_norm: bool,
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
    /// A character CNN joined to the word embedding, or none.
    #[serde(default)]
    pub chars: Option<CharCnnSettings>,
}

/// The task's own character CNN (the token encoder of Kim et al. 2016 at a small size: char
/// embedding, convolutions, max over positions, ReLU, one highway layer, projection), trained
/// with the head; its output joins the word embedding in `x_k`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CharCnnSettings {
    /// Character embedding width.
    pub d_char: usize,
    /// `[width, n_filters]` of each convolution.
    pub filters: Vec<[usize; 2]>,
    /// Output width.
    pub d_output: usize,
}

impl Default for CharCnnSettings {
    /// 16-wide characters, 25 filters per width 1-5 as in many taggers, 50 outputs.
    fn default() -> Self {
        Self {
            d_char: 16,
            filters: vec![[1, 25], [2, 25], [3, 25], [4, 25], [5, 25]],
            d_output: 50,
        }
    }
}

impl CharCnnSettings {
    fn encoder_config(&self) -> CharCnnEncoderConfig {
        CharCnnEncoderConfig {
            n_characters: elmo_model::char_ids::N_CHARACTERS,
            d_char: self.d_char,
            filters: self.filters.clone(),
            n_highway: 1,
            d_output: self.d_output,
            activation: CnnActivation::Relu,
            kernels: elmo_model::KernelSettings::default(),
        }
    }
}

/// `Err` naming `field` unless `p` is a dropout probability, finite and in `[0, 1)` (what
/// burn's `Dropout` takes).
fn check_probability(field: &str, p: f64) -> Result<()> {
    if p.is_finite() && (0.0..1.0).contains(&p) {
        return Ok(());
    }
    Err(TaskError::InvalidConfig(format!(
        "{field} is {p}; a dropout probability is in [0, 1)"
    )))
}

impl SentenceEncoderConfig {
    /// Checks every setting [`Self::init`] builds from (`task.json`'s `model.encoder`, read
    /// from a file or made by a caller): dropout probabilities in `[0, 1)`, a word vocabulary,
    /// a BiLSTM of at least one unit, an input to it of at least one feature, ELMo's layers
    /// and width, and the character CNN's filters.
    ///
    /// # Errors
    /// [`TaskError::InvalidConfig`], naming the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(TaskError::InvalidConfig(message));
        check_probability("encoder.dropout", self.dropout)?;
        if self.n_words == 0 {
            return bad("encoder.n_words is 0: the word vocabulary holds at least padding".into());
        }
        if self.d_hidden == 0 {
            return bad("encoder.d_hidden is 0: the BiLSTM needs at least one unit".into());
        }
        if let Some(elmo) = &self.elmo {
            check_probability("encoder.elmo.dropout", elmo.dropout)?;
            if elmo.n_layers == 0 || elmo.d_layer == 0 {
                return bad(format!(
                    "encoder.elmo has {} layers of width {}; both must be positive",
                    elmo.n_layers, elmo.d_layer
                ));
            }
            if let MixKind::Layer(layer) = elmo.mix
                && layer >= elmo.n_layers
            {
                return bad(format!(
                    "encoder.elmo.mix is layer {layer}; the biLM has layers 0-{} (0 the token \
                     layer, then its LSTM layers)",
                    elmo.n_layers - 1
                ));
            }
        }
        if let Some(chars) = &self.chars {
            let max_width = elmo_model::char_ids::MAX_CHARS_PER_TOKEN;
            let filters_ok = !chars.filters.is_empty()
                && (chars.filters.iter())
                    .all(|&[width, n]| (1..=max_width).contains(&width) && n > 0);
            if chars.d_char == 0 || chars.d_output == 0 || !filters_ok {
                return bad(format!(
                    "encoder.chars: d_char {}, d_output {} and filters {:?} must be positive, \
                     with at least one filter of width 1-{max_width}",
                    chars.d_char, chars.d_output, chars.filters
                ));
            }
        }
        if self.lstm_input_width() == 0 {
            return bad(
                "encoder: the BiLSTM has no input (d_word is 0, without characters or ELMo at \
                 the input)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Width of the BiLSTM's input: the word embedding, the characters' output and ELMo where
    /// it enters at the input.
    fn lstm_input_width(&self) -> usize {
        let d_chars = self.chars.as_ref().map_or(0, |c| c.d_output);
        let d_elmo = (self.elmo.as_ref())
            .filter(|e| e.place.at_input())
            .map_or(0, |e| e.d_layer);
        self.d_word + d_chars + d_elmo
    }

    /// Creates the encoder with random weights.
    ///
    /// # Panics
    /// Where [`Self::validate`] fails.
    pub fn init(&self, device: &Device) -> SentenceEncoder {
        let mixer = |used: bool| {
            self.elmo.as_ref().filter(|_| used).map(|e| {
                ElmoMixerConfig {
                    n_layers: e.n_layers,
                    kind: e.mix,
                    dropout: e.dropout,
                    layer_norm: e.layer_norm,
                }
                .init(device)
            })
        };
        let elmo_input = self.elmo.as_ref().is_some_and(|e| e.place.at_input());
        let elmo_output = self.elmo.as_ref().is_some_and(|e| e.place.at_output());
        let d_elmo = self.elmo.as_ref().map_or(0, |e| e.d_layer);
        SentenceEncoder {
            words: EmbeddingConfig::new(self.n_words, self.d_word).init(device),
            chars: self.chars.as_ref().map(|c| c.encoder_config().init(device)),
            input_mix: mixer(elmo_input),
            output_mix: mixer(elmo_output),
            lstm: BiLstmLayerConfig {
                d_input: self.lstm_input_width(),
                d_hidden: self.d_hidden,
            }
            .init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            d_output: 2 * self.d_hidden + if elmo_output { d_elmo } else { 0 },
        }
    }
}

/// Word ids, lengths, (with a character CNN) character ids and (with ELMo) the biLM layers of a
/// batch of sentences.
#[derive(Debug, Clone)]
pub struct SentenceBatch {
    /// `[B, T]` word ids (padding 0).
    pub words: Tensor<2, Int>,
    /// `[B, T, 50]` character ids (`elmo_model::char_ids`; padding tokens all 0).
    pub chars: Option<Tensor<3, Int>>,
    /// Real tokens per row.
    pub lengths: Vec<usize>,
    /// `L + 1` tensors `[B, T, 2P]` from the frozen biLM.
    pub elmo: Option<Vec<Tensor<3>>>,
}

/// Word embedding (+ char CNN) (+ ELMo) → BiLSTM (+ ELMo).
#[derive(Module, Debug)]
pub struct SentenceEncoder {
    /// The task's own word embedding `x_k`.
    pub words: Embedding,
    /// The task's own character CNN, joined to `x_k`.
    pub chars: Option<CharCnnEncoder>,
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
    /// When the model uses ELMo or characters and the batch lacks the biLM layers or the
    /// character ids (a programming error).
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
        let mut x = self.words.forward(batch.words.clone());
        if let Some(chars) = &self.chars {
            let ids = batch
                .chars
                .clone()
                .expect("a model with a character CNN needs the character ids of its batch");
            x = Tensor::cat(vec![x, chars.forward(ids)], 2);
        }
        let mut x = self.dropout.forward(x);
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
