//! A task directory: `task.json` (what the model is and how its data is read), `model.bpk` (the
//! best model on dev, replaced atomically), `best.json` (its epoch and scores) and
//! `metrics.jsonl` (one line per epoch).

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::dataset::DataFormat;
use crate::error::{Result, TaskError, io_error};
use crate::index::Index;
use crate::model::{TaskModel, TaskModelConfig};

/// Where a task model's ELMo comes from (so that `eval` and `predict` can rebuild it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElmoSource {
    /// bilm-tf `options.json` + HDF5 weights.
    Files {
        /// options.json.
        options: PathBuf,
        /// weights.hdf5.
        weights: PathBuf,
    },
    /// A model directory (`elmo export`) or a training run directory.
    Directory(PathBuf),
    /// The embedded demo biLM.
    Demo,
}

/// Everything needed to rebuild a task model and read its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Model architecture.
    pub model: TaskModelConfig,
    /// Data format.
    pub format: DataFormat,
    /// Task word vocabulary.
    pub words: Index,
    /// Tags or classes.
    pub labels: Index,
    /// The biLM, when the model uses ELMo.
    pub elmo: Option<ElmoSource>,
}

impl TaskSpec {
    /// Whether the model reads character ids (it has a character CNN).
    pub fn uses_chars(&self) -> bool {
        self.model.encoder.chars.is_some()
    }
}

/// The best epoch so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestEpoch {
    /// 1-based epoch.
    pub epoch: usize,
    /// Dev accuracy in %.
    pub accuracy: f64,
    /// Dev span F1 in % (BIO tagging).
    pub span_f1: Option<f64>,
    /// Normalised ELMo mix weights.
    pub mix_weights: Option<Vec<f32>>,
}

impl BestEpoch {
    /// The score early stopping compares: span F1 where there is one, else accuracy.
    pub fn headline(&self) -> f64 {
        self.span_f1.unwrap_or(self.accuracy)
    }
}

/// Paths of a task directory.
#[derive(Debug, Clone)]
pub struct TaskDirectory {
    /// The directory.
    pub path: PathBuf,
}

fn json_error(path: &Path) -> impl FnOnce(serde_json::Error) -> TaskError + '_ {
    move |source| TaskError::Json {
        path: path.to_path_buf(),
        source,
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(io_error(path))?;
    serde_json::from_str(&text).map_err(json_error(path))
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(json_error(path))?;
    elmo_model::write_atomic(path, text.as_bytes()).map_err(io_error(path))
}

impl TaskDirectory {
    /// A task directory at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// `task.json`.
    pub fn spec_file(&self) -> PathBuf {
        self.path.join("task.json")
    }
    /// `model.bpk`.
    pub fn model_file(&self) -> PathBuf {
        self.path.join("model.bpk")
    }
    /// `best.json`.
    pub fn best_file(&self) -> PathBuf {
        self.path.join("best.json")
    }
    /// `metrics.jsonl`.
    pub fn metrics_file(&self) -> PathBuf {
        self.path.join("metrics.jsonl")
    }

    /// Creates the directory and takes its writer's lock (`.lock`, [`elmo_model::RunLock`]),
    /// held until dropped; `break_stale` removes a lock left by a writer no longer running.
    pub fn lock(&self, break_stale: bool) -> Result<elmo_model::RunLock> {
        std::fs::create_dir_all(&self.path).map_err(io_error(&self.path))?;
        Ok(elmo_model::RunLock::acquire(
            self.path.join(".lock"),
            break_stale,
        )?)
    }

    /// Creates the directory and writes `task.json`.
    pub fn create(&self, spec: &TaskSpec) -> Result<()> {
        std::fs::create_dir_all(&self.path).map_err(io_error(&self.path))?;
        write_json(&self.spec_file(), spec)
    }

    /// Saves a new best model, then its record (each file replaced atomically).
    pub fn save_best(&self, model: &TaskModel, best: &BestEpoch) -> Result<()> {
        let path = self.model_file();
        let bytes =
            model
                .clone()
                .into_record()
                .into_bytes()
                .map_err(|source| TaskError::Record {
                    path: path.clone(),
                    source,
                })?;
        elmo_model::write_atomic(&path, &bytes).map_err(io_error(&path))?;
        write_json(&self.best_file(), best)
    }

    /// Reads `task.json`.
    pub fn spec(&self) -> Result<TaskSpec> {
        if !self.spec_file().is_file() {
            return Err(TaskError::InvalidConfig(format!(
                "{}: not a task directory (no task.json)",
                self.path.display()
            )));
        }
        let mut spec: TaskSpec = read_json(&self.spec_file())?;
        spec.model.validate().map_err(|error| match error {
            TaskError::InvalidConfig(message) => {
                TaskError::InvalidConfig(format!("{}: model.{message}", self.spec_file().display()))
            }
            other => other,
        })?;
        spec.words.rebuild();
        spec.labels.rebuild();
        Ok(spec)
    }

    /// Reads `best.json`.
    pub fn best(&self) -> Result<BestEpoch> {
        read_json(&self.best_file())
    }

    /// The best model (on a plain device: no dropout).
    pub fn load_model(&self, spec: &TaskSpec, device: &Device) -> Result<TaskModel> {
        spec.model.validate()?;
        let path = self.model_file();
        spec.model
            .init(device)
            .try_load_file(&path)
            .map_err(|source| TaskError::Record { path, source })
    }
}
