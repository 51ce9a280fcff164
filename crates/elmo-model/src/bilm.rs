//! The bidirectional language model of ELMo (Peters et al. 2018, §3.1, §3.4): char-CNN token
//! encoder, separate forward and backward stacks of LSTMP layers with residual connections from
//! layer 1 on. Follows AllenNLP's `_ElmoBiLm` and `ElmoLstm` (allennlp/modules/elmo.py,
//! allennlp/modules/elmo_lstm.py).

use std::cell::RefCell;

use burn::module::{Module, Param};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

use elmo_kernels::{KernelSettings, on_cube_device};

use crate::bilm_state::{BiLmState, DirectionalState};
use crate::char_cnn::{CharCnnEncoder, CharCnnEncoderConfig, PADDING_CHAR_ID};
use crate::char_ids::{CharIdBatch, MAX_CHARS_PER_TOKEN};
use crate::convolution_record::ConvolvedChunk;
use crate::distinct_tokens::DistinctTokens;
use crate::error::{ElmoError, Result};
use crate::lstm_projection::{LstmState, LstmWithProjection, LstmWithProjectionConfig};
use crate::lstm_stack::{LayerRun, both_directions, run_stack};
use crate::options::BiLmOptions;
use crate::token_cache::TokenEmbeddingCache;

/// Configuration of a [`BiLm`]: the architecture in bilm-tf's `options.json` layout.
#[derive(Debug, Clone)]
pub struct BiLmConfig {
    /// The architecture.
    pub options: BiLmOptions,
}

/// The biLM: one token encoder, a forward and a backward LSTMP stack.
#[derive(Module, Debug)]
pub struct BiLm {
    /// Char-CNN token encoder, shared by both directions.
    pub token_encoder: CharCnnEncoder,
    /// Left-to-right stack, layer 0 first.
    pub forward_layers: Vec<LstmWithProjection>,
    /// Right-to-left stack, layer 0 first.
    pub backward_layers: Vec<LstmWithProjection>,
    /// Residual connections from layer 1 on.
    #[module(skip)]
    pub use_skip_connections: bool,
}

/// Output of the biLM: `L + 1` layers (token layer first), each `[fwd; bwd]`.
///
/// # Shapes
/// - layers: `L + 1` tensors `[B, T + 2, 2P]` (with the `<S>`/`</S>` positions); layer 0 is the
///   token embedding duplicated, zero at padded positions, as every layer.
/// - mask: `[B, T + 2]`, `true` for real tokens (boundaries included).
#[derive(Debug, Clone)]
pub struct BiLmOutput {
    /// The layer activations.
    pub layers: Vec<Tensor<3>>,
    /// `true` for real positions.
    pub mask: Tensor<2, Bool>,
    /// Number of real positions in each row (boundaries included).
    pub lengths: Vec<usize>,
}

/// Outputs of one LSTM stack run over both directions.
#[derive(Debug, Clone)]
pub struct StackOutput {
    /// Per layer, forward outputs `[B, T, P]`.
    pub forward: Vec<Tensor<3>>,
    /// Per layer, backward outputs `[B, T, P]`.
    pub backward: Vec<Tensor<3>>,
    /// Final state of every layer and direction.
    pub final_states: Vec<DirectionalState>,
}

impl BiLm {
    /// This biLM running `kernels`: its token encoder's lookup and convolution products on a
    /// CubeCL device, its LSTM layers' host loop on a CPU (every kernel on by default).
    pub fn with_kernels(mut self, kernels: KernelSettings) -> Self {
        self.token_encoder = self.token_encoder.with_kernels(kernels);
        let with = |layers: Vec<LstmWithProjection>| {
            layers
                .into_iter()
                .map(|l| l.with_kernels(kernels))
                .collect()
        };
        self.forward_layers = with(self.forward_layers);
        self.backward_layers = with(self.backward_layers);
        self
    }
}

impl BiLmConfig {
    /// Creates a biLM with random weights.
    pub fn init(&self, device: &Device) -> BiLm {
        let lstm = &self.options.lstm;
        let layer = LstmWithProjectionConfig {
            d_input: lstm.projection_dim,
            d_cell: lstm.dim,
            d_projection: lstm.projection_dim,
            cell_clip: lstm.cell_clip,
            projection_clip: lstm.proj_clip,
        };
        BiLm {
            token_encoder: CharCnnEncoderConfig::from_options(&self.options).init(device),
            forward_layers: (0..lstm.n_layers).map(|_| layer.init(device)).collect(),
            backward_layers: (0..lstm.n_layers).map(|_| layer.init(device)).collect(),
            use_skip_connections: lstm.use_skip_connections,
        }
    }
}

/// Distinct tokens encoded per call of the char CNN on the host (on a CubeCL device
/// `KernelSettings::cube_encoder_chunk_tokens`); its intermediate memory is bounded by
/// `KernelSettings::buffer_bytes` whatever the chunk.
pub const ENCODER_CHUNK_TOKENS: usize = 1024;

/// On a CubeCL device the char CNN's rows per call are a multiple of this, a chunk completed
/// with tokens of padding characters only, whose values are dropped: the distinct tokens of a
/// batch vary in number, and every new shape of a product can need a kernel compiled at run
/// time (NVRTC on CUDA: a fraction of a second each), which a training step then waits for.
pub const ENCODER_ROW_MULTIPLE: usize = 128;

/// `[B, T]` mask from lengths, `true` for real positions.
pub fn mask_from_lengths(lengths: &[usize], n_tokens: usize, device: &Device) -> Tensor<2, Bool> {
    let values: Vec<bool> = lengths
        .iter()
        .flat_map(|&l| (0..n_tokens).map(move |t| t < l))
        .collect();
    Tensor::from_data(TensorData::new(values, [lengths.len(), n_tokens]), device)
}

/// Uploads a host batch of char ids.
pub fn char_ids_tensor(batch: &CharIdBatch, device: &Device) -> Tensor<3, Int> {
    let values: Vec<i64> = batch.ids.iter().map(|&c| i64::from(c)).collect();
    Tensor::from_data(
        TensorData::new(
            values,
            [batch.n_sentences, batch.n_tokens, MAX_CHARS_PER_TOKEN],
        ),
        device,
    )
}

/// Encoded distinct tokens: `values` `[n, P]` in encoding order, `row_of[i]` the row of the
/// `i`-th token asked for.
struct EncodedTokens {
    values: Tensor<2>,
    row_of: Vec<usize>,
    /// The rows of `values` of each chunk, in order.
    chunk_rows: Vec<usize>,
}

/// The distinct tokens of a batch through the token encoder's convolutions, outside autodiff
/// ([`BiLm::convolve_tokens`]).
#[derive(Debug, Clone)]
pub struct ConvolvedTokens {
    /// `[U, n_filters]`: each distinct token's activated max-pooled convolutions.
    pub convolutions: Tensor<2>,
    /// For every position of the batch (row-major), its row of `convolutions`.
    pub rows: Vec<usize>,
    /// `[B, T]`: the batch's sentences and positions.
    pub shape: [usize; 2],
    /// Where the char embedding or a convolution trains: each chunk's pass, for their backward
    /// pass by hand ([`CharCnnEncoder::convolutions_recorded`]); empty where none does.
    pub chunks: Vec<ConvolvedChunk>,
}

impl ConvolvedTokens {
    /// Every position's row of `values` (`convolutions` carried through the rest of the
    /// encoder).
    ///
    /// # Shapes
    /// - values: `[U, d]`; output: `[B, T, d]`
    pub fn place(&self, values: Tensor<2>) -> Tensor<3> {
        let device = values.device();
        gather_rows(values, &self.rows, self.shape, &device)
    }
}

/// `[B, T]` of a host batch.
fn batch_shape(batch: &CharIdBatch) -> [usize; 2] {
    [batch.n_sentences, batch.n_tokens]
}

/// `[B, T, P]` from rows of `values`, one per position of a batch of `[B, T]` positions.
fn gather_rows(
    values: Tensor<2>,
    rows: &[usize],
    [n_sentences, n_tokens]: [usize; 2],
    device: &Device,
) -> Tensor<3> {
    let d = values.dims()[1];
    let rows: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    let n_positions = rows.len();
    let rows = Tensor::<1, Int>::from_data(TensorData::new(rows, [n_positions]), device);
    values.select(0, rows).reshape([n_sentences, n_tokens, d])
}

impl BiLm {
    /// Number of LSTM layers per direction (`L`).
    pub fn n_layers(&self) -> usize {
        self.forward_layers.len()
    }

    /// Runs the biLM over tokenised sentences, from a zero state.
    pub fn forward_sentences<S: AsRef<str>>(
        &self,
        sentences: &[Vec<S>],
        device: &Device,
    ) -> BiLmOutput {
        self.forward_batch(&CharIdBatch::from_sentences(sentences), device, None)
    }

    /// Runs the biLM over char ids `[B, T, 50]` without boundaries (as `batch_to_ids` gives them),
    /// from a zero state. Reads the ids back to find the sentence lengths.
    ///
    /// # Errors
    /// Ids outside the character vocabulary or padding before a real token, named by place
    /// ([`CharIdBatch::from_ids`]), and ids that cannot be read back.
    pub fn forward(&self, char_ids: Tensor<3, Int>) -> Result<BiLmOutput> {
        let device = char_ids.device();
        let [batch, n_tokens, n_slots] = char_ids.dims();
        if n_slots != MAX_CHARS_PER_TOKEN {
            return Err(ElmoError::InvalidInput(format!(
                "char ids have {n_slots} slots per token, expected {MAX_CHARS_PER_TOKEN}"
            )));
        }
        let ids: Vec<i64> = char_ids
            .into_data()
            .try_into_vec_as::<i64>()
            .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?;
        let batch = CharIdBatch::from_ids(&ids, batch, n_tokens)?;
        Ok(self.forward_batch(&batch, &device, None))
    }

    /// Runs the biLM over a host batch of char ids (boundaries are added here).
    ///
    /// With `state`, the LSTMs start from the carried per-row state and the state is updated
    /// (AllenNLP's stateful `_ElmoBiLm`); without, every row starts from zero.
    pub fn forward_batch(
        &self,
        batch: &CharIdBatch,
        device: &Device,
        state: Option<&mut Option<BiLmState>>,
    ) -> BiLmOutput {
        let with_boundaries = batch.with_sentence_boundaries();
        if batch.n_sentences == 0 {
            return self.no_sentences(with_boundaries.n_tokens, device);
        }
        let token_embedding = self.encode_tokens(&with_boundaries, device);
        self.forward_embedded(token_embedding, &with_boundaries.lengths, state)
    }

    /// The output of a batch without sentences (`[0, T', 2P]` layers; the state unchanged):
    /// the encoder has no token to encode.
    fn no_sentences(&self, n_tokens: usize, device: &Device) -> BiLmOutput {
        let d = 2 * (self.forward_layers.first()).map_or(0, |l| l.d_projection());
        BiLmOutput {
            layers: (0..=self.n_layers())
                .map(|_| Tensor::zeros([0, n_tokens, d], device))
                .collect(),
            mask: mask_from_lengths(&[], n_tokens, device),
            lengths: Vec::new(),
        }
    }

    /// [`forward_batch`](Self::forward_batch) with the token embeddings taken from (and added
    /// to) `cache` when there is one (inference only: see [`TokenEmbeddingCache`]); without,
    /// the same as `forward_batch`.
    pub fn forward_batch_cached(
        &self,
        batch: &CharIdBatch,
        device: &Device,
        state: Option<&mut Option<BiLmState>>,
        cache: Option<&mut TokenEmbeddingCache>,
    ) -> Result<BiLmOutput> {
        let with_boundaries = batch.with_sentence_boundaries();
        if batch.n_sentences == 0 {
            return Ok(self.no_sentences(with_boundaries.n_tokens, device));
        }
        let token_embedding = match cache {
            Some(cache) => self.encode_tokens_cached(&with_boundaries, device, cache)?,
            None => self.encode_tokens(&with_boundaries, device),
        };
        Ok(self.forward_embedded(token_embedding, &with_boundaries.lengths, state))
    }

    /// The context-free embedding of each token alone (ELMo's layer 0, one copy: the char CNN,
    /// its highways and projection), as bilm-tf's `dump_token_embeddings` gives a vocabulary's;
    /// `<S>` and `</S>` are the sentence-boundary tokens.
    ///
    /// # Shapes
    /// - output: `[tokens.len(), P]`
    pub fn token_embeddings<S: AsRef<str>>(&self, tokens: &[S], device: &Device) -> Tensor<2> {
        let alone: Vec<[&str; 1]> = tokens.iter().map(|token| [token.as_ref()]).collect();
        let encoded = self.encode_tokens(&CharIdBatch::from_sentences(&alone), device);
        let [n, _, d] = encoded.dims();
        encoded.reshape([n, d])
    }

    /// Token embeddings of a host batch, encoding each distinct token once (the encoder is
    /// context-free) and gathering the results; all padding positions share one row.
    ///
    /// # Shapes
    /// - output: `[B, T, P]` (padded positions hold the embedding of the all-zero token)
    pub fn encode_tokens(&self, batch: &CharIdBatch, device: &Device) -> Tensor<3> {
        let distinct = DistinctTokens::of(batch);
        let all: Vec<usize> = (0..distinct.len()).collect();
        let encoded = self.encode_distinct(&distinct, &all, device);
        let gather: Vec<usize> = (distinct.positions().iter())
            .map(|&u| encoded.row_of[u])
            .collect();
        gather_rows(encoded.values, &gather, batch_shape(batch), device)
    }

    /// The token encoder up to its highways over each distinct token of a host batch (found
    /// ahead by the caller: [`DistinctTokens::of`]), outside
    /// autodiff ([`CharCnnEncoder::convolutions_recorded`]), for a caller that runs the
    /// highways and the projection itself ([`CharCnnEncoder::dense_recorded`]) and
    /// differentiates all of it by hand (the training step), and places the rows with
    /// [`ConvolvedTokens::place`]: [`Self::encode_tokens`] in two parts.
    pub fn convolve_tokens(&self, distinct: &DistinctTokens, device: &Device) -> ConvolvedTokens {
        let all: Vec<usize> = (0..distinct.len()).collect();
        let encoder = &self.token_encoder;
        let trains = |param: &Param<Tensor<2>>| param.val().is_require_grad();
        let record = trains(&encoder.char_embedding)
            || (encoder.convolutions.iter())
                .any(|conv| trains(&conv.weight) || conv.bias.val().is_require_grad());
        let chunks = RefCell::new(Vec::new());
        let convolved =
            self.encode_distinct_with(distinct, &all, device, |ids, host_ids, extent| {
                let n_rows = ids.dims()[0];
                let (convolutions, records) = encoder.convolutions_recorded(ids, extent);
                if record {
                    chunks.borrow_mut().push((n_rows, host_ids, records));
                }
                convolutions
            });
        let mut start = 0;
        let chunks = (chunks.into_inner().into_iter().zip(&convolved.chunk_rows))
            .map(|((n_rows, ids, convolutions), &n_kept)| {
                let chunk = ConvolvedChunk {
                    start,
                    n_kept,
                    n_rows,
                    ids,
                    convolutions,
                };
                start += n_kept;
                chunk
            })
            .collect();
        let rows = (distinct.positions().iter())
            .map(|&u| convolved.row_of[u])
            .collect();
        ConvolvedTokens {
            convolutions: convolved.values,
            rows,
            shape: batch_shape(distinct.batch()),
            chunks,
        }
    }

    /// [`encode_tokens`](Self::encode_tokens) that takes the tokens it has seen before from
    /// `cache` and adds the others to it (inference only: the values carry no gradient).
    ///
    /// # Shapes
    /// - output: `[B, T, P]`, as [`encode_tokens`](Self::encode_tokens)
    pub fn encode_tokens_cached(
        &self,
        batch: &CharIdBatch,
        device: &Device,
        cache: &mut TokenEmbeddingCache,
    ) -> Result<Tensor<3>> {
        let d = self.token_encoder.d_output();
        if cache.d_embedding() != d {
            return Err(ElmoError::InvalidInput(format!(
                "token cache of width {} used with a model of width {d}",
                cache.d_embedding()
            )));
        }
        let distinct = DistinctTokens::of(batch);
        let mut values = vec![0.0f32; distinct.len() * d];
        let mut missing: Vec<usize> = Vec::new();
        for u in 0..distinct.len() {
            match cache.get(distinct.token(u)) {
                Some(cached) => values[u * d..(u + 1) * d].copy_from_slice(cached),
                None => missing.push(u),
            }
        }
        if !missing.is_empty() {
            let encoded = self.encode_distinct(&distinct, &missing, device);
            let host: Vec<f32> = encoded
                .values
                .try_into_data()
                .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?
                .try_into_vec_as::<f32>()
                .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?;
            for (&u, &row) in missing.iter().zip(&encoded.row_of) {
                let value = &host[row * d..(row + 1) * d];
                values[u * d..(u + 1) * d].copy_from_slice(value);
                cache.insert(distinct.token(u), value)?;
            }
        }
        let unique = Tensor::<2>::from_data(TensorData::new(values, [distinct.len(), d]), device);
        Ok(gather_rows(
            unique,
            distinct.positions(),
            batch_shape(batch),
            device,
        ))
    }

    /// Encodes distinct tokens `which` of `distinct`, sorted by extent (characters before the
    /// padding) so that a chunk of similar words only convolves the windows its longest word
    /// needs; `row_of[i]` is the row of `which[i]`.
    fn encode_distinct(
        &self,
        distinct: &DistinctTokens,
        which: &[usize],
        device: &Device,
    ) -> EncodedTokens {
        self.encode_distinct_with(distinct, which, device, |ids, _, extent| {
            let encoded = (self.token_encoder)
                .forward_stages_with_extent(ids, extent)
                .token_embedding;
            let [n_rows, _, d_output] = encoded.dims();
            encoded.reshape([n_rows, d_output])
        })
    }

    /// [`Self::encode_distinct`] with `stage` (char ids `[N, 1, 50]`, the same ids on the host
    /// and `extent`, for tokens whose last non-padding slot is before `extent` → `[N, d]`) as
    /// the encoder.
    fn encode_distinct_with(
        &self,
        distinct: &DistinctTokens,
        which: &[usize],
        device: &Device,
        stage: impl Fn(Tensor<3, Int>, Vec<i64>, usize) -> Tensor<2>,
    ) -> EncodedTokens {
        let mut order: Vec<usize> = (0..which.len()).collect();
        order.sort_by_key(|&i| distinct.extent(which[i]));
        let mut row_of = vec![0; which.len()];
        for (row, &u) in order.iter().enumerate() {
            row_of[u] = row;
        }
        // Each chunk's windows stop at its longest token; on a GPU fewer chunks launch fewer
        // kernels (`KernelSettings::cube_encoder_chunk_tokens`).
        let (chunk_tokens, row_multiple) =
            match on_cube_device(&self.token_encoder.char_embedding.val()) {
                true => (
                    self.token_encoder.kernels.cube_encoder_chunk_tokens.max(1),
                    ENCODER_ROW_MULTIPLE,
                ),
                false => (ENCODER_CHUNK_TOKENS, 1),
            };
        let pieces: Vec<Tensor<2>> = order
            .chunks(chunk_tokens)
            .map(|chunk| {
                let n = chunk.len();
                let n_rows = n.next_multiple_of(row_multiple);
                let padding = std::iter::repeat_n(i64::from(PADDING_CHAR_ID), MAX_CHARS_PER_TOKEN);
                let ids: Vec<i64> = chunk
                    .iter()
                    .flat_map(|&i| distinct.token(which[i]).iter().map(|&c| i64::from(c)))
                    .chain(std::iter::repeat_n(padding, n_rows - n).flatten())
                    .collect();
                let extent = (chunk.iter().map(|&i| distinct.extent(which[i])))
                    .max()
                    .unwrap_or(0);
                let host_ids = ids.clone();
                let ids = Tensor::<3, Int>::from_data(
                    TensorData::new(ids, [n_rows, 1, MAX_CHARS_PER_TOKEN]),
                    device,
                );
                stage(ids, host_ids, extent).narrow(0, 0, n)
            })
            .collect();
        EncodedTokens {
            values: Tensor::cat(pieces, 0),
            row_of,
            chunk_rows: order.chunks(chunk_tokens).map(<[usize]>::len).collect(),
        }
    }

    /// Runs the LSTM stacks over token embeddings that already include the boundary positions.
    ///
    /// # Shapes
    /// - token_embedding: `[B, T', P]` (`T'` includes `<S>`/`</S>`)
    /// - lengths: `B` real lengths (boundaries included)
    pub fn forward_embedded(
        &self,
        token_embedding: Tensor<3>,
        lengths: &[usize],
        state: Option<&mut Option<BiLmState>>,
    ) -> BiLmOutput {
        let device = token_embedding.device();
        let [batch, n_tokens, _] = token_embedding.dims();
        let mask = mask_from_lengths(lengths, n_tokens, &device);
        let mask_float = mask.clone().float().unsqueeze_dim::<3>(2);
        let masked_embedding = token_embedding * mask_float;

        let mut state = state;
        let initial_states = match state.as_deref_mut() {
            Some(Some(s)) => Some(s.initial_for(batch)),
            _ => None,
        };
        let stacks = self.run_stacks(masked_embedding.clone(), lengths, initial_states);

        if let Some(slot) = state {
            match slot {
                Some(s) => s.update(stacks.final_states.clone(), lengths),
                None => {
                    *slot = Some(
                        BiLmState {
                            layers: stacks.final_states.clone(),
                        }
                        .detach(),
                    )
                }
            }
        }

        let mut layers = Vec::with_capacity(self.n_layers() + 1);
        layers.push(Tensor::cat(
            vec![masked_embedding.clone(), masked_embedding],
            2,
        ));
        for (f, b) in stacks.forward.into_iter().zip(stacks.backward) {
            layers.push(Tensor::cat(vec![f, b], 2));
        }
        BiLmOutput {
            layers,
            mask,
            lengths: lengths.to_vec(),
        }
    }

    /// Runs both LSTM stacks (no masking of the input is done here: pass zero at padded positions),
    /// the two directions side by side ([`both_directions`]).
    ///
    /// # Shapes
    /// - inputs: `[B, T, P]`
    pub fn run_stacks(
        &self,
        inputs: Tensor<3>,
        lengths: &[usize],
        initial_states: Option<Vec<DirectionalState>>,
    ) -> StackOutput {
        let (forward_starts, backward_starts) = match initial_states {
            Some(states) => {
                let (f, b) = states.into_iter().map(|s| (s.forward, s.backward)).unzip();
                (Some(f), Some(b))
            }
            None => (None, None),
        };
        if let (Some(first), Some(backward)) =
            (self.forward_layers.first(), self.backward_layers.first())
            && first.fused_inference(&inputs)
            && first.kernels.paired_directions
            && first.same_shape(backward)
        {
            return self.run_stacks_paired(inputs, lengths, forward_starts, backward_starts);
        }
        let run = |layers: &[LstmWithProjection], go_forward: bool, starts: Option<Vec<_>>| {
            let mut starts = starts.map(Vec::into_iter);
            run_stack(
                layers.len(),
                self.use_skip_connections,
                inputs.clone(),
                true,
                |index, x| {
                    let start = starts.as_mut().and_then(Iterator::next);
                    let out = layers[index].forward(x.clone(), lengths, go_forward, start);
                    LayerRun {
                        input: x,
                        output: out.outputs,
                        record: out.final_state,
                    }
                },
            )
        };
        let (forward, backward) = both_directions(
            inputs.is_autodiff(),
            || run(&self.forward_layers, true, forward_starts),
            || run(&self.backward_layers, false, backward_starts),
        );
        StackOutput {
            final_states: (forward.records.into_iter().zip(backward.records))
                .map(|(forward, backward)| DirectionalState { forward, backward })
                .collect(),
            forward: forward.outputs,
            backward: backward.outputs,
        }
    }

    /// [`Self::run_stacks`] on a CubeCL device with the fused kernels: each layer's two
    /// directions as one recurrence on their rows stacked (`fused_recurrence.rs`), forward rows
    /// first.
    fn run_stacks_paired(
        &self,
        inputs: Tensor<3>,
        lengths: &[usize],
        forward_starts: Option<Vec<LstmState>>,
        backward_starts: Option<Vec<LstmState>>,
    ) -> StackOutput {
        let [batch, ..] = inputs.dims();
        let device = inputs.device();
        let mut forward_starts = forward_starts.map(Vec::into_iter);
        let mut backward_starts = backward_starts.map(Vec::into_iter);
        let stack = run_stack(
            self.n_layers(),
            self.use_skip_connections,
            Tensor::cat(vec![inputs.clone(), inputs], 0),
            true,
            |index, x| {
                let (forward, backward) =
                    (&self.forward_layers[index], &self.backward_layers[index]);
                let start = |starts: &mut Option<std::vec::IntoIter<LstmState>>,
                             layer: &LstmWithProjection| {
                    (starts.as_mut().and_then(Iterator::next))
                        .unwrap_or_else(|| layer.zero_state(batch, &device))
                };
                let initial = vec![
                    start(&mut forward_starts, forward),
                    start(&mut backward_starts, backward),
                ];
                let mut out = crate::fused_recurrence::forward_group(
                    &[forward.group_layer(), backward.group_layer()],
                    forward.kernels,
                    x.clone(),
                    lengths,
                    &[true, false],
                    initial,
                );
                let backward_state = out.final_states.pop();
                let forward_state = out.final_states.pop();
                LayerRun {
                    input: x,
                    output: out.outputs,
                    record: DirectionalState {
                        forward: forward_state.expect("the pair's forward state"),
                        backward: backward_state.expect("the pair's backward state"),
                    },
                }
            },
        );
        let half = |x: Tensor<3>, g: usize| x.narrow(0, g * batch, batch);
        StackOutput {
            forward: stack.outputs.iter().map(|x| half(x.clone(), 0)).collect(),
            backward: stack.outputs.into_iter().map(|x| half(x, 1)).collect(),
            final_states: stack.records,
        }
    }
}
