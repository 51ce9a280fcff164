//! ELMo (Peters et al. 2018, "Deep contextualized word representations") on burn: character ids,
//! the char-CNN token encoder, the LSTMP biLM, scalar mixes, and import of the official
//! bilm-tf / AllenNLP weights with exact AllenNLP parity.
//!
//! This crate picks no backend: every constructor takes a `burn::tensor::Device`, and the
//! application enables burn's backends. Features: `kernels` (custom CubeCL kernels on a CubeCL
//! device, [`KernelSettings`]), `flex` (on burn's flex CPU backend the LSTM recurrence of
//! inference as one host loop, its packed weights kept between calls by [`HostWeights`];
//! `cpu_matmul`, a setting of flex's matmul crate).
//!
//! ```no_run
//! use burn::tensor::Device;
//! use elmo_model::{ElmoConfig, Elmo};
//!
//! let device = Device::flex();
//! let elmo: Elmo = ElmoConfig::default()
//!     .from_pretrained("options.json", "weights.hdf5", &device)
//!     .unwrap();
//! let out = elmo.forward_sentences(&[vec!["Hello", "world", "."]], &device);
//! assert_eq!(out.representations[0].dims()[1], 3);
//! ```

pub mod bilm;
pub mod bilm_state;
pub mod char_cnn;
pub mod char_ids;
pub mod convolution_record;
#[cfg(feature = "flex")]
pub mod cpu_matmul;
pub mod cpu_memory;
mod distinct_tokens;
pub mod elmo;
pub mod embedder;
pub mod error;
pub mod export;
mod fused_recurrence;
pub mod highway;
mod host_weights;
pub mod lstm_projection;
pub mod lstm_stack;
mod lstm_state;
pub mod options;
pub mod python_text;
mod run_lock;
pub mod scalar_mix;
pub mod seeded_init;
mod text_file;
pub mod token_cache;
pub mod tokenizer;
pub mod weights;
mod write_atomic;

pub use bilm::{BiLm, BiLmConfig, BiLmOutput};
pub use bilm_state::BiLmState;
pub use char_cnn::{CharCnnEncoder, CharCnnEncoderConfig};
pub use char_ids::CharIdBatch;
pub use distinct_tokens::DistinctTokens;
pub use elmo::{Elmo, ElmoConfig, ElmoOutput};
pub use elmo_kernels::{HostInstructions, KernelSettings, Precision};
pub use embedder::{
    Embedder, EmbedderConfig, LayerSelection, Pooling, SentenceVectors, SentenceView,
};
pub use error::{ElmoError, Result};
pub use host_weights::{HostBf16Weight, HostWeights};
pub use lstm_projection::{LstmState, LstmWithProjection, LstmWithProjectionConfig};
pub use options::BiLmOptions;
pub use run_lock::RunLock;
pub use scalar_mix::{ScalarMix, ScalarMixConfig};
pub use seeded_init::seeded_init;
pub use text_file::{is_gzip, open_text};
pub use token_cache::TokenEmbeddingCache;
pub use write_atomic::{write_atomic, write_atomic_with};

/// The README's Rust snippets, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
