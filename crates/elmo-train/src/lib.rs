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
mod dropout;
mod encoder_backward;
pub mod error;
pub mod evaluate;
pub mod init_from;
pub mod language_model;
pub mod lm_batch;
pub mod loss_scale;
pub mod lstm_backward;
pub mod metrics;
pub mod optimizer;
pub mod optimizer_step;
pub mod plateau;
pub mod plot;
mod recorded_stack;
pub mod run;
pub mod run_info;
mod seeds;
pub mod softmax;
mod state_device;
mod step_input;
pub mod step_losses;
pub mod step_profile;
mod towers;
pub mod trainer;
mod training_step;
pub mod vocabulary;

pub use config::TrainConfig;
pub use dropout::DropoutConfig;
pub use error::{Result, TrainError};
pub use evaluate::{Perplexity, evaluate};
pub use init_from::InitFrom;
pub use language_model::{BiLanguageModel, BiLanguageModelConfig, GradientOptions};
pub use loss_scale::LossScale;
pub use lstm_backward::{LstmGroup, RecordedLstm};
pub use run::TrainedRun;
pub use step_input::StepInput;
pub use step_profile::StepProfile;
pub use trainer::{TrainObserver, TrainOptions, TrainSummary, Trainer, train};
pub use vocabulary::Vocabulary;
