//! Run directories and checkpoints: everything a run needs to continue exactly, written
//! atomically (a temporary directory renamed into place), keeping the last K.
//!
//! ```text
//! RUN_DIR/config.json  vocab.txt  run.json  metrics.jsonl  curves.svg  .lock (while written)
//! RUN_DIR/checkpoints/step-000000100/{model.bpk, optimizer.bpk, lstm_state.bin, trainer.json}
//!                                     (+ average.bpk once weight averaging has started)
//! ```

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};
use elmo_model::LstmState;
use serde::{Deserialize, Serialize};

use crate::batcher::BatcherState;
use crate::error::{Result, TrainError, io_error};
use crate::language_model::CarriedState;
use crate::step_losses::LossWindow;

/// File names inside a checkpoint directory.
pub const MODEL_FILE: &str = "model.bpk";
/// Optimizer state.
pub const OPTIMIZER_FILE: &str = "optimizer.bpk";
/// The mean of the weights ([`crate::averaging`]), once averaging has started.
pub const AVERAGE_FILE: &str = "average.bpk";
/// Carried LSTM state (little-endian float32, forward then backward layers, hidden then memory).
pub const LSTM_STATE_FILE: &str = "lstm_state.bin";
/// [`TrainerState`] as JSON, written last: a checkpoint without it is incomplete.
pub const TRAINER_FILE: &str = "trainer.json";
const CHECKPOINTS: &str = "checkpoints";

/// [`elmo_model::write_atomic`], its error naming `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    elmo_model::write_atomic(path, bytes).map_err(io_error(path))
}

/// The trainer's own state in a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Optimizer steps done.
    pub step: u64,
    /// Targets processed (both directions).
    pub tokens: u64,
    /// Where the batcher is.
    pub batcher: BatcherState,
    /// Losses since the last metrics line.
    pub window: LossWindow,
    /// Whether `lstm_state.bin` holds a carried state.
    pub has_lstm_state: bool,
    /// Training time so far (seconds).
    pub elapsed_seconds: f64,
    /// The plateau learning-rate schedule's state (absent in older checkpoints: factor 1).
    #[serde(default)]
    pub plateau: crate::plateau::PlateauState,
    /// The weight averaging's state (absent in older checkpoints: not started).
    #[serde(default)]
    pub averaging: crate::averaging::AveragingState,
    /// Mixed precision's dynamic loss scale (absent: an `f32` run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<crate::LossScale>,
}

/// A complete checkpoint on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Its directory.
    pub dir: PathBuf,
    /// The step it was taken at.
    pub step: u64,
}

impl Checkpoint {
    /// The model record.
    pub fn model_file(&self) -> PathBuf {
        self.dir.join(MODEL_FILE)
    }

    /// The optimizer record.
    pub fn optimizer_file(&self) -> PathBuf {
        self.dir.join(OPTIMIZER_FILE)
    }

    /// The weight average's record (present once averaging has started).
    pub fn average_file(&self) -> PathBuf {
        self.dir.join(AVERAGE_FILE)
    }

    /// Reads the trainer state.
    pub fn trainer_state(&self) -> Result<TrainerState> {
        let path = self.dir.join(TRAINER_FILE);
        let text = std::fs::read_to_string(&path).map_err(io_error(&path))?;
        serde_json::from_str(&text).map_err(|source| TrainError::Json { path, source })
    }

    /// Reads the carried LSTM state of `n_rows` rows for stacks of the given widths.
    pub fn lstm_state(
        &self,
        n_layers: usize,
        n_rows: usize,
        d_cell: usize,
        d_projection: usize,
        device: &Device,
    ) -> Result<CarriedState> {
        let path = self.dir.join(LSTM_STATE_FILE);
        let bytes = std::fs::read(&path).map_err(io_error(&path))?;
        let per_layer = n_rows * (d_projection + d_cell);
        let expected = 2 * n_layers * per_layer * 4;
        if bytes.len() != expected {
            return Err(TrainError::RunDirectory {
                path,
                message: format!(
                    "holds {} bytes, the configuration needs {expected} (truncated or another config)",
                    bytes.len()
                ),
            });
        }
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut offset = 0;
        let mut take = |width: usize| {
            let slice = values[offset..offset + n_rows * width].to_vec();
            offset += n_rows * width;
            Tensor::<2>::from_data(TensorData::new(slice, [n_rows, width]), device)
        };
        let mut stack = || -> Vec<LstmState> {
            (0..n_layers)
                .map(|_| LstmState {
                    hidden: take(d_projection),
                    memory: take(d_cell),
                })
                .collect()
        };
        let forward = stack();
        let backward = stack();
        Ok(CarriedState { forward, backward })
    }
}

fn lstm_state_bytes(state: &CarriedState) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for layer in state.forward.iter().chain(&state.backward) {
        for tensor in [&layer.hidden, &layer.memory] {
            let values: Vec<f32> = tensor
                .to_data()
                .try_into_vec_as::<f32>()
                .map_err(|e| elmo_model::ElmoError::TensorData(format!("{e:?}")))?;
            bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        }
    }
    Ok(bytes)
}

/// The run directory of a training run.
#[derive(Debug, Clone)]
pub struct RunDirectory {
    /// Its path.
    pub path: PathBuf,
}

impl RunDirectory {
    /// A run directory at `path` (not created).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// `.lock`: the lock of the process that writes the run ([`elmo_model::RunLock`]).
    pub fn lock_file(&self) -> PathBuf {
        self.path.join(".lock")
    }

    /// `config.json`.
    pub fn config_file(&self) -> PathBuf {
        self.path.join("config.json")
    }

    /// `vocab.txt`.
    pub fn vocab_file(&self) -> PathBuf {
        self.path.join("vocab.txt")
    }

    /// `run.json` (data and seed of the run).
    pub fn run_file(&self) -> PathBuf {
        self.path.join("run.json")
    }

    /// `metrics.jsonl`.
    pub fn metrics_file(&self) -> PathBuf {
        self.path.join("metrics.jsonl")
    }

    /// `curves.svg`.
    pub fn curves_file(&self) -> PathBuf {
        self.path.join("curves.svg")
    }

    fn checkpoints_dir(&self) -> PathBuf {
        self.path.join(CHECKPOINTS)
    }

    /// Complete checkpoints, oldest first.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>> {
        let dir = self.checkpoints_dir();
        if !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io_error(&dir))? {
            let entry = entry.map_err(io_error(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(step) = name
                .strip_prefix("step-")
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if entry.path().join(TRAINER_FILE).is_file() {
                found.push(Checkpoint {
                    dir: entry.path(),
                    step,
                });
            }
        }
        found.sort_by_key(|c| c.step);
        Ok(found)
    }

    /// The newest complete checkpoint.
    pub fn latest_checkpoint(&self) -> Result<Option<Checkpoint>> {
        Ok(self.checkpoints()?.pop())
    }

    /// Writes a checkpoint atomically and removes all but the newest `keep`. `records` writes
    /// the module records ([`MODEL_FILE`], [`OPTIMIZER_FILE`], [`AVERAGE_FILE`]) into the
    /// directory it is given.
    pub fn save_checkpoint(
        &self,
        records: impl FnOnce(&Path) -> Result<()>,
        lstm_state: Option<&CarriedState>,
        trainer: &TrainerState,
        keep: usize,
    ) -> Result<Checkpoint> {
        let root = self.checkpoints_dir();
        std::fs::create_dir_all(&root).map_err(io_error(&root))?;
        let name = format!("step-{:09}", trainer.step);
        let temp = root.join(format!(".{name}.{}.partial", std::process::id()));
        if temp.exists() {
            std::fs::remove_dir_all(&temp).map_err(io_error(&temp))?;
        }
        std::fs::create_dir_all(&temp).map_err(io_error(&temp))?;
        let written = (|| {
            records(&temp)?;
            if let Some(state) = lstm_state {
                write_atomic(&temp.join(LSTM_STATE_FILE), &lstm_state_bytes(state)?)?;
            }
            let json = serde_json::to_vec_pretty(trainer).map_err(|source| TrainError::Json {
                path: temp.join(TRAINER_FILE),
                source,
            })?;
            write_atomic(&temp.join(TRAINER_FILE), &json)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&temp);
            return Err(e);
        }
        let target = root.join(&name);
        if target.exists() {
            std::fs::remove_dir_all(&target).map_err(io_error(&target))?;
        }
        std::fs::rename(&temp, &target).map_err(io_error(&target))?;
        // Make the rename durable before older checkpoints go.
        if let Ok(dir) = std::fs::File::open(&root) {
            let _ = dir.sync_all();
        }
        let all = self.checkpoints()?;
        for old in all.iter().take(all.len().saturating_sub(keep.max(1))) {
            std::fs::remove_dir_all(&old.dir).map_err(io_error(&old.dir))?;
        }
        Ok(Checkpoint {
            dir: target,
            step: trainer.step,
        })
    }

    /// Removes leftovers of checkpoints whose writing was interrupted.
    pub fn remove_partial_checkpoints(&self) -> Result<()> {
        let root = self.checkpoints_dir();
        if !root.is_dir() {
            return Ok(());
        }
        for entry in std::fs::read_dir(&root).map_err(io_error(&root))? {
            let entry = entry.map_err(io_error(&root))?;
            if entry.file_name().to_string_lossy().ends_with(".partial") {
                std::fs::remove_dir_all(entry.path()).map_err(io_error(entry.path()))?;
            }
        }
        Ok(())
    }
}
