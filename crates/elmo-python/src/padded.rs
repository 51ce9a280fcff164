//! `batch_to_embeddings`' arrays: a batch's vectors padded to its longest sentence, with the
//! mask of its real tokens, in the layout of AllenNLP's `ElmoEmbedder.batch_to_embeddings`
//! (allennlp/commands/elmo.py, boundaries removed by `remove_sentence_boundaries`).

use elmo_model::SentenceVectors;

/// A batch's vectors, padded.
///
/// # Shapes
/// - activations: `[B, L + 1, T, D]` row-major, zeros at padded positions (`T` the longest
///   sentence's tokens)
/// - mask: `[B, T]`, `true` at real tokens
#[derive(Debug)]
pub struct PaddedBatch {
    /// The vectors, `activations_shape` row-major.
    pub activations: Vec<f32>,
    /// `[B, L + 1, T, D]`.
    pub activations_shape: [usize; 4],
    /// Real tokens, `[B, T]` row-major.
    pub mask: Vec<bool>,
}

impl PaddedBatch {
    /// Pads `sentences` (each `[L + 1, n, D]`, as an all-layers embedder gives them) to the
    /// longest one; `n_layers` and `dim` give the shape of an empty batch.
    pub fn new(sentences: &[SentenceVectors], n_layers: usize, dim: usize) -> Self {
        let longest = (sentences.iter()).map(|v| v.shape[1]).max().unwrap_or(0);
        let shape = [sentences.len(), n_layers, longest, dim];
        let mut activations = vec![0.0; shape.iter().product()];
        let mut mask = vec![false; sentences.len() * longest];
        for (row, vectors) in sentences.iter().enumerate() {
            let n = vectors.shape[1];
            debug_assert_eq!(vectors.shape, [n_layers, n, dim]);
            for layer in 0..n_layers {
                let from = &vectors.values[layer * n * dim..(layer + 1) * n * dim];
                let start = (row * n_layers + layer) * longest * dim;
                activations[start..start + n * dim].copy_from_slice(from);
            }
            mask[row * longest..row * longest + n].fill(true);
        }
        Self {
            activations,
            activations_shape: shape,
            mask,
        }
    }
}
