//! ELMo vectors of many sentences, on the host (AllenNLP's `ElmoEmbedder` and `allennlp elmo`
//! command, allennlp/commands/elmo.py): batching by length, stateless or stateful runs, the token
//! cache, all / top / average layers per sentence, each token's vectors or their mean (TF Hub
//! ELMo's `default` output pools this way). The one embedder of `elmo embed`, the task feature
//! pass (elmo-tasks) and library callers.

use burn::tensor::{Device, Int, Tensor, TensorData};

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

/// Whether an [`Embedder`] hands out each token's vectors or one vector per sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// Each token's vectors: `[L + 1, n, 2P]` (all layers) or `[n, 2P]`.
    #[default]
    Tokens,
    /// The mean of the sentence's token vectors, layer by layer: `[L + 1, 2P]` (all layers) or
    /// `[2P]`; zeros for a sentence without tokens (as AllenNLP's `masked_mean`). TF Hub ELMo's
    /// `default` output is this mean of its mix of the layers.
    Mean,
}

/// Settings of an [`Embedder`].
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedderConfig {
    /// Layers returned per sentence.
    pub layers: LayerSelection,
    /// Each token's vectors or their mean.
    pub pooling: Pooling,
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
            pooling: Pooling::Tokens,
            stateful: false,
            batch_size: 64,
            max_batch_positions: 8192,
            token_cache_bytes: 64 << 20,
        }
    }
}

/// What a biLM's output always holds (its layers start with the token layer).
const TOKEN_LAYER: &str = "a biLM's output holds its token layer";

/// A batch launched on the device ([`Embedder::launch_batch`]).
struct LaunchedBatch {
    /// Each sentence's tokens.
    lengths: Vec<usize>,
    /// The sentences' vectors one after another, each in its [`SentenceVectors`] shape (no
    /// padding, no boundary positions), on their way to the host on a GPU.
    packed: TensorData,
}

/// The vectors of one sentence.
///
/// # Shapes
/// `shape` is `[L + 1, n, 2P]` for [`LayerSelection::All`], else `[n, 2P]`, without the token
/// axis `n` for [`Pooling::Mean`]; `values` is that array in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceVectors {
    /// The values, row-major.
    pub values: Vec<f32>,
    /// Their shape.
    pub shape: Vec<usize>,
}

/// The vectors of one sentence, borrowed from its batch's host buffer
/// ([`Embedder::embed_each_view`]): a sink that writes them out needs no copy of its own.
///
/// # Shapes
/// As [`SentenceVectors`]: `[L + 1, n, 2P]` for [`LayerSelection::All`], else `[n, 2P]`, without
/// `n` for [`Pooling::Mean`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SentenceView<'a> {
    values: &'a [f32],
    dims: [usize; 3],
    rank: usize,
}

impl<'a> SentenceView<'a> {
    /// The values, row-major.
    pub fn values(&self) -> &'a [f32] {
        self.values
    }

    /// Their shape.
    pub fn shape(&self) -> &[usize] {
        &self.dims[..self.rank]
    }

    /// An owned copy.
    pub fn to_vectors(&self) -> SentenceVectors {
        SentenceVectors {
            values: self.values.to_vec(),
            shape: self.shape().to_vec(),
        }
    }
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

    /// Takes the carried state out (stateful mode; `None` before the first batch): the next
    /// batch starts from zero unless [`Self::set_state`] puts one back. For handing the state
    /// to another embedder of the same biLM (a stateful run continued by other means).
    pub fn take_state(&mut self) -> Option<BiLmState> {
        self.state.take()
    }

    /// Carries `state` into the next batch (stateful mode), as [`Self::take_state`] gave it.
    ///
    /// # Errors
    /// [`ElmoError::InvalidInput`] where `state` is not of this biLM's shape (its layers, cell
    /// and projection widths; both directions the same rows); the carried state is then left
    /// as it was.
    pub fn set_state(&mut self, state: Option<BiLmState>) -> Result<()> {
        if let Some(state) = &state {
            self.check_state(state)?;
        }
        self.state = state;
        Ok(())
    }

    fn check_state(&self, state: &BiLmState) -> Result<()> {
        let layers = &self.bilm.forward_layers;
        if state.layers.len() != layers.len() {
            return Err(ElmoError::InvalidInput(format!(
                "a carried state of {} LSTM layers for a biLM of {}",
                state.layers.len(),
                layers.len()
            )));
        }
        let rows = state.layers.first().map(|l| l.forward.hidden.dims()[0]);
        for (index, (layer, lstm)) in state.layers.iter().zip(layers).enumerate() {
            let want = [lstm.d_projection(), lstm.d_cell()];
            for (direction, part) in [("forward", &layer.forward), ("backward", &layer.backward)] {
                let [h, c] = [part.hidden.dims(), part.memory.dims()];
                if [h[1], c[1]] != want || Some(h[0]) != rows || Some(c[0]) != rows {
                    return Err(ElmoError::InvalidInput(format!(
                        "the carried {direction} state of LSTM layer {index} is hidden {h:?}, \
                         memory {c:?}; this biLM's is hidden [rows, {}], memory [rows, {}], \
                         with every layer and direction the same rows",
                        want[0], want[1]
                    )));
                }
            }
        }
        Ok(())
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
        self.embed_each_view(sentences, |index, view| sink(index, view.to_vectors()))
    }

    /// As [`Self::embed_each`], handing `sink` each sentence's vectors borrowed from its
    /// batch's host buffer (one read-back per batch, no copy per sentence).
    pub fn embed_each_view<T: AsRef<[S]>, S: AsRef<str>, E: From<ElmoError>>(
        &mut self,
        sentences: &[T],
        mut sink: impl FnMut(usize, SentenceView<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let len = |i: usize| sentences[i].as_ref().len();
        let mut order: Vec<usize> = (0..sentences.len()).collect();
        let mut pooled = Vec::new();
        let batches = if self.config.stateful {
            order
                .chunks(self.config.batch_size)
                .map(<[usize]>::to_vec)
                .collect()
        } else {
            // Empty sentences need no model run; the rest is sorted by length to cut padding,
            // longest first: the order the LSTM computes in, so it need not reorder each batch.
            for &i in order.iter().filter(|&&i| len(i) == 0) {
                sink(i, self.view(&[], 0, &mut pooled))?;
            }
            order.retain(|&i| len(i) > 0);
            order.sort_by_key(|&i| std::cmp::Reverse(len(i)));
            self.length_batches(&order, len)
        };
        // One batch in flight: batch k+1 is launched on the device before batch k's vectors are
        // copied to the host, so that on a GPU the copy overlaps the next batch's computation
        // (on a CPU the vectors are on the host when launched).
        // After the last batch, `None` launches nothing and finishes the one in flight.
        let mut in_flight: Option<(Vec<usize>, LaunchedBatch)> = None;
        for batch in batches.into_iter().map(Some).chain([None]) {
            // Stateful, a batch of one empty sentence is answered without running the biLM, so
            // the carried state stays as it was: AllenNLP's `ElmoEmbedder.embed_batch` (and with
            // it `embed_sentence` and its `elmo` command) does so for `[[]]`.
            if let Some(&[i]) = batch.as_deref()
                && len(i) == 0
            {
                if let Some((indices, previous)) = in_flight.take() {
                    self.finish_batch(previous, &indices, &mut sink)?;
                }
                sink(i, self.view(&[], 0, &mut pooled))?;
                continue;
            }
            let launched = match batch {
                Some(batch) => {
                    let rows: Vec<&[S]> = batch.iter().map(|&i| sentences[i].as_ref()).collect();
                    Some((batch, self.launch_batch(&rows)?))
                }
                None => None,
            };
            if let Some((indices, previous)) = std::mem::replace(&mut in_flight, launched) {
                self.finish_batch(previous, &indices, &mut sink)?;
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

    /// A view of a sentence's `n` tokens' `values` (each selected layer's `n` vectors, layer
    /// after layer), in the shape of the layer selection; with [`Pooling::Mean`] their mean,
    /// computed into `pooled`.
    fn view<'a>(&self, values: &'a [f32], n: usize, pooled: &'a mut Vec<f32>) -> SentenceView<'a> {
        let d = self.d_output();
        let layers = match self.config.layers {
            LayerSelection::All => self.n_layers(),
            _ => 1,
        };
        let (values, dims, rank) = match (self.config.pooling, self.config.layers) {
            (Pooling::Tokens, LayerSelection::All) => (values, [layers, n, d], 3),
            (Pooling::Tokens, _) => (values, [n, d, 0], 2),
            (Pooling::Mean, selection) => {
                pooled.clear();
                pooled.resize(layers * d, 0.0);
                let mut sum = vec![0.0f64; d];
                for (layer, out) in pooled.chunks_exact_mut(d).enumerate() {
                    sum.fill(0.0);
                    for token in values[layer * n * d..(layer + 1) * n * d].chunks_exact(d) {
                        for (s, &v) in sum.iter_mut().zip(token) {
                            *s += f64::from(v);
                        }
                    }
                    let scale = 1.0 / n.max(1) as f64;
                    for (o, s) in out.iter_mut().zip(&sum) {
                        *o = (s * scale) as f32;
                    }
                }
                match selection {
                    LayerSelection::All => (&pooled[..], [layers, d, 0], 2),
                    _ => (&pooled[..], [d, 0, 0], 1),
                }
            }
        };
        SentenceView { values, dims, rank }
    }

    /// One biLM call over `rows`, launched: the selected layers of its real tokens gathered on
    /// the device into one tensor, sentence after sentence, whose read-back is under way
    /// ([`Self::finish_batch`] hands out its slices).
    fn launch_batch<S: AsRef<str>>(&mut self, rows: &[&[S]]) -> Result<LaunchedBatch> {
        let ids = CharIdBatch::from_sentences(rows);
        let state = self.config.stateful.then_some(&mut self.state);
        let out = self
            .bilm
            .forward_batch_cached(&ids, &self.device, state, self.cache.as_mut())?;
        let lengths: Vec<usize> = rows.iter().map(|row| row.len()).collect();
        let (d, n_layers) = (self.d_output(), self.n_layers());
        // Rows of one layer: every position of every sentence, `<S>` and `</S>` included.
        let per_layer = lengths.len() * (ids.n_tokens + 2);
        let flat = |layer: Tensor<3>| layer.reshape([per_layer, d]);
        // The rows to gather from, `[layers × B × (T + 2), 2P]`, and the layers each sentence
        // takes from them.
        let mut layers = out.layers;
        let (source, taken) = match self.config.layers {
            LayerSelection::All => (Tensor::cat(layers.into_iter().map(flat).collect(), 0), {
                (0..n_layers).collect()
            }),
            LayerSelection::Top => (flat(layers.pop().expect(TOKEN_LAYER)), vec![0]),
            LayerSelection::Average => {
                let mut layers = layers.into_iter();
                let first = layers.next().expect(TOKEN_LAYER);
                let sum = layers.fold(first, |sum, layer| sum + layer);
                (flat(sum * (1.0 / n_layers as f32)), vec![0])
            }
        };
        // Sentence by sentence, layer by layer, its tokens (positions 1..=n; 0 is `<S>`).
        let n_rows: usize = taken.len() * lengths.iter().sum::<usize>();
        let mut index = Vec::with_capacity(n_rows);
        for (row, &n) in lengths.iter().enumerate() {
            for &layer in &taken {
                let start = layer * per_layer + row * (ids.n_tokens + 2) + 1;
                index.extend((start..start + n).map(|r| r as i64));
            }
        }
        let packed = if n_rows == 0 {
            TensorData::new(Vec::<f32>::new(), [0, d])
        } else {
            let index = Tensor::<1, Int>::from_data(TensorData::new(index, [n_rows]), &self.device);
            source
                .select(0, index)
                .try_into_data()
                .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?
        };
        Ok(LaunchedBatch { lengths, packed })
    }

    /// Hands `sink` the vectors of a launched batch's sentences (`indices`, in its row order),
    /// waiting for them to reach the host.
    fn finish_batch<E: From<ElmoError>>(
        &self,
        batch: LaunchedBatch,
        indices: &[usize],
        sink: &mut impl FnMut(usize, SentenceView<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let host: &[f32] = batch
            .packed
            .as_slice::<f32>()
            .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?;
        let per_token = match self.config.layers {
            LayerSelection::All => self.n_layers() * self.d_output(),
            _ => self.d_output(),
        };
        let (mut start, mut pooled) = (0, Vec::new());
        for (&i, &n) in indices.iter().zip(&batch.lengths) {
            let end = start + n * per_token;
            sink(i, self.view(&host[start..end], n, &mut pooled))?;
            start = end;
        }
        Ok(())
    }
}
