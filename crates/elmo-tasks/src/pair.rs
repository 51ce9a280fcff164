//! Sentence-pair classifier, ESIM-like (Chen et al. 2017, the SNLI model of Peters et al. 2018
//! §5.1): encode both sentences, soft-align each token with the other sentence, compose
//! `[a; ã; a − ã; a ⊙ ã]` with a second BiLSTM, pool, classify.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::activation::{relu, softmax};
use burn::tensor::{Device, Tensor};
use elmo_model::bilm::mask_from_lengths;

use crate::bilstm::{BiLstmLayer, BiLstmLayerConfig};
use crate::encoder::{SentenceBatch, SentenceEncoder, SentenceEncoderConfig};
use crate::pooling::{argmax_rows, cross_entropy, max_mean_pool};

/// Encoder + alignment + composition + MLP.
#[derive(Module, Debug)]
pub struct PairClassifier {
    /// Sentence encoder (shared by both sentences).
    pub encoder: SentenceEncoder,
    /// Projection of the enhanced local representation.
    pub projection: Linear,
    /// Composition BiLSTM.
    pub compose: BiLstmLayer,
    /// Hidden layer over both pooled vectors.
    pub hidden: Linear,
    /// Class scores.
    pub output: Linear,
    /// Dropout.
    pub dropout: Dropout,
}

/// `softmax(scores)` over the last axis where `lengths` allow, times `values`.
///
/// # Shapes
/// - scores: `[B, Ta, Tb]`, values: `[B, Tb, D]`, lengths: of the `Tb` side
/// - output: `[B, Ta, D]`
fn attend(scores: Tensor<3>, values: Tensor<3>, lengths: &[usize]) -> Tensor<3> {
    let [batch, n_a, n_b] = scores.dims();
    let padded = mask_from_lengths(lengths, n_b, &scores.device())
        .bool_not()
        .unsqueeze_dim::<3>(1)
        .expand([batch, n_a, n_b]);
    softmax(scores.mask_fill(padded, -1e9), 2).matmul(values)
}

impl PairClassifier {
    /// A pair classifier over `n_classes` classes.
    pub fn init(config: &SentenceEncoderConfig, n_classes: usize, device: &Device) -> Self {
        let encoder = config.init(device);
        let h = config.d_hidden;
        Self {
            projection: LinearConfig::new(4 * encoder.d_output, h).init(device),
            compose: BiLstmLayerConfig {
                d_input: h,
                d_hidden: h,
            }
            .init(device),
            hidden: LinearConfig::new(8 * h, h).init(device),
            output: LinearConfig::new(h, n_classes).init(device),
            dropout: DropoutConfig::new(config.dropout).init(),
            encoder,
        }
    }

    fn compose_side(&self, own: Tensor<3>, aligned: Tensor<3>, lengths: &[usize]) -> Tensor<2> {
        let enhanced = Tensor::cat(
            vec![
                own.clone(),
                aligned.clone(),
                own.clone() - aligned.clone(),
                own * aligned,
            ],
            2,
        );
        let projected = relu(self.projection.forward(self.dropout.forward(enhanced)));
        max_mean_pool(self.compose.forward(projected, lengths), lengths)
    }

    fn logits(&self, first: &SentenceBatch, second: &SentenceBatch) -> Tensor<2> {
        let a = self.encoder.forward(first);
        let b = self.encoder.forward(second);
        let scores = a.clone().matmul(b.clone().swap_dims(1, 2));
        let a_aligned = attend(scores.clone(), b.clone(), &second.lengths);
        let b_aligned = attend(scores.swap_dims(1, 2), a.clone(), &first.lengths);
        let pooled = Tensor::cat(
            vec![
                self.compose_side(a, a_aligned, &first.lengths),
                self.compose_side(b, b_aligned, &second.lengths),
            ],
            1,
        );
        let hidden = self.hidden.forward(self.dropout.forward(pooled)).tanh();
        self.output.forward(self.dropout.forward(hidden))
    }

    /// Mean cross-entropy.
    pub fn loss(
        &self,
        first: &SentenceBatch,
        second: &SentenceBatch,
        labels: &[usize],
    ) -> Tensor<1> {
        cross_entropy(self.logits(first, second), labels)
    }

    /// The predicted class of every pair.
    pub fn predict(&self, first: &SentenceBatch, second: &SentenceBatch) -> Vec<usize> {
        argmax_rows(self.logits(first, second))
    }
}
