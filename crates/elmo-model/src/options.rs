//! `options.json` of a bilm-tf / AllenNLP ELMo model: the architecture, read and written with serde.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ElmoError, Result};

/// The architecture of a biLM, in the JSON layout used by bilm-tf and AllenNLP (`options.json`).
///
/// Unknown fields (bilm-tf also stores training settings such as `n_tokens_vocab`, `dropout`,
/// `unroll_steps`) are ignored on read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BiLmOptions {
    /// The LSTM stacks.
    pub lstm: LstmOptions,
    /// The character CNN token encoder.
    pub char_cnn: CharCnnOptions,
}

/// LSTM part of [`BiLmOptions`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LstmOptions {
    /// Number of LSTM cells (`C`).
    pub dim: usize,
    /// Width of the projection, the token embedding and every biLM layer per direction (`P`).
    pub projection_dim: usize,
    /// Number of LSTM layers per direction (`L`).
    pub n_layers: usize,
    /// Clip value of the memory cell (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_clip: Option<f64>,
    /// Clip value of the projected hidden state (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proj_clip: Option<f64>,
    /// Residual connections from layer 1 on.
    #[serde(default)]
    pub use_skip_connections: bool,
}

/// Character CNN part of [`BiLmOptions`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CharCnnOptions {
    /// Character embedding.
    pub embedding: CharEmbeddingOptions,
    /// `[width, n_filters]` for each convolution.
    pub filters: Vec<[usize; 2]>,
    /// Number of highway layers.
    pub n_highway: usize,
    /// Size of the character vocabulary including the padding id 0 (262 for byte ids).
    pub n_characters: usize,
    /// Character slots per token (50).
    pub max_characters_per_token: usize,
    /// Activation after the max-pooling of each convolution.
    pub activation: CnnActivation,
}

/// Width of the character embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CharEmbeddingOptions {
    /// Embedding width (`E`).
    pub dim: usize,
}

/// Activation of the char CNN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CnnActivation {
    /// `max(0, x)`.
    Relu,
    /// `tanh(x)`.
    Tanh,
}

impl BiLmOptions {
    /// Reads and validates an `options.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ElmoError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json_str(&text, path)
    }

    /// Parses and validates options from JSON text; `source` names it in errors.
    pub fn from_json_str(text: &str, source_name: impl AsRef<Path>) -> Result<Self> {
        let options: Self = serde_json::from_str(text).map_err(|source| ElmoError::Options {
            path: source_name.as_ref().to_path_buf(),
            source,
        })?;
        options.validate()?;
        Ok(options)
    }

    /// Writes the options as pretty JSON.
    pub fn to_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let text = serde_json::to_string_pretty(self).map_err(|source| ElmoError::Options {
            path: path.to_path_buf(),
            source,
        })?;
        std::fs::write(path, text).map_err(|source| ElmoError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Checks that the numbers describe a model this implementation can build.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(ElmoError::InvalidOptions(msg));
        let cnn = &self.char_cnn;
        if cnn.max_characters_per_token != crate::char_ids::MAX_CHARS_PER_TOKEN {
            return bad(format!(
                "char_cnn.max_characters_per_token is {}, only {} is supported (AllenNLP's character mapper)",
                cnn.max_characters_per_token,
                crate::char_ids::MAX_CHARS_PER_TOKEN
            ));
        }
        if cnn.n_characters != crate::char_ids::N_CHARACTERS && cnn.n_characters != 261 {
            return bad(format!(
                "char_cnn.n_characters is {}, expected 262 (261 byte/marker ids + padding)",
                cnn.n_characters
            ));
        }
        if cnn.filters.is_empty() {
            return bad("char_cnn.filters is empty".into());
        }
        for [width, n] in &cnn.filters {
            if *width == 0 || *width > cnn.max_characters_per_token || *n == 0 {
                return bad(format!(
                    "char_cnn.filters has an invalid entry [{width}, {n}]"
                ));
            }
        }
        if cnn.embedding.dim == 0 || self.lstm.dim == 0 || self.lstm.projection_dim == 0 {
            return bad(
                "zero width in char_cnn.embedding.dim, lstm.dim or lstm.projection_dim".into(),
            );
        }
        if self.lstm.n_layers == 0 {
            return bad("lstm.n_layers is 0".into());
        }
        for (name, clip) in [
            ("cell_clip", self.lstm.cell_clip),
            ("proj_clip", self.lstm.proj_clip),
        ] {
            if let Some(c) = clip
                && !(c.is_finite() && c >= 0.0)
            {
                return bad(format!("lstm.{name} is {c}"));
            }
        }
        Ok(())
    }

    /// Total number of convolution filters (`F`, the width of the char-CNN output).
    pub fn n_filters(&self) -> usize {
        self.char_cnn.filters.iter().map(|[_, n]| n).sum()
    }

    /// Width of one biLM layer output: forward and backward concatenated (`2P`).
    pub fn d_output(&self) -> usize {
        2 * self.lstm.projection_dim
    }

    /// Number of biLM layers including the token layer (`L + 1`).
    pub fn n_output_layers(&self) -> usize {
        self.lstm.n_layers + 1
    }
}
