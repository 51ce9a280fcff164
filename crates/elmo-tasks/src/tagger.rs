//! Sequence tagger (POS, NER): sentence encoder → linear tag scores → CRF (Peters et al. 2018
//! §5.1, after Lample et al. 2016 / Peters et al. 2017).

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};

use crate::crf::{Crf, CrfConfig};
use crate::encoder::{SentenceBatch, SentenceEncoder, SentenceEncoderConfig};

/// Encoder + tag scores + CRF.
#[derive(Module, Debug)]
pub struct Tagger {
    /// Sentence encoder.
    pub encoder: SentenceEncoder,
    /// Tag scores per token.
    pub scores: Linear,
    /// Tag transitions.
    pub crf: Crf,
}

impl Tagger {
    /// A tagger over `n_tags` tags.
    pub fn init(encoder: &SentenceEncoderConfig, n_tags: usize, device: &Device) -> Self {
        let encoder = encoder.init(device);
        Self {
            scores: LinearConfig::new(encoder.d_output, n_tags).init(device),
            encoder,
            crf: CrfConfig { n_tags }.init(device),
        }
    }

    fn emissions(&self, batch: &SentenceBatch) -> Tensor<3> {
        self.scores.forward(self.encoder.forward(batch))
    }

    /// Mean CRF negative log-likelihood per sentence.
    pub fn loss(&self, batch: &SentenceBatch, tags: &[Vec<usize>]) -> Tensor<1> {
        self.crf
            .nll(self.emissions(batch), tags, &batch.lengths)
            .div_scalar(tags.len().max(1) as f64)
    }

    /// Viterbi tags of every sentence.
    pub fn predict(&self, batch: &SentenceBatch) -> Vec<Vec<usize>> {
        self.crf.viterbi(self.emissions(batch), &batch.lengths)
    }
}
