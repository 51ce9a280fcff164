//! Downstream tasks on ELMo (Peters et al. 2018, §5): heads that take `[x_k; ELMo_k]` (and
//! optionally ELMo at the task RNN's output) with the biLM frozen, their data readers and metrics.
//!
//! - readers: [`conll`] (tagging), [`tsv`] (classification, pairs), [`dataset`]
//! - ELMo: [`elmo_features`] (the frozen biLM's layers, computed once), [`elmo_mix`]
//! - heads: [`tagger`] (BiLSTM + [`crf`]), [`classifier`], [`pair`] (ESIM-like), over
//!   [`encoder`]; [`model`] picks one
//! - [`train`] (early stopping, best model kept), [`task_dir`], [`metrics`]

pub mod batch;
pub mod bilstm;
pub mod brown_tags;
pub mod classifier;
pub mod conll;
pub mod crf;
pub mod dataset;
pub mod elmo_features;
pub mod elmo_mix;
pub mod encoder;
pub mod error;
pub mod index;
pub mod metrics;
pub mod model;
pub mod pair;
pub mod pooling;
pub mod tagger;
pub mod task_dir;
pub mod train;
pub mod tsv;

pub use dataset::{DataFormat, Example, Target, TaskKind};
pub use elmo_features::BiLmFeatures;
pub use elmo_mix::{ElmoPlace, MixKind};
pub use error::{Result, TaskError};
pub use model::{TaskModel, TaskModelConfig};
pub use task_dir::{ElmoSource, TaskDirectory, TaskSpec};
pub use train::{TaskObserver, TaskTrainOptions, evaluate, predict, train_task};
