//! The frozen biLM's layers for every sentence of a task, computed once and kept on the host:
//! the biLM never changes while a task trains, so each sentence is run through it a single time
//! (Peters et al. 2018, §3.3: the biLM weights are frozen; only the mix is learned).

use std::collections::{HashMap, HashSet};

use burn::tensor::{Device, Tensor, TensorData};
use elmo_model::{BiLm, Embedder, EmbedderConfig, LayerSelection, Pooling, TokenEmbeddingCache};

use crate::error::Result;

/// Sentences encoded per biLM call.
const BATCH_SENTENCES: usize = 32;

/// Memory for the token embeddings of words already encoded (the char CNN runs once per word
/// while it stays in the cache).
const TOKEN_CACHE_BYTES: usize = 64 << 20;

/// biLM layers (`L + 1` tensors of `[fwd; bwd]`, sentence boundaries removed) per sentence.
#[derive(Debug)]
pub struct BiLmFeatures {
    /// Layers per token (`L + 1`).
    pub n_layers: usize,
    /// Width of each layer (`2P`).
    pub d_layer: usize,
    sentences: HashMap<Vec<String>, Vec<f32>>,
    embedder: Embedder,
}

impl BiLmFeatures {
    /// An empty cache for `bilm`, which runs on `device`.
    pub fn new(bilm: &BiLm, device: &Device) -> Result<Self> {
        let embedder = EmbedderConfig {
            layers: LayerSelection::All,
            pooling: Pooling::Tokens,
            stateful: false,
            batch_size: BATCH_SENTENCES,
            token_cache_bytes: TOKEN_CACHE_BYTES,
            ..EmbedderConfig::default()
        }
        .init(bilm.clone(), device)?;
        Ok(Self {
            n_layers: embedder.n_layers(),
            d_layer: embedder.d_output(),
            sentences: HashMap::new(),
            embedder,
        })
    }

    /// The token embeddings kept between biLM calls.
    pub fn token_cache(&self) -> Option<&TokenEmbeddingCache> {
        self.embedder.token_cache()
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
    /// `on_sentence()` is called once per sentence encoded.
    pub fn add<'a>(
        &mut self,
        sentences: impl IntoIterator<Item = &'a [String]>,
        mut on_sentence: impl FnMut(),
    ) -> Result<()> {
        let mut seen = HashSet::new();
        let missing: Vec<&[String]> = sentences
            .into_iter()
            .filter(|s| !self.sentences.contains_key(*s) && seen.insert(*s))
            .collect();
        let cached = &mut self.sentences;
        self.embedder.embed_each(&missing, |i, vectors| {
            // `[L + 1, n, 2P]`, layer by layer: the layout `batch` reads.
            cached.insert(missing[i].to_vec(), vectors.values);
            on_sentence();
            Ok(())
        })
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
