//! Where `elmo embed` takes its biLM from: `--options/--weights` (paths or URLs), a model or run
//! directory, a model AllenNLP publishes (by name), or the embedded demo model.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use elmo_model::options::BiLmOptions;
use elmo_model::weights::{WeightFile, load_bilm_from};
use elmo_model::{BiLm, BiLmState};

use crate::model_files::{PublishedModel, local_path, naming_download, published_model};

/// The embedded demo model: AllenNLP's small test biLM (Apache-2.0, see fixtures/README.md).
const DEMO_OPTIONS: &str = include_str!("../../../fixtures/allennlp/options.json");
const DEMO_WEIGHTS: &[u8] = include_bytes!("../../../fixtures/allennlp/lm_weights.hdf5");

/// Model selection flags shared by the commands that need a pretrained biLM.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// bilm-tf / AllenNLP `options.json`, a path or an `http(s)://` URL (downloaded once into
    /// the cache, `ELMO_CACHE_DIR` or `~/.cache/elmo-rs`) (with --weights; AllenNLP's
    /// `--options-file` too).
    #[arg(
        long,
        alias = "options-file",
        value_name = "OPTIONS_JSON",
        requires = "weights",
        conflicts_with = "model"
    )]
    pub options: Option<PathBuf>,
    /// HDF5 weights in the official bilm-tf layout, a path or an `http(s)://` URL (with
    /// --options; AllenNLP's `--weight-file` too).
    #[arg(
        long,
        alias = "weight-file",
        value_name = "WEIGHTS_HDF5",
        requires = "options",
        conflicts_with = "model"
    )]
    pub weights: Option<PathBuf>,
    /// A model directory holding `options.json` and `weights.hdf5` (as `elmo export` writes),
    /// a training run directory (`elmo train --out`; its newest checkpoint is used), or the
    /// name of a model AllenNLP publishes: `small`, `medium`, `original` (the paper's) or
    /// `original-5.5b`, downloaded once into the cache (`ELMO_CACHE_DIR`, else `elmo-rs` in the
    /// user's cache folder). Without any of these flags the small embedded demo model is used.
    #[arg(long, value_name = "DIR|NAME")]
    pub model: Option<PathBuf>,
}

/// A loaded biLM and where it came from.
pub struct LoadedModel {
    /// The biLM.
    pub bilm: BiLm,
    /// Its architecture.
    pub options: BiLmOptions,
    /// Human-readable origin.
    pub description: String,
}

/// A model that a front end already holds (the Python module's embedder), for
/// [`crate::embed_command`] to embed with instead of loading one.
pub struct HeldModel<'a> {
    /// The biLM, on the device of the command's `--backend`.
    pub model: LoadedModel,
    /// The LSTM state that a `--stateful` run starts from (`None`: zero); the run's last state
    /// once it has succeeded, as it was where the run fails.
    pub state: &'a mut Option<BiLmState>,
}

fn load_files(options: &Path, weights: &Path, device: &Device, quiet: bool) -> Result<LoadedModel> {
    let local_options = local_path(options, quiet)?;
    let parsed = BiLmOptions::from_file(&local_options);
    let parsed = naming_download(parsed.map_err(Into::into), options, &local_options)?;
    let local_weights = local_path(weights, quiet)?;
    let bilm = (|| {
        let mut file = WeightFile::open(&local_weights)?;
        let bilm = load_bilm_from(&parsed, &mut file, device)?;
        file.finish()?;
        Ok(bilm)
    })();
    let bilm = naming_download(bilm, weights, &local_weights)?;
    Ok(LoadedModel {
        bilm,
        options: parsed,
        description: format!("{} + {}", options.display(), weights.display()),
    })
}

impl ModelArgs {
    /// Loads the selected model, downloading the files named by URL or by a published model's
    /// name that the cache does not hold yet (announced on standard error, with a progress bar
    /// on a terminal, unless `quiet`).
    pub fn load(&self, device: &Device, quiet: bool) -> Result<LoadedModel> {
        match (&self.options, &self.weights, &self.model) {
            (Some(options), Some(weights), None) => load_files(options, weights, device, quiet),
            (None, None, Some(dir)) => {
                if !dir.is_dir() {
                    let Some(published) = published_model(dir) else {
                        bail!(
                            "{}: not a model directory, nor the name of a model AllenNLP \
                             publishes ({})",
                            dir.display(),
                            PublishedModel::names()
                        );
                    };
                    let (options, weights) = (published.options_url(), published.weights_url());
                    let loaded = load_files(options.as_ref(), weights.as_ref(), device, quiet)
                        .with_context(|| {
                            format!("loading AllenNLP's `{}` model", published.name)
                        })?;
                    return Ok(LoadedModel {
                        description: format!(
                            "AllenNLP's `{}` model (elmo_{})",
                            published.name, published.stem
                        ),
                        ..loaded
                    });
                }
                if elmo_train::TrainedRun::is_run_directory(dir) {
                    let run = elmo_train::TrainedRun::load(dir, device)?;
                    return Ok(LoadedModel {
                        bilm: run.model.bilm,
                        options: run.config.model,
                        description: format!("run {} at step {}", dir.display(), run.step),
                    });
                }
                let (options, weights) = (dir.join("options.json"), dir.join("weights.hdf5"));
                load_files(&options, &weights, device, quiet)
                    .with_context(|| format!("loading model directory {}", dir.display()))
            }
            (None, None, None) => {
                let options =
                    BiLmOptions::from_json_str(DEMO_OPTIONS, "<embedded demo options.json>")?;
                let mut file =
                    WeightFile::from_bytes(DEMO_WEIGHTS.to_vec(), "<embedded demo weights>")?;
                let bilm = load_bilm_from(&options, &mut file, device)?;
                file.finish()?;
                Ok(LoadedModel {
                    bilm,
                    options,
                    description: "embedded demo model (AllenNLP's small test biLM)".into(),
                })
            }
            _ => bail!("give --options and --weights together, or --model, or neither"),
        }
    }
}
