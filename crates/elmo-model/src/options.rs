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

/// The most LSTM layers per direction, highway layers or convolutions an options file may ask
/// for (published models have 1-2, 2 and 7).
pub const MAX_LAYERS: usize = 64;
/// The widest dimension an options file may ask for (`original` has 4,096 cells).
pub const MAX_WIDTH: usize = 1 << 16;
/// The most parameters an options file may describe (2^32, 16 GiB of `f32`; `original` has
/// 94 million).
pub const MAX_PARAMETERS: u64 = 1 << 32;

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

    /// Parses and validates options from JSON text; `source_name` names it in errors (a value
    /// out of bounds is an [`ElmoError::InvalidOptionsFile`] naming it and the field).
    pub fn from_json_str(text: &str, source_name: impl AsRef<Path>) -> Result<Self> {
        let path = source_name.as_ref();
        let options: Self = serde_json::from_str(text).map_err(|source| ElmoError::Options {
            path: path.to_path_buf(),
            source,
        })?;
        options.validate().map_err(|error| match error {
            ElmoError::InvalidOptions(reason) => ElmoError::InvalidOptionsFile {
                path: path.to_path_buf(),
                reason,
            },
            other => other,
        })?;
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

    /// Checks that the numbers describe a model this implementation can build, within bounds
    /// ([`MAX_LAYERS`], [`MAX_WIDTH`], [`MAX_PARAMETERS`]) checked before anything is allocated.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(ElmoError::InvalidOptions(msg));
        let cnn = &self.char_cnn;
        for (name, count) in [
            ("lstm.n_layers", self.lstm.n_layers),
            ("char_cnn.n_highway", cnn.n_highway),
            ("the number of char_cnn.filters", cnn.filters.len()),
        ] {
            if count > MAX_LAYERS {
                return bad(format!(
                    "{name} is {count}, at most {MAX_LAYERS} are supported"
                ));
            }
        }
        let widths = [
            ("lstm.dim", self.lstm.dim),
            ("lstm.projection_dim", self.lstm.projection_dim),
            ("char_cnn.embedding.dim", cnn.embedding.dim),
        ];
        let filter_widths = cnn
            .filters
            .iter()
            .map(|[_, n]| ("a char_cnn.filters count", *n));
        for (name, width) in widths.into_iter().chain(filter_widths) {
            if width > MAX_WIDTH {
                return bad(format!(
                    "{name} is {width}, at most {MAX_WIDTH} is supported"
                ));
            }
        }
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
        // Last: every count and width is bounded by now.
        let n_parameters = self.n_parameters();
        if n_parameters > MAX_PARAMETERS {
            return bad(format!(
                "the options describe {n_parameters} parameters, at most {MAX_PARAMETERS} are supported"
            ));
        }
        Ok(())
    }

    /// The number of parameters of the biLM these options describe (`u64::MAX` when it does
    /// not fit: the arithmetic saturates, whatever the options hold).
    pub fn n_parameters(&self) -> u64 {
        let (cnn, lstm) = (&self.char_cnn, &self.lstm);
        let n = |x: usize| x as u64;
        let mul = |values: &[u64]| values.iter().fold(1u64, |a, &b| a.saturating_mul(b));
        let sum = |values: &[u64]| values.iter().fold(0u64, |a, &b| a.saturating_add(b));
        let (d_char, cells, projection) =
            (n(cnn.embedding.dim), n(lstm.dim), n(lstm.projection_dim));
        let filters = cnn.filters.iter().fold(0u64, |total, &[w, f]| {
            total.saturating_add(mul(&[n(f), mul(&[n(w), d_char]).saturating_add(1)]))
        });
        let n_filters = cnn
            .filters
            .iter()
            .fold(0u64, |total, &[_, f]| total.saturating_add(n(f)));
        let highway = mul(&[n_filters, n_filters]).saturating_add(n_filters);
        let encoder = sum(&[
            mul(&[n(cnn.n_characters), d_char]),
            filters,
            mul(&[n(cnn.n_highway), 2, highway]),
            mul(&[n_filters, projection]),
            projection,
        ]);
        let layer = sum(&[
            mul(&[2, projection, 4, cells]),
            mul(&[4, cells]),
            mul(&[cells, projection]),
        ]);
        encoder.saturating_add(mul(&[2, n(lstm.n_layers), layer]))
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Module;
    use burn::tensor::Device;

    const DEMO: &str = include_str!("../../../fixtures/allennlp/options.json");

    fn demo() -> BiLmOptions {
        BiLmOptions::from_json_str(DEMO, "options.json").expect("the demo options are valid")
    }

    /// The count that bounds an options file is the count of the model it builds.
    #[test]
    fn the_parameter_count_is_the_built_models() {
        let options = demo();
        let built = crate::BiLmConfig {
            options: options.clone(),
        }
        .init(&Device::flex());
        assert_eq!(options.n_parameters(), built.num_params() as u64);
    }

    /// Regression (fuzzing, issue 49): `"n_layers": 1000000000000` aborted the process with a
    /// failed 352 TB allocation while the model was being built; it is an error naming the field.
    #[test]
    fn huge_counts_and_widths_are_errors_before_anything_is_allocated() {
        type Change = fn(&mut BiLmOptions);
        let cases: [(&str, Change); 6] = [
            // Found by `cargo xtask fuzz` (config reader, case 6): a filter width of u64::MAX
            // overflowed the parameter count.
            ("char_cnn.filters", |o| {
                o.char_cnn.filters[1][0] = usize::MAX
            }),
            ("lstm.n_layers", |o| o.lstm.n_layers = 1_000_000_000_000),
            ("char_cnn.n_highway", |o| o.char_cnn.n_highway = usize::MAX),
            ("lstm.dim", |o| o.lstm.dim = usize::MAX),
            ("char_cnn.filters", |o| o.char_cnn.filters[0][1] = 1 << 40),
            ("parameters", |o| {
                o.lstm.dim = MAX_WIDTH;
                o.lstm.projection_dim = MAX_WIDTH;
                o.lstm.n_layers = MAX_LAYERS;
            }),
        ];
        for (field, change) in cases {
            let mut options = demo();
            change(&mut options);
            let text = serde_json::to_string(&options).expect("serialisable");
            let error = BiLmOptions::from_json_str(&text, "bad.json").expect_err("out of bounds");
            assert_eq!(error.path(), Some(Path::new("bad.json")), "{error}");
            let error = error.to_string();
            assert!(
                error.starts_with("bad.json: ")
                    && (error.contains(field)
                        || (field == "char_cnn.filters" && error.contains("filters"))),
                "{field}: {error}"
            );
        }
    }
}
