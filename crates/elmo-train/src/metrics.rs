//! The metrics log of a run (`metrics.jsonl`): one JSON object per line, training averages every
//! few steps and validation perplexities.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError, io_error};

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum MetricsRecord {
    /// Training losses averaged over the steps since the previous line.
    Train {
        /// Optimizer steps done.
        step: u64,
        /// Mean joint loss.
        loss: f64,
        /// exp(forward NLL per target).
        forward_perplexity: f64,
        /// exp(backward NLL per target).
        backward_perplexity: f64,
        /// Learning rate of the last step.
        lr: f64,
        /// Mean global gradient norm before clipping.
        grad_norm: f64,
        /// Targets processed so far.
        tokens: u64,
        /// Training throughput over the window (targets of both directions per second).
        tokens_per_second: f64,
        /// Mixed precision: the loss scale after the window's last step (absent: `f32`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        loss_scale: Option<f64>,
        /// Mixed precision: steps of the window skipped for overflowing gradients.
        #[serde(default, skip_serializing_if = "is_zero")]
        skipped_steps: u64,
    },
    /// Full-softmax perplexity on the validation data.
    Valid {
        /// Optimizer steps done.
        step: u64,
        /// Forward LM.
        forward_perplexity: f64,
        /// Backward LM.
        backward_perplexity: f64,
        /// exp of the mean of the two directions' NLL.
        perplexity: f64,
        /// Of the weight average over this many steps (absent: the trained weights).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        averaged_steps: Option<u64>,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl MetricsRecord {
    /// The step of the record.
    pub fn step(&self) -> u64 {
        match self {
            Self::Train { step, .. } | Self::Valid { step, .. } => *step,
        }
    }
}

/// Appends records to `metrics.jsonl`, one flushed line each.
pub struct MetricsLog {
    path: PathBuf,
    file: std::fs::File,
}

impl MetricsLog {
    /// Starts a new log (an existing one is replaced).
    pub fn create(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let file = std::fs::File::create(&path).map_err(io_error(&path))?;
        Ok(Self { path, file })
    }

    /// Continues a log after a resume from `step`: lines written after that step by the
    /// interrupted run are dropped, so the log reads as if the run had never stopped.
    pub fn resume(path: impl Into<PathBuf>, step: u64) -> Result<Self> {
        let path = path.into();
        let kept: Vec<MetricsRecord> = if path.exists() {
            read_metrics(&path)?
                .into_iter()
                .filter(|r| r.step() <= step)
                .collect()
        } else {
            Vec::new()
        };
        let mut text = String::new();
        for record in &kept {
            text.push_str(&to_line(record, &path)?);
        }
        elmo_model::write_atomic(&path, text.as_bytes()).map_err(io_error(&path))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_error(&path))?;
        Ok(Self { path, file })
    }

    /// Appends one record.
    pub fn append(&mut self, record: &MetricsRecord) -> Result<()> {
        let line = to_line(record, &self.path)?;
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(io_error(&self.path))
    }
}

fn to_line(record: &MetricsRecord, path: &Path) -> Result<String> {
    let mut line = serde_json::to_string(record).map_err(|source| TrainError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    line.push('\n');
    Ok(line)
}

/// Reads a metrics log; a torn last line (the run was killed while writing it) is ignored.
pub fn read_metrics(path: impl AsRef<Path>) -> Result<Vec<MetricsRecord>> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(io_error(path))?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<std::io::Result<_>>()
        .map_err(io_error(path))?;
    let mut records = Vec::with_capacity(lines.len());
    for (index, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(record) => records.push(record),
            Err(_) if index + 1 == lines.len() => break,
            Err(source) => {
                return Err(TrainError::Json {
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
    Ok(records)
}
