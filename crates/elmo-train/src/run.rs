//! A trained run directory opened for use: its config, vocabulary and the model of its newest
//! checkpoint (`elmo eval`, `elmo export`, `elmo embed --model RUN_DIR`): the mean of its
//! weights when the run averages them ([`crate::averaging`]), else its trained weights.

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;

use crate::checkpoint::RunDirectory;
use crate::config::TrainConfig;
use crate::dropout::DropoutConfig;
use crate::error::{Result, TrainError, record_error};
use crate::language_model::{BiLanguageModel, BiLanguageModelConfig};
use crate::vocabulary::Vocabulary;

/// A run directory's model, ready to evaluate or export.
pub struct TrainedRun {
    /// The run's configuration.
    pub config: TrainConfig,
    /// Its vocabulary.
    pub vocab: Vocabulary,
    /// The model of the newest checkpoint: the weight average when it has one.
    pub model: BiLanguageModel,
    /// The step of that checkpoint.
    pub step: u64,
    /// Steps in the weight average that `model` is (`None`: the trained weights).
    pub averaged_steps: Option<u64>,
}

impl TrainedRun {
    /// Whether `dir` looks like a training run directory (has `config.json` and checkpoints).
    pub fn is_run_directory(dir: &Path) -> bool {
        RunDirectory::new(dir).config_file().is_file() && dir.join("checkpoints").is_dir()
    }

    /// Opens the newest checkpoint of a run directory: its weight average if it has one, else
    /// its trained weights.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        Self::open(dir, device, true)
    }

    /// Opens the newest checkpoint's trained weights, even where the run averages them.
    pub fn load_trained_weights(dir: &Path, device: &Device) -> Result<Self> {
        Self::open(dir, device, false)
    }

    fn open(dir: &Path, device: &Device, averaged: bool) -> Result<Self> {
        let run = RunDirectory::new(dir);
        if !run.config_file().is_file() {
            return Err(TrainError::RunDirectory {
                path: dir.to_path_buf(),
                message: "not a training run directory (no config.json)".into(),
            });
        }
        let config = TrainConfig::from_file(run.config_file())?;
        let vocab = Vocabulary::from_file(run.vocab_file())?;
        let checkpoint = run
            .latest_checkpoint()?
            .ok_or_else(|| TrainError::RunDirectory {
                path: dir.to_path_buf(),
                message: "has no complete checkpoint yet".into(),
            })?;
        let averaged_steps = Some(checkpoint.trainer_state()?.averaging.n_averaged)
            .filter(|&n| averaged && n > 0 && checkpoint.average_file().is_file());
        let path = match averaged_steps {
            Some(_) => checkpoint.average_file(),
            None => checkpoint.model_file(),
        };
        let model = model_for(&config, &vocab, device)
            .try_load_file(&path)
            .map_err(record_error(&path))?;
        Ok(Self {
            config,
            vocab,
            model,
            step: checkpoint.step,
            averaged_steps,
        })
    }
}

/// The model configuration of a training config and vocabulary.
pub fn model_config(config: &TrainConfig, vocab: &Vocabulary) -> BiLanguageModelConfig {
    BiLanguageModelConfig {
        options: config.model.clone(),
        n_vocab: vocab.len(),
        dropout: DropoutConfig {
            probability: config.dropout,
            locked: config.locked_dropout,
            weight_drop: config.weight_drop,
        },
    }
}

/// A model of the config's shape for a vocabulary, its parameters left lazy: for loading weights
/// into. Use [`seeded_model`] for a model to train.
pub fn model_for(config: &TrainConfig, vocab: &Vocabulary, device: &Device) -> BiLanguageModel {
    model_config(config, vocab).init(device)
}

/// A freshly initialised model of the config's shape for a vocabulary, its weights drawn
/// reproducibly from `seed` (see [`elmo_model::seeded_init()`]).
pub fn seeded_model(
    config: &TrainConfig,
    vocab: &Vocabulary,
    seed: u64,
    device: &Device,
) -> BiLanguageModel {
    elmo_model::seeded_init(device, seed, || model_for(config, vocab, device))
}
