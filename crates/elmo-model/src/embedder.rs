//! ELMo vectors of many sentences, on the host (AllenNLP's `ElmoEmbedder` and `allennlp elmo`
//! command, allennlp/commands/elmo.py): batching by length, stateless or stateful runs, the token
//! cache, and all / top / average layers per sentence. The one embedder of `elmo embed`, the
//! task feature pass (elmo-tasks) and library callers.

use burn::tensor::{Device, Tensor, TensorData};

use crate::bilm::BiLm;
use crate::bilm_state::BiLmState;
use crate::char_ids::CharIdBatch;
use crate::error::{ElmoError, Result};
use crate::token_cache::TokenEmbeddingCache;

/// Which biLM layers an [`Embedder`] returns per sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LayerSelection {
    /// All `L + 1` layers (the token layer first): shape `[L + 1, n, 2P]`.
    #[default]
    All,
    /// The top LSTM layer: `[n, 2P]`.
    Top,
    /// The average of all `L + 1` layers: `[n, 2P]`.
    Average,
}

/// Settings of an [`Embedder`].
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedderConfig {
    /// Layers returned per sentence.
    pub layers: LayerSelection,
    /// Carry the LSTM state from batch to batch, row by row, in input order (AllenNLP's
    /// `ElmoEmbedder`). Otherwise every sentence starts from a zero state, so its vectors do not
    /// depend on its neighbours or the batch size, and sentences are batched by length.
    pub stateful: bool,
    /// Sentences per biLM call.
    pub batch_size: usize,
    /// Stateless: at most this many padded positions (rows × (longest + 2)) per call, so that a
    /// few very long sentences do not make a huge batch.
    pub max_batch_positions: usize,
    /// Memory for the token embeddings of words already seen, in bytes (0: none). The char CNN
    /// is context-free, so the vectors are the same either way.
    pub token_cache_bytes: usize,
}

impl Default for EmbedderConfig {
    fn default() -> Self {
        Self {
            layers: LayerSelection::All,
            stateful: false,
            batch_size: 64,
            max_batch_positions: 8192,
            token_cache_bytes: 64 << 20,
        }
    }
}

/// A batch launched on the device ([`Embedder::launch_batch`]).
struct LaunchedBatch {
    /// Each sentence's tokens.
    lengths: Vec<usize>,
    /// Positions per row (the longest sentence and its two boundaries).
    n_positions: usize,
    /// Its layers `[L + 1, B, T + 2, 2P]`, on their way to the host on a GPU.
    layers: TensorData,
}

/// The vectors of one sentence.
///
/// # Shapes
/// `shape` is `[L + 1, n, 2P]` for [`LayerSelection::All`], else `[n, 2P]`; `values` is that
/// array in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceVectors {
    /// The values, row-major.
    pub values: Vec<f32>,
    /// Their shape.
    pub shape: Vec<usize>,
}

/// A biLM that embeds sentences (inference only: its vectors carry no gradient).
#[derive(Debug)]
pub struct Embedder {
    bilm: BiLm,
    device: Device,
    config: EmbedderConfig,
    /// Stateful: the carried state (`None` before the first batch).
    state: Option<BiLmState>,
    cache: Option<TokenEmbeddingCache>,
}

impl EmbedderConfig {
    /// An embedder running `bilm` on `device`.
    pub fn init(&self, bilm: BiLm, device: &Device) -> Result<Embedder> {
        if self.batch_size == 0 {
            return Err(ElmoError::InvalidInput(
                "the embedder's batch size must be positive".into(),
            ));
        }
        let cache =
            TokenEmbeddingCache::with_memory(self.token_cache_bytes, bilm.token_encoder.d_output());
        Ok(Embedder {
            bilm,
            device: device.clone(),
            config: self.clone(),
            state: None,
            cache,
        })
    }
}

impl Embedder {
    /// The biLM.
    pub fn bilm(&self) -> &BiLm {
        &self.bilm
    }

    /// The settings.
    pub fn config(&self) -> &EmbedderConfig {
        &self.config
    }

    /// The token cache (hit counts, size), when there is one.
    pub fn token_cache(&self) -> Option<&TokenEmbeddingCache> {
        self.cache.as_ref()
    }

    /// Layers per token (`L + 1`).
    pub fn n_layers(&self) -> usize {
        self.bilm.n_layers() + 1
    }

    /// Width of a vector (`2P`).
    pub fn d_output(&self) -> usize {
        2 * self
            .bilm
            .forward_layers
            .first()
            .map_or(0, |l| l.d_projection())
    }

    /// Forgets the carried state (stateful mode): the next batch starts from zero.
    pub fn reset_state(&mut self) {
        self.state = None;
    }

    /// The vectors of `sentences` (token lists), in input order.
    pub fn embed<T: AsRef<[S]>, S: AsRef<str>>(
        &mut self,
        sentences: &[T],
    ) -> Result<Vec<SentenceVectors>> {
        let mut out: Vec<Option<SentenceVectors>> = vec![None; sentences.len()];
        self.embed_each(sentences, |index, vectors| {
            out[index] = Some(vectors);
            Ok::<_, ElmoError>(())
        })?;
        Ok(out.into_iter().flatten().collect())
    }

    /// Embeds `sentences` and hands each sentence's vectors to `sink` with its index in
    /// `sentences`, batch by batch (stateless: longest first; stateful: in input order), so that
    /// a caller can write or keep them as they come.
    pub fn embed_each<T: AsRef<[S]>, S: AsRef<str>, E: From<ElmoError>>(
        &mut self,
        sentences: &[T],
        mut sink: impl FnMut(usize, SentenceVectors) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let len = |i: usize| sentences[i].as_ref().len();
        let mut order: Vec<usize> = (0..sentences.len()).collect();
        let batches = if self.config.stateful {
            order
                .chunks(self.config.batch_size)
                .map(<[usize]>::to_vec)
                .collect()
        } else {
            // Empty sentences need no model run; the rest is sorted by length to cut padding,
            // longest first: the order the LSTM computes in, so it need not reorder each batch.
            for &i in order.iter().filter(|&&i| len(i) == 0) {
                sink(i, self.empty())?;
            }
            order.retain(|&i| len(i) > 0);
            order.sort_by_key(|&i| std::cmp::Reverse(len(i)));
            self.length_batches(&order, len)
        };
        // One batch in flight: batch k+1 is launched on the device before batch k's layers are
        // copied to the host and cut, so that on a GPU the host's copying overlaps the next
        // batch's computation (on a CPU the layers are on the host when launched).
        // After the last batch, `None` launches nothing and finishes the one in flight.
        let mut in_flight: Option<(Vec<usize>, LaunchedBatch)> = None;
        for batch in batches.into_iter().map(Some).chain([None]) {
            let launched = match batch {
                Some(batch) => {
                    let rows: Vec<&[S]> = batch.iter().map(|&i| sentences[i].as_ref()).collect();
                    Some((batch, self.launch_batch(&rows)?))
                }
                None => None,
            };
            if let Some((indices, previous)) = std::mem::replace(&mut in_flight, launched) {
                for (&i, vectors) in indices.iter().zip(self.finish_batch(previous)?) {
                    sink(i, vectors)?;
                }
            }
        }
        Ok(())
    }

    /// Batches of at most `batch_size` rows that also stop before `rows × (longest + 2)` would
    /// pass `max_batch_positions`, or the positions whose layers fill one read-back buffer
    /// (`KernelSettings::rows_per_buffer`) (`order` sorted longest first).
    fn length_batches(&self, order: &[usize], len: impl Fn(usize) -> usize) -> Vec<Vec<usize>> {
        let encoder = &self.bilm.token_encoder;
        let read_back = (encoder.kernels).rows_per_buffer(
            &encoder.char_embedding.val(),
            self.n_layers() * self.d_output() * 4,
        );
        let batch_size = self.config.batch_size;
        let max_positions = self.config.max_batch_positions.min(read_back);
        let mut out = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let mut end = start + 1;
            let mut longest = len(order[start]);
            while end < order.len()
                && end - start < batch_size
                && (end - start + 1) * (longest.max(len(order[end])) + 2) <= max_positions
            {
                longest = longest.max(len(order[end]));
                end += 1;
            }
            out.push(order[start..end].to_vec());
            start = end;
        }
        out
    }

    /// The vectors of a sentence without tokens.
    fn empty(&self) -> SentenceVectors {
        let shape = match self.config.layers {
            LayerSelection::All => vec![self.n_layers(), 0, self.d_output()],
            _ => vec![0, self.d_output()],
        };
        SentenceVectors {
            values: Vec::new(),
            shape,
        }
    }

    /// One biLM call over `rows`, launched: its layers stacked as one tensor whose read-back
    /// is under way ([`Self::finish_batch`] cuts it per sentence).
    fn launch_batch<S: AsRef<str>>(&mut self, rows: &[&[S]]) -> Result<LaunchedBatch> {
        let ids = CharIdBatch::from_sentences(rows);
        let state = self.config.stateful.then_some(&mut self.state);
        let out = self
            .bilm
            .forward_batch_cached(&ids, &self.device, state, self.cache.as_mut())?;
        // One read-back of all layers: [L + 1, B, T + 2, 2P].
        let stacked: Tensor<4> = Tensor::stack(out.layers, 0);
        let layers = stacked
            .try_into_data()
            .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?;
        Ok(LaunchedBatch {
            lengths: rows.iter().map(|row| row.len()).collect(),
            n_positions: ids.n_tokens + 2,
            layers,
        })
    }

    /// The vectors of a launched batch's sentences, in its row order (waits for its layers).
    fn finish_batch(&self, batch: LaunchedBatch) -> Result<Vec<SentenceVectors>> {
        let LaunchedBatch {
            lengths,
            n_positions,
            layers,
        } = batch;
        let (d, n_layers) = (self.d_output(), self.n_layers());
        let host: &[f32] = layers
            .as_slice::<f32>()
            .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?;
        let per_layer = lengths.len() * n_positions * d;
        let vectors = lengths.iter().enumerate().map(|(row, &n)| {
            if n == 0 {
                return self.empty();
            }
            // Skip the <S> position: real tokens sit at 1..=n.
            let layer = |layer: usize| {
                let start = layer * per_layer + (row * n_positions + 1) * d;
                &host[start..start + n * d]
            };
            match self.config.layers {
                LayerSelection::All => {
                    let mut values = Vec::with_capacity(n_layers * n * d);
                    for l in 0..n_layers {
                        values.extend_from_slice(layer(l));
                    }
                    SentenceVectors {
                        values,
                        shape: vec![n_layers, n, d],
                    }
                }
                LayerSelection::Top => SentenceVectors {
                    values: layer(n_layers - 1).to_vec(),
                    shape: vec![n, d],
                },
                LayerSelection::Average => {
                    let mut sum = vec![0.0f32; n * d];
                    for l in 0..n_layers {
                        for (s, v) in sum.iter_mut().zip(layer(l)) {
                            *s += v;
                        }
                    }
                    let scale = 1.0 / n_layers as f32;
                    sum.iter_mut().for_each(|s| *s *= scale);
                    SentenceVectors {
                        values: sum,
                        shape: vec![n, d],
                    }
                }
            }
        });
        Ok(vectors.collect())
    }
}
