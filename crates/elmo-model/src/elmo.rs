//! ELMo representations (Peters et al. 2018, §3.2): one or more scalar mixes of the biLM layers,
//! dropout, and removal of the `<S>`/`</S>` positions. Follows AllenNLP's `Elmo`
//! (allennlp/modules/elmo.py).

use std::path::Path;

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig};
use burn::tensor::{Bool, Device, Int, Tensor};

use crate::bilm::{BiLm, BiLmConfig, BiLmOutput, mask_from_lengths};
use crate::bilm_state::BiLmState;
use crate::char_ids::CharIdBatch;
use crate::error::{ElmoError, Result};
use crate::options::BiLmOptions;
use crate::scalar_mix::{ScalarMix, ScalarMixConfig};
use crate::token_cache::TokenEmbeddingCache;

/// Configuration of an [`Elmo`] on top of a biLM.
#[derive(Debug, Clone)]
pub struct ElmoConfig {
    /// Number of output mixes (e.g. one for the input and one for the output of a task RNN).
    pub n_outputs: usize,
    /// Dropout on each representation (AllenNLP's default 0.5; inactive in eval mode).
    pub dropout: f64,
    /// Layer-normalise the layers in every mix.
    pub do_layer_norm: bool,
    /// Keep the `<S>`/`</S>` positions in the output.
    pub keep_sentence_boundaries: bool,
    /// Fixed pre-softmax mix weights (one per biLM layer); the mix is then not trained.
    pub scalar_mix_parameters: Option<Vec<f32>>,
    /// Let gradient flow into the biLM (fine-tuning); frozen by default.
    pub bilm_requires_grad: bool,
}

impl Default for ElmoConfig {
    fn default() -> Self {
        Self {
            n_outputs: 1,
            dropout: 0.5,
            do_layer_norm: false,
            keep_sentence_boundaries: false,
            scalar_mix_parameters: None,
            bilm_requires_grad: false,
        }
    }
}

/// ELMo: a biLM and its scalar mixes.
#[derive(Module, Debug)]
pub struct Elmo {
    /// The biLM (frozen unless configured otherwise).
    pub bilm: BiLm,
    /// One mix per output.
    pub scalar_mixes: Vec<ScalarMix>,
    /// Dropout on the representations.
    pub dropout: Dropout,
    /// Keep the boundary positions.
    #[module(skip)]
    pub keep_sentence_boundaries: bool,
}

/// Output of [`Elmo`].
///
/// # Shapes
/// - representations: `n_outputs` tensors `[B, T, 2P]` (`T + 2` with boundaries kept), zero at
///   padded positions.
/// - mask: `[B, T]`, `true` for real tokens.
#[derive(Debug, Clone)]
pub struct ElmoOutput {
    /// One representation per mix.
    pub representations: Vec<Tensor<3>>,
    /// `true` for real tokens.
    pub mask: Tensor<2, Bool>,
    /// The raw biLM output (with boundaries) the mixes were computed from.
    pub bilm: BiLmOutput,
}

impl ElmoConfig {
    /// Checks the settings against a biLM of `n_layers` mixed layers (`L + 1`): at least one
    /// output, a dropout probability in `[0, 1)`, and fixed mix weights, where given, one
    /// finite value per layer.
    ///
    /// # Errors
    /// [`ElmoError::InvalidConfig`], naming the field as this struct does.
    pub fn validate(&self, n_layers: usize) -> Result<()> {
        let bad = |message: String| Err(ElmoError::InvalidConfig(message));
        if self.n_outputs == 0 {
            return bad("n_outputs is 0: ELMo gives at least one representation".into());
        }
        if !(self.dropout.is_finite() && (0.0..1.0).contains(&self.dropout)) {
            return bad(format!(
                "dropout is {}; a dropout probability is in [0, 1)",
                self.dropout
            ));
        }
        if let Some(weights) = &self.scalar_mix_parameters {
            if weights.len() != n_layers {
                return bad(format!(
                    "scalar_mix_parameters has {} values for the biLM's {n_layers} \
                     layers",
                    weights.len()
                ));
            }
            if let Some(value) = weights.iter().find(|w| !w.is_finite()) {
                return bad(format!(
                    "scalar_mix_parameters holds {value}, not a finite number"
                ));
            }
        }
        Ok(())
    }

    /// Builds ELMo around an existing biLM.
    ///
    /// # Errors
    /// Where [`Self::validate`] refuses the settings for this biLM.
    pub fn init_with(&self, bilm: BiLm, device: &Device) -> Result<Elmo> {
        let n_layers = bilm.n_layers() + 1;
        self.validate(n_layers)?;
        let mix = ScalarMixConfig {
            n_layers,
            do_layer_norm: self.do_layer_norm,
            initial_weights: self.scalar_mix_parameters.clone(),
            trainable: self.scalar_mix_parameters.is_none(),
            initial_gamma: 1.0,
        };
        let bilm = if self.bilm_requires_grad {
            bilm
        } else {
            bilm.freeze()
        };
        Ok(Elmo {
            bilm,
            scalar_mixes: (0..self.n_outputs).map(|_| mix.init(device)).collect(),
            dropout: DropoutConfig::new(self.dropout).init(),
            keep_sentence_boundaries: self.keep_sentence_boundaries,
        })
    }

    /// ELMo over a randomly initialised biLM of the given architecture.
    ///
    /// # Errors
    /// Where [`Self::validate`] refuses the settings for this architecture; checked before
    /// the biLM is made.
    pub fn init(&self, options: &BiLmOptions, device: &Device) -> Result<Elmo> {
        self.validate(options.lstm.n_layers + 1)?;
        let bilm = BiLmConfig {
            options: options.clone(),
        }
        .init(device);
        self.init_with(bilm, device)
    }

    /// ELMo over pretrained bilm-tf / AllenNLP weights (`options.json` + HDF5).
    ///
    /// # Errors
    /// Those of reading the two files, and where [`Self::validate`] refuses the settings for
    /// the options' biLM: checked before the weights are read (360 MiB at the `original` size).
    pub fn from_pretrained(
        &self,
        options_file: impl AsRef<Path>,
        weight_file: impl AsRef<Path>,
        device: &Device,
    ) -> Result<Elmo> {
        let options = BiLmOptions::from_file(options_file)?;
        self.validate(options.lstm.n_layers + 1)?;
        let bilm = crate::weights::load_bilm_weights(&options, weight_file, device)?;
        self.init_with(bilm, device)
    }
}

/// AllenNLP's `remove_sentence_boundaries`: drops the first and the last real position of every
/// row. Returns the tensor `[B, T − 2, D]` (zero past each row's end) and the new lengths.
pub fn remove_sentence_boundaries(tensor: Tensor<3>, lengths: &[usize]) -> (Tensor<3>, Vec<usize>) {
    let device = tensor.device();
    let [batch, n_tokens, dim] = tensor.dims();
    let inner = n_tokens.saturating_sub(2);
    let lengths: Vec<usize> = lengths.iter().map(|&l| l.saturating_sub(2)).collect();
    if inner == 0 {
        // Only empty sentences: burn narrows to no positions by no operation.
        return (Tensor::zeros([batch, 0, dim], &device), lengths);
    }
    let mask = mask_from_lengths(&lengths, inner, &device)
        .float()
        .unsqueeze_dim::<3>(2);
    (tensor.narrow(1, 1, inner) * mask, lengths)
}

impl Elmo {
    /// ELMo representations of char ids `[B, T, 50]` as `batch_to_ids` gives them (AllenNLP's
    /// `Elmo.forward`), from a zero LSTM state. Reads the ids back to find the sentence lengths.
    ///
    /// # Errors
    /// Those of [`BiLm::forward`]: ids outside the character vocabulary or padding before a
    /// real token, named by place.
    pub fn forward(&self, char_ids: Tensor<3, Int>) -> Result<ElmoOutput> {
        Ok(self.mix(self.bilm.forward(char_ids)?))
    }

    /// ELMo representations of tokenised sentences, from a zero LSTM state (deterministic).
    pub fn forward_sentences<S: AsRef<str>>(
        &self,
        sentences: &[Vec<S>],
        device: &Device,
    ) -> ElmoOutput {
        self.forward_batch(&CharIdBatch::from_sentences(sentences), device, None)
    }

    /// ELMo representations of a batch of char ids; with `state`, the biLM carries its LSTM state
    /// across calls (AllenNLP's behaviour), otherwise every call starts from zero.
    pub fn forward_batch(
        &self,
        batch: &CharIdBatch,
        device: &Device,
        state: Option<&mut Option<BiLmState>>,
    ) -> ElmoOutput {
        let bilm = self.bilm.forward_batch(batch, device, state);
        self.mix(bilm)
    }

    /// [`forward_batch`](Self::forward_batch) with the token embeddings of words seen before taken
    /// from `cache` when there is one (inference with a frozen biLM only: cached values carry no
    /// gradient).
    pub fn forward_batch_cached(
        &self,
        batch: &CharIdBatch,
        device: &Device,
        state: Option<&mut Option<BiLmState>>,
        cache: Option<&mut TokenEmbeddingCache>,
    ) -> Result<ElmoOutput> {
        let bilm = self
            .bilm
            .forward_batch_cached(batch, device, state, cache)?;
        Ok(self.mix(bilm))
    }

    /// Applies the mixes, boundary removal and dropout to a biLM output.
    pub fn mix(&self, bilm: BiLmOutput) -> ElmoOutput {
        let device = bilm.mask.device();
        let mut lengths = bilm.lengths.clone();
        let representations = self
            .scalar_mixes
            .iter()
            .map(|mix| {
                let mixed = mix.forward(&bilm.layers, &bilm.mask);
                let mixed = if self.keep_sentence_boundaries {
                    mixed
                } else {
                    let (inner, inner_lengths) = remove_sentence_boundaries(mixed, &bilm.lengths);
                    lengths = inner_lengths;
                    inner
                };
                self.dropout.forward(mixed)
            })
            .collect::<Vec<_>>();
        let n_tokens = representations.first().map_or(0, |r| r.dims()[1]);
        let mask = mask_from_lengths(&lengths, n_tokens, &device);
        ElmoOutput {
            representations,
            mask,
            bilm,
        }
    }

    /// Saves the whole model in burn's own record format.
    pub fn save_record(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.clone()
            .save_file(path)
            .map_err(|source| ElmoError::Record {
                path: path.to_path_buf(),
                source,
            })
    }

    /// Loads weights saved by [`save_record`](Self::save_record) into a model of the same shape.
    pub fn load_record(self, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        self.try_load_file(path)
            .map_err(|source| ElmoError::Record {
                path: path.to_path_buf(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = include_str!("../../../fixtures/allennlp/options.json");

    /// Settings that burn's modules would panic on, or that do not fit the biLM, are refused
    /// with the field named, before a biLM is made; the default ones build (the demo biLM has
    /// 2 LSTM layers: 3 mixed layers).
    #[test]
    fn settings_that_cannot_build_are_refused_by_name() {
        let device = Device::flex();
        let options = BiLmOptions::from_json_str(DEMO, "options.json").expect("demo options");
        let refused = |config: ElmoConfig, words: &[&str]| {
            let error = config.init(&options, &device).expect_err("refused");
            assert!(matches!(error, ElmoError::InvalidConfig(_)), "{error:?}");
            let message = error.to_string();
            for word in words {
                assert!(message.contains(word), "{message:?} does not name {word:?}");
            }
        };
        let base = ElmoConfig::default();
        for dropout in [1.0, 1.5, -0.1, f64::NAN] {
            let config = ElmoConfig {
                dropout,
                ..base.clone()
            };
            refused(config, &["dropout", &dropout.to_string()]);
        }
        refused(
            ElmoConfig {
                n_outputs: 0,
                ..base.clone()
            },
            &["n_outputs"],
        );
        let weights = |w: Vec<f32>| ElmoConfig {
            scalar_mix_parameters: Some(w),
            ..base.clone()
        };
        refused(
            weights(vec![0.0, 1.0]),
            &["scalar_mix_parameters", "2 values", "3 layers"],
        );
        refused(weights(vec![0.0; 4]), &["4 values"]);
        refused(weights(vec![0.0, f32::NAN, 1.0]), &["NaN"]);
        let elmo = weights(vec![0.0, 1.0, -1.0])
            .init(&options, &device)
            .expect("one weight per layer");
        assert_eq!(elmo.scalar_mixes.len(), 1);
        let elmo = ElmoConfig {
            dropout: 0.0,
            n_outputs: 2,
            ..base
        }
        .init(&options, &device)
        .expect("no dropout, two mixes");
        assert_eq!(elmo.scalar_mixes.len(), 2);

        // From files: refused before the weight file is opened (here there is none).
        let dir = tempfile::tempdir().expect("temp dir");
        let options_file = dir.path().join("options.json");
        std::fs::write(&options_file, DEMO).expect("options written");
        let missing = dir.path().join("weights.hdf5");
        let bad = ElmoConfig {
            dropout: 1.0,
            ..ElmoConfig::default()
        };
        let error = (bad.from_pretrained(&options_file, &missing, &device))
            .expect_err("refused before the weights");
        assert!(matches!(error, ElmoError::InvalidConfig(_)), "{error:?}");
        let error = (ElmoConfig::default().from_pretrained(&options_file, &missing, &device))
            .expect_err("no weight file");
        assert!(!matches!(error, ElmoError::InvalidConfig(_)), "{error:?}");
    }
}
