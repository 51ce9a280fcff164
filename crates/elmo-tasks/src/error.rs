//! The error type of `elmo-tasks`: every failure names the file, line, column or option it is about.

use std::path::PathBuf;

/// Everything that can go wrong while reading task data, training or running a task model.
///
/// A message never repeats its source error, which [`std::error::Error::source`] returns: print
/// the whole chain (anyhow's `{:#}`, or walk `source()`) to see both, once each.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A file could not be read or written.
    #[error("{path}: I/O error")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line of a data file is malformed (or not UTF-8).
    #[error("{path}:{line}: {message}")]
    Data {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0: the whole file).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A JSON file (task config) could not be parsed or written.
    #[error("{path}: invalid JSON")]
    Json {
        /// The file.
        path: PathBuf,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A setting cannot be used.
    #[error("invalid task configuration: {0}")]
    InvalidConfig(String),
    /// A model record could not be saved or loaded.
    #[error("{path}: burn record")]
    Record {
        /// The record file.
        path: PathBuf,
        /// The burn recorder error.
        #[source]
        source: burn::store::RecordError,
    },
    /// The loss became NaN or infinite.
    #[error("non-finite loss at epoch {epoch}, batch {batch}; the best checkpoint is intact")]
    NonFinite {
        /// 1-based epoch.
        epoch: usize,
        /// 0-based batch of the epoch.
        batch: usize,
    },
    /// The biLM failed.
    #[error(transparent)]
    Model(#[from] elmo_model::ElmoError),
}

/// `Result` with [`TaskError`].
pub type Result<T> = std::result::Result<T, TaskError>;

/// Maps an I/O error to [`TaskError::Io`] for `path`.
pub fn io_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> TaskError + '_ {
    move |source| TaskError::Io {
        path: path.to_path_buf(),
        source,
    }
}
