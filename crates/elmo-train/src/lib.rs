//! Training the ELMo biLM as bilm-tf does (Peters et al. 2018, §3.1): corpora and vocabulary,
//! stateful batching, the joint forward + backward loss with a tied token encoder and softmax
//! (full or sampled), Adagrad, atomic checkpoints with exact resume, evaluation and export.
//!
//! This crate picks no backend: the caller passes a `burn::tensor::Device`.

pub mod averaging;
pub mod batcher;
pub mod checkpoint;
pub mod config;
pub mod contiguous;
pub mod corpus;
mod cube_adagrad;
mod cube_norm;
mod dropout;
pub mod error;
pub mod evaluate;
pub mod init_from;
pub mod language_model;
pub mod metrics;
pub mod optimizer;
pub mod plateau;
pub mod plot;
mod recorded_stack;
pub mod run;
pub mod softmax;
pub mod step_profile;
pub mod tokenizer;
pub mod trainer;
mod training_step;
pub mod vocabulary;

pub use config::TrainConfig;
pub use dropout::DropoutConfig;
pub use error::{Result, TrainError};
pub use evaluate::{Perplexity, evaluate};
pub use init_from::InitFrom;
pub use language_model::{BiLanguageModel, BiLanguageModelConfig};
pub use run::TrainedRun;
pub use trainer::{TrainObserver, TrainOptions, TrainSummary, train};
pub use training_step::PAIRED_DIRECTIONS_VARIABLE;
pub use vocabulary::Vocabulary;

/// The wgpu device of the integration tests, for unit tests too.
#[cfg(test)]
#[path = "../../elmo-model/tests/support/wgpu_probe.rs"]
mod wgpu_probe;
