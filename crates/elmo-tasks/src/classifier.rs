//! Sentence classifier (sentiment): sentence encoder → max + mean pooling → a tanh hidden layer
//! → class scores (a light BCN-like head, Peters et al. 2018 §5.1 "SST-5").

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::{Device, Tensor};

use crate::encoder::{SentenceBatch, SentenceEncoder, SentenceEncoderConfig};
use crate::pooling::{argmax_rows, cross_entropy, max_mean_pool};

/// Encoder + pooling + MLP.
#[derive(Module, Debug)]
pub struct Classifier {
    /// Sentence encoder.
    pub encoder: SentenceEncoder,
    /// Hidden layer over the pooled vector.
    pub hidden: Linear,
    /// Class scores.
    pub output: Linear,
    /// Dropout on the pooled vector.
    pub dropout: Dropout,
}

impl Classifier {
    /// A classifier over `n_classes` classes.
    pub fn init(config: &SentenceEncoderConfig, n_classes: usize, device: &Device) -> Self {
        let encoder = config.init(device);
        Self {
            hidden: LinearConfig::new(2 * encoder.d_output, config.d_hidden).init(device),
            output: LinearConfig::new(config.d_hidden, n_classes).init(device),
            dropout: DropoutConfig::new(config.dropout).init(),
            encoder,
        }
    }

    fn logits(&self, batch: &SentenceBatch) -> Tensor<2> {
        let pooled = max_mean_pool(self.encoder.forward(batch), &batch.lengths);
        let hidden = self.hidden.forward(self.dropout.forward(pooled)).tanh();
        self.output.forward(self.dropout.forward(hidden))
    }

    /// Mean cross-entropy.
    pub fn loss(&self, batch: &SentenceBatch, labels: &[usize]) -> Tensor<1> {
        cross_entropy(self.logits(batch), labels)
    }

    /// The predicted class of every sentence.
    pub fn predict(&self, batch: &SentenceBatch) -> Vec<usize> {
        argmax_rows(self.logits(batch))
    }
}
