//! The frozen biLM's layers for every sentence of a task, computed once and kept on the host:
//! the biLM never changes while a task trains, so each sentence is run through it a single time
//! (Peters et al. 2018, §3.3: the biLM weights are frozen; only the mix is learned).

use std::collections::HashMap;

use burn::tensor::{Device, Tensor, TensorData};
use elmo_model::{BiLm, CharIdBatch, TokenEmbeddingCache};

use crate::error::Result;

/// Sentences encoded per biLM call.
const BATCH_SENTENCES: usize = 32;

/// Memory for the token embeddings of words already encoded (the char CNN runs once per word
/// while it stays in the cache).
const TOKEN_CACHE_BYTES: usize = 64 << 20;

/// biLM layers (`L + 1` tensors of `[fwd; bwd]`, sentence boundaries removed) per sentence.
#[derive(Debug, Default)]
pub struct BiLmFeatures {
    /// Layers per token (`L + 1`).
    pub n_layers: usize,
    /// Width of each layer (`2P`).
    pub d_layer: usize,
    sentences: HashMap<Vec<String>, Vec<f32>>,
    tokens: Option<TokenEmbeddingCache>,
}

impl BiLmFeatures {
    /// An empty cache for a biLM.
    pub fn new(bilm: &BiLm) -> Self {
        Self {
            n_layers: bilm.n_layers() + 1,
            d_layer: 2 * bilm.forward_layers.first().map_or(0, |l| l.d_projection()),
            sentences: HashMap::new(),
            tokens: TokenEmbeddingCache::with_memory(
                TOKEN_CACHE_BYTES,
                bilm.token_encoder.d_output(),
            ),
        }
    }

    /// The token embeddings kept between biLM calls (`None` for a default-built value).
    pub fn token_cache(&self) -> Option<&TokenEmbeddingCache> {
        self.tokens.as_ref()
    }

    /// Sentences cached.
    pub fn len(&self) -> usize {
        self.sentences.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.sentences.is_empty()
    }

    /// Host memory held by the cached layers, in bytes.
    pub fn n_bytes(&self) -> usize {
        self.sentences.values().map(|v| 4 * v.len()).sum()
    }

    /// Runs the biLM (from a zero state, per sentence) over every sentence not cached yet, in
    /// batches of similar length, taking the words seen before from the token cache.
    /// `on_batch(n)` is told how many sentences each call encoded.
    pub fn add<'a>(
        &mut self,
        bilm: &BiLm,
        sentences: impl IntoIterator<Item = &'a [String]>,
        device: &Device,
        mut on_batch: impl FnMut(usize),
    ) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        let mut missing: Vec<&[String]> = sentences
            .into_iter()
            .filter(|s| !self.sentences.contains_key(*s) && seen.insert(*s))
            .collect();
        // Longest first: the order in which the LSTM computes a batch.
        missing.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let (n_layers, d) = (self.n_layers, self.d_layer);
        for chunk in missing.chunks(BATCH_SENTENCES) {
            let rows: Vec<Vec<&str>> = chunk
                .iter()
                .map(|s| s.iter().map(String::as_str).collect())
                .collect();
            let ids = CharIdBatch::from_sentences(&rows);
            let output = bilm.forward_batch_cached(&ids, device, None, self.tokens.as_mut())?;
            let n_steps = output.layers[0].dims()[1];
            let layers = output
                .layers
                .into_iter()
                .map(|layer| {
                    layer
                        .into_data()
                        .try_into_vec_as::<f32>()
                        .map_err(|e| elmo_model::ElmoError::TensorData(format!("{e:?}")))
                })
                .collect::<std::result::Result<Vec<Vec<f32>>, _>>()?;
            for (row, sentence) in chunk.iter().enumerate() {
                let n = sentence.len();
                let mut values = Vec::with_capacity(n_layers * n * d);
                for layer in &layers {
                    // Position 0 is `<S>`: the tokens are at 1..=n.
                    let start = (row * n_steps + 1) * d;
                    values.extend_from_slice(&layer[start..start + n * d]);
                }
                self.sentences.insert(sentence.to_vec(), values);
            }
            on_batch(chunk.len());
        }
        Ok(())
    }

    /// The layers of a batch of cached sentences, zero-padded to the longest.
    ///
    /// # Shapes
    /// - output: `n_layers` tensors `[B, T, d_layer]` (no gradient)
    ///
    /// # Panics
    /// When a sentence was not [`add`](Self::add)ed first (a programming error).
    pub fn batch(&self, sentences: &[&[String]], device: &Device) -> Vec<Tensor<3>> {
        let batch = sentences.len();
        let n_steps = sentences.iter().map(|s| s.len()).max().unwrap_or(0);
        let d = self.d_layer;
        let mut layers = vec![vec![0.0f32; batch * n_steps * d]; self.n_layers];
        for (row, sentence) in sentences.iter().enumerate() {
            let values = self
                .sentences
                .get(*sentence)
                .expect("biLM features are computed before batching");
            let n = sentence.len();
            for (j, layer) in layers.iter_mut().enumerate() {
                let start = row * n_steps * d;
                layer[start..start + n * d].copy_from_slice(&values[j * n * d..(j + 1) * n * d]);
            }
        }
        layers
            .into_iter()
            .map(|values| Tensor::from_data(TensorData::new(values, [batch, n_steps, d]), device))
            .collect()
    }
}
