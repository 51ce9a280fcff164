//! The error type of `elmo-model`: every failure names the file, dataset or option it is about.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while building, loading or saving an ELMo model.
///
/// A message never repeats its source error, which [`std::error::Error::source`] returns: print
/// the whole chain (anyhow's `{:#}`, or walk `source()`) to see both, once each.
#[derive(Debug, thiserror::Error)]
pub enum ElmoError {
    /// A file could not be read or written.
    #[error("{path}: I/O error")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `options.json` is not valid JSON or misses a required field.
    #[error("{path}: invalid ELMo options")]
    Options {
        /// The options file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// An option has a value this implementation cannot use.
    #[error("invalid ELMo options: {0}")]
    InvalidOptions(String),
    /// An options file (or JSON text named so) asks for a value this implementation cannot use.
    #[error("{path}: invalid ELMo options: {reason}")]
    InvalidOptionsFile {
        /// The options file.
        path: PathBuf,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// The weight file is not a readable HDF5 file (wrong format, truncated...).
    #[error("{path}: not a readable HDF5 weight file")]
    Hdf5 {
        /// The weight file.
        path: PathBuf,
        /// The HDF5 reader's error.
        #[source]
        source: hdf5_pure::Error,
    },
    /// A dataset the options require is missing from the weight file.
    #[error("{path}: missing dataset `{dataset}` (required by the options)")]
    MissingDataset {
        /// The weight file.
        path: PathBuf,
        /// The dataset name.
        dataset: String,
    },
    /// A dataset exists but its shape disagrees with the options.
    #[error("{path}: dataset `{dataset}` has shape {found:?}, the options require {expected:?}")]
    ShapeMismatch {
        /// The weight file.
        path: PathBuf,
        /// The dataset name.
        dataset: String,
        /// Shape required by the options.
        expected: Vec<usize>,
        /// Shape found in the file.
        found: Vec<usize>,
    },
    /// A dataset could not be decoded as float32 values.
    #[error("{path}: dataset `{dataset}` could not be read")]
    DatasetRead {
        /// The weight file.
        path: PathBuf,
        /// The dataset name.
        dataset: String,
        /// The HDF5 reader's error.
        #[source]
        source: hdf5_pure::Error,
    },
    /// The weight file's structure is not that of a weight file (too deep, too many datasets).
    #[error("{path}: not a bilm-tf weight file: {reason}")]
    InvalidWeights {
        /// The weight file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The weight file holds datasets that no part of the model uses.
    #[error("{path}: unexpected dataset(s) not used by a model with these options: {datasets:?}")]
    UnusedDatasets {
        /// The weight file.
        path: PathBuf,
        /// The names of the datasets left over.
        datasets: Vec<String>,
    },
    /// A weight contains NaN or infinity.
    #[error("{path}: dataset `{dataset}` contains non-finite values")]
    NonFinite {
        /// The weight file.
        path: PathBuf,
        /// The dataset name.
        dataset: String,
    },
    /// The HDF5 writer failed.
    #[error("{path}: could not write HDF5")]
    Hdf5Write {
        /// The output file.
        path: PathBuf,
        /// The HDF5 writer's error.
        #[source]
        source: hdf5_pure::Error,
    },
    /// Loading or saving burn's own record format failed.
    #[error("{path}: burn record")]
    Record {
        /// The record file.
        path: PathBuf,
        /// burn's error.
        #[source]
        source: burn::store::RecordError,
    },
    /// A tensor's values could not be read back from the device.
    #[error("reading tensor data: {0}")]
    TensorData(String),
    /// A setting of a model's configuration cannot be used (a dropout outside `[0, 1)`, fixed
    /// mix weights of the wrong count...), named by its field.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// An input batch is malformed (wrong rank or width).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Another process writes the same run directory or output ([`crate::RunLock`]).
    #[error(
        "{path}: locked by process {pid} on host {host}, which writes the same run or output; \
         wait for it to finish"
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The writer's process id.
        pid: u32,
        /// The writer's host.
        host: String,
    },
    /// A lock left by a writer that died ([`crate::RunLock`]).
    #[error(
        "{path}: stale lock of process {pid} on host {host}, which is no longer running; \
         remove it with --break-stale-lock if no other process writes there"
    )]
    StaleLock {
        /// The lock file.
        path: PathBuf,
        /// The dead writer's process id.
        pid: u32,
        /// Its host (this one).
        host: String,
    },
    /// A lock file whose content is not a lock's.
    #[error("{path}: not a lock file of elmo (remove it if no process writes there)")]
    BadLock {
        /// The lock file.
        path: PathBuf,
    },
}

impl ElmoError {
    /// The file the error is about, where it is about one (a file read or written, a weight
    /// file's dataset, a lock).
    pub fn path(&self) -> Option<&Path> {
        match self {
            ElmoError::Io { path, .. }
            | ElmoError::Options { path, .. }
            | ElmoError::InvalidOptionsFile { path, .. }
            | ElmoError::Hdf5 { path, .. }
            | ElmoError::MissingDataset { path, .. }
            | ElmoError::ShapeMismatch { path, .. }
            | ElmoError::DatasetRead { path, .. }
            | ElmoError::InvalidWeights { path, .. }
            | ElmoError::UnusedDatasets { path, .. }
            | ElmoError::NonFinite { path, .. }
            | ElmoError::Hdf5Write { path, .. }
            | ElmoError::Record { path, .. }
            | ElmoError::Locked { path, .. }
            | ElmoError::StaleLock { path, .. }
            | ElmoError::BadLock { path } => Some(path),
            ElmoError::InvalidOptions(_)
            | ElmoError::TensorData(_)
            | ElmoError::InvalidConfig(_)
            | ElmoError::InvalidInput(_) => None,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = ElmoError> = std::result::Result<T, E>;
