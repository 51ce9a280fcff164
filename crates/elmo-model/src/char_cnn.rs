//! Character-CNN token encoder of ELMo (Peters et al. 2018, §3.4; Kim et al. 2016): char embedding,
//! 1-D convolutions of several widths, max over positions, activation, highway layers, projection.
//! Follows AllenNLP's `_ElmoCharacterEncoder` (allennlp/modules/elmo.py).

use burn::module::{Module, Param};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::{relu, tanh};
use burn::tensor::module::embedding;
use burn::tensor::{Device, Int, Tensor};

use crate::char_ids::MAX_CHARS_PER_TOKEN;
use crate::highway::{Highway, HighwayConfig};
use crate::options::{BiLmOptions, CnnActivation};

/// Configuration of a [`CharCnnEncoder`], taken from [`BiLmOptions`].
#[derive(Debug, Clone)]
pub struct CharCnnEncoderConfig {
    /// Character vocabulary size including the padding id 0.
    pub n_characters: usize,
    /// Character embedding width (`E`).
    pub d_char: usize,
    /// `[width, n_filters]` of each convolution.
    pub filters: Vec<[usize; 2]>,
    /// Number of highway layers.
    pub n_highway: usize,
    /// Output width (`P`).
    pub d_output: usize,
    /// Activation after max-pooling.
    pub activation: CnnActivation,
}

impl CharCnnEncoderConfig {
    /// The token encoder described by `options`.
    pub fn from_options(options: &BiLmOptions) -> Self {
        let cnn = &options.char_cnn;
        Self {
            n_characters: crate::char_ids::N_CHARACTERS,
            d_char: cnn.embedding.dim,
            filters: cnn.filters.clone(),
            n_highway: cnn.n_highway,
            d_output: options.lstm.projection_dim,
            activation: cnn.activation,
        }
    }

    /// Total number of filters (`F`).
    pub fn n_filters(&self) -> usize {
        self.filters.iter().map(|[_, n]| n).sum()
    }

    /// Creates the encoder with random weights; row 0 of the char embedding (padding) is zero.
    pub fn init(&self, device: &Device) -> CharCnnEncoder {
        let embedding_init = Initializer::Uniform {
            min: -1.0,
            max: 1.0,
        };
        let table: Tensor<2> = embedding_init
            .init_with([self.n_characters, self.d_char], None, None, device)
            .val();
        let table = table.slice_assign(
            [0..1, 0..self.d_char],
            Tensor::zeros([1, self.d_char], device),
        );
        let convolutions = self
            .filters
            .iter()
            .map(|&[width, n_filters]| {
                let fan_in = width * self.d_char;
                let bound = (1.0 / fan_in as f64).sqrt();
                let init = Initializer::Uniform {
                    min: -bound,
                    max: bound,
                };
                CharConvolution {
                    weight: init.init_with(
                        [fan_in, n_filters],
                        Some(fan_in),
                        Some(n_filters),
                        device,
                    ),
                    bias: init.init_with([n_filters], Some(fan_in), Some(n_filters), device),
                    width,
                }
            })
            .collect();
        let n_filters = self.n_filters();
        CharCnnEncoder {
            char_embedding: Param::from_tensor(table.detach()),
            convolutions,
            highways: (0..self.n_highway)
                .map(|_| HighwayConfig { d_model: n_filters }.init(device))
                .collect(),
            projection: LinearConfig::new(n_filters, self.d_output).init(device),
            activation: self.activation,
        }
    }
}

/// One convolution of a single width over the 50 character slots, stored as a matrix.
#[derive(Module, Debug)]
pub struct CharConvolution {
    /// `[width * d_char, n_filters]`: bilm-tf's `W_cnn_i` `(1, width, d_char, n_filters)` flattened.
    pub weight: Param<Tensor<2>>,
    /// `[n_filters]`.
    pub bias: Param<Tensor<1>>,
    /// Kernel width in characters.
    #[module(skip)]
    pub width: usize,
}

impl CharConvolution {
    /// Valid (unpadded) convolution followed by max over positions.
    ///
    /// # Shapes
    /// - chars: `[n_tokens, 50, d_char]`
    /// - output: `[n_tokens, n_filters]`
    pub fn forward(&self, chars: Tensor<3>) -> Tensor<2> {
        let [n_tokens, n_slots, d_char] = chars.dims();
        let n_positions = n_slots - self.width + 1;
        // Windows as one matrix: `[n_tokens * positions, width * d_char]`, so a convolution is one
        // matmul (the layout of `weight` is width-major, then char dimension).
        let windows = if self.width == 1 {
            chars
        } else {
            Tensor::cat(
                (0..self.width)
                    .map(|k| chars.clone().narrow(1, k, n_positions))
                    .collect(),
                2,
            )
        };
        let windows = windows.reshape([n_tokens * n_positions, self.width * d_char]);
        let convolved = windows.matmul(self.weight.val());
        let [_, n_filters] = convolved.dims();
        let convolved = convolved.reshape([n_tokens, n_positions, n_filters]);
        convolved.max_dim(1).reshape([n_tokens, n_filters]) + self.bias.val().unsqueeze_dim(0)
    }
}

/// The char-CNN token encoder.
#[derive(Module, Debug)]
pub struct CharCnnEncoder {
    /// `[n_characters, d_char]`; row 0 is the padding id and is zero in pretrained models.
    pub char_embedding: Param<Tensor<2>>,
    /// One convolution per filter width.
    pub convolutions: Vec<CharConvolution>,
    /// Highway layers over the concatenated filters.
    pub highways: Vec<Highway>,
    /// `[n_filters, d_output]` projection (bilm-tf `CNN_proj`).
    pub projection: Linear,
    /// Activation after max-pooling.
    #[module(skip)]
    pub activation: CnnActivation,
}

/// Every stage of the token encoder, for inspection and parity tests.
#[derive(Debug, Clone)]
pub struct CharCnnOutput {
    /// Concatenated activated max-pooled convolutions, `[B, T, n_filters]`.
    pub convolutions: Tensor<3>,
    /// After the highway layers, `[B, T, n_filters]`.
    pub highway: Tensor<3>,
    /// The token embedding, `[B, T, d_output]`.
    pub token_embedding: Tensor<3>,
}

impl CharCnnEncoder {
    /// Encodes character ids into token embeddings.
    ///
    /// # Shapes
    /// - char_ids: `[B, T, 50]`
    /// - output: `[B, T, d_output]`
    pub fn forward(&self, char_ids: Tensor<3, Int>) -> Tensor<3> {
        self.forward_stages(char_ids).token_embedding
    }

    /// Like [`forward`](Self::forward), keeping the intermediate stages.
    pub fn forward_stages(&self, char_ids: Tensor<3, Int>) -> CharCnnOutput {
        let [batch, n_tokens, n_slots] = char_ids.dims();
        debug_assert_eq!(n_slots, MAX_CHARS_PER_TOKEN);
        let flat = char_ids.reshape([batch * n_tokens, n_slots]);
        let chars = embedding(self.char_embedding.val(), flat);
        let pooled: Vec<Tensor<2>> = self
            .convolutions
            .iter()
            .map(|conv| {
                let x = conv.forward(chars.clone());
                match self.activation {
                    CnnActivation::Relu => relu(x),
                    CnnActivation::Tanh => tanh(x),
                }
            })
            .collect();
        let convolutions = Tensor::cat(pooled, 1);
        let highway = self
            .highways
            .iter()
            .fold(convolutions.clone(), |x, layer| layer.forward(x));
        let token_embedding = self.projection.forward(highway.clone());
        let n_filters = highway.dims()[1];
        let d_output = token_embedding.dims()[1];
        CharCnnOutput {
            convolutions: convolutions.reshape([batch, n_tokens, n_filters]),
            highway: highway.reshape([batch, n_tokens, n_filters]),
            token_embedding: token_embedding.reshape([batch, n_tokens, d_output]),
        }
    }
}
