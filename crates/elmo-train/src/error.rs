//! The error type of `elmo-train`: every failure names the file, line, step or option it is about.

use std::path::PathBuf;

/// Everything that can go wrong while reading corpora, building vocabularies or training.
///
/// A message never repeats its source error, which [`std::error::Error::source`] returns: print
/// the whole chain (anyhow's `{:#}`, or walk `source()`) to see both, once each.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A file could not be read or written.
    #[error("{path}: I/O error")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line of a text file is not valid UTF-8.
    #[error("{path}:{line}: invalid UTF-8")]
    InvalidUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The decoding error.
        #[source]
        source: std::str::Utf8Error,
    },
    /// A corpus pattern matched nothing, or a corpus holds no sentence.
    #[error("corpus: {0}")]
    Corpus(String),
    /// A glob pattern is malformed.
    #[error("bad file pattern `{pattern}`")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// The parse error.
        #[source]
        source: glob::PatternError,
    },
    /// A vocabulary file is malformed (duplicate entries, missing special tokens, ...).
    #[error("{path}:{line}: invalid vocabulary: {message}")]
    Vocabulary {
        /// The vocabulary file.
        path: PathBuf,
        /// 1-based line number (0 when about the whole file).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A JSON file (config, trainer state) could not be parsed or written.
    #[error("{path}: invalid JSON")]
    Json {
        /// The file.
        path: PathBuf,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A configuration value cannot be used.
    #[error("invalid training configuration: {0}")]
    InvalidConfig(String),
    /// The loss became NaN or infinite.
    #[error(
        "the loss became non-finite ({loss}) at step {step}; the run stopped and its last \
         checkpoint ({last_checkpoint}) is intact: resume from it with a lower learning rate or \
         stronger clipping"
    )]
    NonFiniteLoss {
        /// The optimizer step that produced it.
        step: u64,
        /// The value seen.
        loss: f64,
        /// Description of the last good checkpoint.
        last_checkpoint: String,
    },
    /// The device failed during a training step (an allocation it refused, a kernel).
    #[error(
        "the device failed during step {step}; the run stopped and its last checkpoint is \
         intact (a smaller --batch-size or --unroll-steps may fit the device)"
    )]
    Device {
        /// The optimizer step that failed (1-based).
        step: u64,
        /// burn's error reading the step's loss.
        #[source]
        source: burn::tensor::TensorReadError,
    },
    /// A run directory is missing, incomplete or from another configuration.
    #[error("{path}: {message}")]
    RunDirectory {
        /// The run directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Loading or saving burn's record format failed.
    #[error("{path}: burn record")]
    Record {
        /// The record file.
        path: PathBuf,
        /// burn's error.
        #[source]
        source: burn::store::RecordError,
    },
    /// Drawing the curves failed.
    #[error("{path}: plotting: {message}")]
    Plot {
        /// The output file.
        path: PathBuf,
        /// The plotting library's message.
        message: String,
    },
    /// A model-level error (options, weights, export).
    #[error(transparent)]
    Model(#[from] elmo_model::ElmoError),
}

/// Result alias for this crate.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;

/// Attaches a path to an I/O error.
pub(crate) fn io_error(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
    let path = path.into();
    move |source| TrainError::Io { path, source }
}

/// Attaches a path to an error of burn's record format (a model or optimizer file).
pub(crate) fn record_error(
    path: impl Into<PathBuf>,
) -> impl FnOnce(burn::store::RecordError) -> TrainError {
    let path = path.into();
    move |source| TrainError::Record { path, source }
}
