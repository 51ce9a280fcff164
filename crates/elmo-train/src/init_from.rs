//! Where a new run's weights start from (`elmo train --init-from`): pretrained bilm-tf /
//! AllenNLP weights (the biLM, with a new softmax), or another run's newest checkpoint (its biLM,
//! and its softmax too when the new run has the same vocabulary), checked against the new run's
//! architecture.

use std::path::PathBuf;

use burn::tensor::Device;
use elmo_model::BiLm;
use elmo_model::options::BiLmOptions;
use serde::{Deserialize, Serialize};

use crate::checkpoint::RunDirectory;
use crate::config::TrainConfig;
use crate::error::{Result, TrainError};
use crate::language_model::BiLanguageModel;
use crate::run::{TrainedRun, model_config, model_for};
use crate::softmax::Softmax;
use crate::vocabulary::Vocabulary;

/// The starting weights of a new run. In `run.json` the pretrained files are a two-path array and
/// a run directory one path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum InitFrom {
    /// bilm-tf / AllenNLP `options.json` and `weights.hdf5`: the biLM; the softmax is new.
    Weights(PathBuf, PathBuf),
    /// A training run directory: the biLM of its newest checkpoint, and its softmax when the new
    /// run's vocabulary is the run's `vocab.txt` (a new one otherwise). The optimizer state, step
    /// and data position are not taken: this starts a new run (use `--resume` to continue one).
    Run(PathBuf),
}

impl InitFrom {
    /// The architecture of the starting weights (which the new run's config must have).
    pub fn options(&self) -> Result<BiLmOptions> {
        Ok(match self {
            InitFrom::Weights(options, _) => BiLmOptions::from_file(options)?,
            InitFrom::Run(dir) => {
                TrainConfig::from_file(RunDirectory::new(dir).config_file())?.model
            }
        })
    }

    /// The path to name in messages.
    fn describe(&self) -> String {
        match self {
            InitFrom::Weights(options, weights) => {
                format!("{} + {}", options.display(), weights.display())
            }
            InitFrom::Run(dir) => dir.display().to_string(),
        }
    }
}

/// The trained parts a new run starts from.
struct StartingWeights {
    bilm: BiLm,
    /// `None`: a new softmax.
    softmax: Option<Softmax>,
}

fn starting_weights(
    config: &TrainConfig,
    vocab: &Vocabulary,
    init_from: &InitFrom,
    device: &Device,
) -> Result<StartingWeights> {
    let check_architecture = |options: &BiLmOptions| {
        if *options == config.model {
            Ok(())
        } else {
            Err(TrainError::InvalidConfig(format!(
                "--init-from {}: its architecture differs from the config's `model`",
                init_from.describe()
            )))
        }
    };
    Ok(match init_from {
        InitFrom::Weights(options_file, weights_file) => {
            let options = BiLmOptions::from_file(options_file)?;
            check_architecture(&options)?;
            let mut weights = elmo_model::weights::WeightFile::open(weights_file)?;
            let bilm = elmo_model::weights::load_bilm_from(&options, &mut weights, device)?;
            weights.finish()?;
            StartingWeights {
                bilm,
                softmax: None,
            }
        }
        InitFrom::Run(dir) => {
            let run = TrainedRun::load(dir, device)?;
            check_architecture(&run.config.model)?;
            let same_vocabulary = run.vocab == *vocab;
            StartingWeights {
                bilm: run.model.bilm,
                softmax: same_vocabulary.then_some(run.model.softmax),
            }
        }
    })
}

/// A new run's first model, and what it took from `--init-from`.
#[derive(Debug)]
pub struct InitialModel {
    /// The model.
    pub model: BiLanguageModel,
    /// Whether the softmax came from `--init-from` (a run with the same vocabulary); `false`
    /// for pretrained files and for a run with another vocabulary: a new softmax.
    pub softmax_taken: bool,
}

/// A new run's model: every parameter drawn reproducibly from `seed` (see
/// [`elmo_model::seeded_init()`]), then those of `init_from` put in their place.
pub fn initial_model(
    config: &TrainConfig,
    vocab: &Vocabulary,
    init_from: Option<&InitFrom>,
    seed: u64,
    device: &Device,
) -> Result<InitialModel> {
    let start = init_from
        .map(|from| starting_weights(config, vocab, from, device))
        .transpose()?;
    let softmax_taken = start.as_ref().is_some_and(|s| s.softmax.is_some());
    let model = elmo_model::seeded_init(device, seed, || match start {
        None => model_for(config, vocab, device),
        Some(StartingWeights { bilm, softmax }) => {
            let model = model_config(config, vocab).with_bilm(bilm, device);
            match softmax {
                Some(softmax) => BiLanguageModel { softmax, ..model },
                None => model,
            }
        }
    });
    Ok(InitialModel {
        model,
        softmax_taken,
    })
}
