//! Full-softmax perplexity of a trained biLM on held-out text, per direction and averaged.
//!
//! The data is read once, in file order, batched as in training (stateful: the LSTM state carries
//! through the whole file; the last batch is padded), so every target (each word and each `</S>`)
//! is predicted exactly once per direction.

use std::path::PathBuf;
use std::sync::Arc;

use burn::tensor::Device;

use crate::batcher::{BatchShape, Batcher};
use crate::error::Result;
use crate::language_model::{BiLanguageModel, CarriedState, SoftmaxMode};
use crate::vocabulary::Vocabulary;

/// Perplexities of both directions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// Forward LM: `exp(NLL per target)`.
    pub forward: f64,
    /// Backward LM.
    pub backward: f64,
    /// `exp` of the mean of the two directions' NLL per target (the training objective).
    pub average: f64,
    /// Targets per direction (words + `</S>`).
    pub n_targets: u64,
}

impl std::fmt::Display for Perplexity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "forward perplexity {:.2} backward perplexity {:.2} average perplexity {:.2}",
            self.forward, self.backward, self.average
        )
    }
}

/// `exp(nll / n)`: the perplexity of a summed NLL over `n` targets (1 when there are none).
pub fn perplexity(nll: f64, n: u64) -> f64 {
    (nll / n.max(1) as f64).exp()
}

/// Evaluates `model` (on a device without autodiff: no dropout) over `files`.
/// `on_batch(targets)` is called after every batch (progress).
///
/// # Errors
/// A `shape` that [`BatchShape::validate`] refuses, the corpus' errors, and text without a
/// sentence.
pub fn evaluate(
    model: &BiLanguageModel,
    files: Vec<PathBuf>,
    tokenize: bool,
    vocab: Arc<Vocabulary>,
    shape: BatchShape,
    device: &Device,
    mut on_batch: impl FnMut(u64),
) -> Result<Perplexity> {
    shape.validate()?;
    let names = crate::corpus::display_paths(&files);
    let mut batcher = Batcher::new(files, tokenize, vocab, shape, None);
    let mut state: Option<CarriedState> = None;
    let (mut nll_f, mut nll_b, mut n_f, mut n_b) = (0.0f64, 0.0f64, 0u64, 0u64);
    while let Some(batch) = batcher.next_batch()? {
        let step = model.loss(&batch, state.take(), SoftmaxMode::Full, None, device);
        state = step.state;
        nll_f += f64::from(step.loss.forward_nll.into_scalar::<f32>());
        nll_b += f64::from(step.loss.backward_nll.into_scalar::<f32>());
        n_f += step.loss.n_forward as u64;
        n_b += step.loss.n_backward as u64;
        on_batch((step.loss.n_forward + step.loss.n_backward) as u64);
    }
    if n_f == 0 {
        return Err(crate::error::TrainError::Corpus(format!(
            "{names}: no sentence to evaluate on"
        )));
    }
    let (f, b) = (nll_f / n_f.max(1) as f64, nll_b / n_b.max(1) as f64);
    Ok(Perplexity {
        forward: f.exp(),
        backward: b.exp(),
        average: ((f + b) / 2.0).exp(),
        n_targets: n_f,
    })
}
