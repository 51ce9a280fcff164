//! `run.json`: what a run was trained on (its files, seed, starting weights and precision), written when the
//! run starts and compared on `--resume` so that a run continues on the data it began with.

use std::path::{Path, PathBuf};

use elmo_kernels::Precision;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError, io_error};
use crate::init_from::InitFrom;

/// What a run was trained on (`run.json`), checked on `--resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Training files (patterns expanded).
    pub train: Vec<PathBuf>,
    /// Validation file.
    pub valid: Option<PathBuf>,
    /// Seed of initialisation, shuffling, dropout and sampling.
    pub seed: u64,
    /// The weights the run started from (pretrained files or another run).
    pub init_from: Option<InitFrom>,
    /// The precision of its products (absent in older runs and in `f32` ones).
    #[serde(default, skip_serializing_if = "is_f32")]
    pub precision: Precision,
}

fn is_f32(precision: &Precision) -> bool {
    *precision == Precision::F32
}

impl RunInfo {
    /// Reads `run.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io_error(path))?;
        serde_json::from_str(&text).map_err(|source| TrainError::Json {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Writes `run.json` atomically.
    pub fn to_file(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(|source| TrainError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        elmo_model::write_atomic(path, &text).map_err(io_error(path))
    }
}
