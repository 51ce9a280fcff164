//! ELMo (Peters et al. 2018, "Deep contextualized word representations") on burn: character ids,
//! the char-CNN token encoder, the LSTMP biLM, scalar mixes, and import of the official
//! bilm-tf / AllenNLP weights with exact AllenNLP parity.
//!
//! This crate picks no backend: every constructor takes a `burn::tensor::Device`.
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
pub mod cpu_matmul;
mod cube_lstm_cell;
pub mod cube_matmul;
pub mod cube_reduce;
pub mod cube_tensor;
pub mod elmo;
pub mod error;
pub mod export;
mod gate_activation;
pub mod gradients;
pub mod highway;
pub mod index_add;
pub mod lstm_backward;
pub mod lstm_projection;
pub mod options;
pub mod scalar_mix;
pub mod seeded_init;
pub mod split_product;
pub mod token_cache;
pub mod weights;

pub use bilm::{BiLm, BiLmConfig, BiLmOutput};
pub use bilm_state::BiLmState;
pub use char_cnn::{CharCnnEncoder, CharCnnEncoderConfig};
pub use char_ids::CharIdBatch;
pub use elmo::{Elmo, ElmoConfig, ElmoOutput};
pub use error::{ElmoError, Result};
pub use lstm_backward::{
    LstmGradients, LstmGroup, LstmGroupGradients, LstmTape, LstmWeightGradients,
};
pub use lstm_projection::{LstmState, LstmWithProjection, LstmWithProjectionConfig};
pub use options::BiLmOptions;
pub use scalar_mix::{ScalarMix, ScalarMixConfig};
pub use seeded_init::seeded_init;
pub use token_cache::TokenEmbeddingCache;

/// The wgpu device of the integration tests, for unit tests too.
#[cfg(test)]
#[path = "../tests/support/wgpu_probe.rs"]
mod wgpu_probe;
