//! The bidirectional language model trained by bilm-tf (Peters et al. 2018, §3.1; bilm-tf
//! `bilm/training.py`): ONE char-CNN token encoder and ONE softmax, each a single module called
//! by both directions, and separate forward and backward LSTM stacks. The loss is the mean of the
//! forward and backward negative log-likelihoods.

use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use elmo_kernels::KernelSettings;
use elmo_model::bilm::BiLmConfig;
use elmo_model::lstm_stack::{LayerRun, both_directions, run_stack};
use elmo_model::options::BiLmOptions;
use elmo_model::{BiLm, CharIdBatch, LstmState, LstmWithProjection};

use crate::dropout::{DropoutConfig, StackDropout};
use crate::lm_batch::{LmBatch, Streams, Targets, TokenGrid};
use crate::softmax::{SampledCandidates, Softmax, SoftmaxConfig};
use crate::step_profile::StepProfile;

/// Configuration of a [`BiLanguageModel`].
#[derive(Debug, Clone)]
pub struct BiLanguageModelConfig {
    /// The biLM architecture.
    pub options: BiLmOptions,
    /// Softmax size.
    pub n_vocab: usize,
    /// Dropout in training steps.
    pub dropout: DropoutConfig,
}

impl BiLanguageModelConfig {
    /// A model with bilm-tf's initialisation (highway carry bias −2, forget bias 1,
    /// softmax N(0, 1/√P)).
    pub fn init(&self, device: &Device) -> BiLanguageModel {
        let mut bilm = BiLmConfig {
            options: self.options.clone(),
        }
        .init(device);
        let n_filters = self.options.n_filters();
        for highway in &mut bilm.token_encoder.highways {
            highway.carry.bias = Some(Param::from_tensor(Tensor::full([n_filters], -2.0, device)));
        }
        self.with_bilm(bilm, device)
    }

    /// A model around an existing biLM (fine-tuning) with a new softmax.
    pub fn with_bilm(&self, bilm: BiLm, device: &Device) -> BiLanguageModel {
        BiLanguageModel {
            bilm,
            softmax: SoftmaxConfig {
                n_vocab: self.n_vocab,
                d_input: self.options.lstm.projection_dim,
            }
            .init(device),
            dropout: self.dropout,
            kernels: KernelSettings::default(),
        }
    }
}

/// The biLM with its tied softmax.
#[derive(Module, Debug)]
pub struct BiLanguageModel {
    /// Token encoder (shared by both directions) and the two LSTM stacks.
    pub bilm: BiLm,
    /// Output softmax (shared by both directions).
    pub softmax: Softmax,
    /// Dropout on LSTM inputs, the top output and the recurrent weights (applied only when a
    /// dropout seed is given to [`loss`](Self::loss)).
    #[module(skip)]
    pub dropout: DropoutConfig,
    /// Which custom kernels a training step runs on a CubeCL device (the encoder's and the
    /// softmax's are set with it, [`Self::with_kernels`]).
    #[module(skip)]
    pub kernels: KernelSettings,
}

/// LSTM state carried between batches in the stateful mode, per layer.
#[derive(Debug, Clone)]
pub struct CarriedState {
    /// Forward stack.
    pub forward: Vec<LstmState>,
    /// Backward stack.
    pub backward: Vec<LstmState>,
}

impl CarriedState {
    /// Cuts the gradient at the batch boundary.
    pub fn detach(self) -> Self {
        let detach = |states: Vec<LstmState>| states.into_iter().map(LstmState::detach).collect();
        Self {
            forward: detach(self.forward),
            backward: detach(self.backward),
        }
    }

    /// The same state with the rows where `reset[row]` is true set to zero (both stacks, every
    /// layer).
    pub fn reset_rows(self, reset: &[bool]) -> Self {
        if !reset.contains(&true) {
            return self;
        }
        let Some(first) = self.forward.first() else {
            return self;
        };
        // One `[B, 1]` mask for every layer of both stacks.
        let keep: Vec<f32> = reset.iter().map(|&r| if r { 0.0 } else { 1.0 }).collect();
        let keep = Tensor::<2>::from_data(
            TensorData::new(keep, [reset.len(), 1]),
            &first.hidden.device(),
        );
        let zero_rows = |states: Vec<LstmState>| -> Vec<LstmState> {
            states
                .into_iter()
                .map(|state| LstmState {
                    hidden: state.hidden * keep.clone(),
                    memory: state.memory * keep.clone(),
                })
                .collect()
        };
        Self {
            forward: zero_rows(self.forward),
            backward: zero_rows(self.backward),
        }
    }
}

/// Which softmax the loss uses.
#[derive(Debug, Clone, Copy)]
pub enum SoftmaxMode<'a> {
    /// Over the whole vocabulary.
    Full,
    /// Against sampled negatives.
    Sampled(&'a SampledCandidates),
}

/// The losses of one batch.
#[derive(Debug, Clone)]
pub struct LmLoss {
    /// Mean of the two directions' mean negative log-likelihoods (what is minimised).
    pub loss: Tensor<1>,
    /// Summed NLL of the forward LM.
    pub forward_nll: Tensor<1>,
    /// Summed NLL of the backward LM.
    pub backward_nll: Tensor<1>,
    /// Targets of the forward LM.
    pub n_forward: usize,
    /// Targets of the backward LM.
    pub n_backward: usize,
}

/// The result of [`BiLanguageModel::loss`].
#[derive(Debug, Clone)]
pub struct LmStep {
    /// Losses.
    pub loss: LmLoss,
    /// State to carry to the next batch (stateful mode; not yet detached).
    pub state: Option<CarriedState>,
}

/// What [`BiLanguageModel::loss_and_gradients`] takes besides the batch, state and softmax.
#[derive(Debug, Clone, Copy)]
pub struct GradientOptions<'a> {
    /// Seed of the dropout masks (`None`: no dropout).
    pub dropout_seed: Option<u64>,
    /// The factor the loss is multiplied by before backpropagation, so that every gradient
    /// comes out multiplied by it (mixed precision's loss scale, [`crate::LossScale`]; 1
    /// otherwise). The losses reported are not scaled.
    pub loss_scale: f32,
    /// The softmax's weight and bias gradients as the rows a sampled step touched, where it
    /// runs off a CubeCL device ([`LmGradients::softmax_rows`]), for an optimizer that takes
    /// them ([`crate::optimizer::TrainingOptimizer::takes_row_gradients`]); the whole
    /// vocabulary's tables otherwise.
    pub row_gradients: bool,
    /// Adds each phase's time to it, when given.
    pub profile: Option<&'a StepProfile>,
}

impl GradientOptions<'_> {
    /// Dropout from `dropout_seed`, the loss unscaled, whole-table gradients, no profile.
    pub fn seeded(dropout_seed: Option<u64>) -> Self {
        Self {
            dropout_seed,
            loss_scale: 1.0,
            row_gradients: false,
            profile: None,
        }
    }
}

/// The result of [`BiLanguageModel::loss_and_gradients`].
pub struct LmGradients {
    /// Losses and the state to carry.
    pub step: LmStep,
    /// Gradients of every trainable parameter (not finite where the loss is not).
    pub grads: GradientsParams,
    /// With row gradients ([`GradientOptions::row_gradients`]): the vocabulary rows the
    /// softmax's weight (`[U, P]`) and bias (`[U]`) gradients in `grads` are of, ascending;
    /// the gradient is zero in every other row. For [`crate::optimizer::TrainingOptimizer::step`].
    pub softmax_rows: Option<Vec<u32>>,
}

/// Registers `grad` for `param` unless the parameter is frozen (`no_grad`).
pub(crate) fn register_if_trained<const D: usize>(
    grads: &mut GradientsParams,
    param: &Param<Tensor<D>>,
    grad: Tensor<D>,
) {
    if param.val().is_require_grad() {
        grads.register(param.id, grad);
    }
}

/// Uploads cell positions.
pub(crate) fn positions_tensor(positions: Vec<i64>, device: &Device) -> Tensor<1, Int> {
    let n = positions.len();
    Tensor::from_data(TensorData::new(positions, [n]), device)
}

/// The char ids of a batch's streams' tokens, as the token encoder reads them: the forward
/// stream's rows then the reversed stream's (one encoder call for both: the same module embeds
/// both directions).
pub(crate) fn stream_char_ids(streams: &Streams) -> CharIdBatch {
    let [forward, backward] = &streams.grids;
    grid_char_ids(&[forward, backward])
}

/// Char ids of rows of tokens, every row padded with empty tokens to `n_steps`.
pub(crate) fn grid_char_ids(grids: &[&TokenGrid]) -> CharIdBatch {
    let rows: Vec<Vec<&str>> = grids
        .iter()
        .flat_map(|grid| {
            grid.rows.iter().map(|row| {
                let mut tokens: Vec<&str> = row.iter().map(String::as_str).collect();
                tokens.resize(grid.n_steps, "");
                tokens
            })
        })
        .collect();
    CharIdBatch::from_sentences(&rows)
}

impl BiLanguageModel {
    /// This model running `kernels` on a CubeCL device: its training step's LSTM cells,
    /// products and reductions, the token encoder's and the softmax's.
    pub fn with_kernels(mut self, kernels: KernelSettings) -> Self {
        self.kernels = kernels;
        self.bilm = self.bilm.with_kernels(kernels);
        self.softmax.kernels = kernels;
        self
    }

    /// Parameters in total.
    pub fn n_parameters(&self) -> usize {
        self.num_params()
    }

    /// Runs one LSTM stack with dropout on every layer input and on the top output; the residual
    /// (from layer 1 on) adds the dropped-out input, as bilm-tf's `DropoutWrapper(ResidualWrapper)`.
    fn run_direction(
        &self,
        layers: &[LstmWithProjection],
        run: DirectionRun,
    ) -> (Tensor<3>, Vec<LstmState>) {
        let DirectionRun {
            embedded,
            lengths,
            initial,
            dropout:
                StackDropout {
                    activations: mut dropout,
                    recurrent: mut weight_drop,
                },
        } = run;
        let mut initial = initial.map(Vec::into_iter);
        let skip = self.bilm.use_skip_connections;
        let stack = run_stack(layers.len(), skip, embedded.clone(), false, |index, x| {
            let (layer, _) = weight_drop.drop_recurrent(&layers[index]);
            let input = dropout.apply(x);
            let start = initial.as_mut().and_then(Iterator::next);
            let out = layer.forward(input.clone(), lengths, true, start);
            LayerRun {
                input,
                output: out.outputs,
                record: out.final_state,
            }
        });
        (dropout.apply(stack.top), stack.records)
    }

    /// The cells (row-major over `[B, T]`) that have a target, and their target ids.
    pub(crate) fn target_positions(targets: &Targets) -> (Vec<i64>, Vec<u32>) {
        targets
            .weights
            .iter()
            .zip(&targets.ids)
            .enumerate()
            .filter(|(_, (w, _))| **w > 0.0)
            .map(|(cell, (_, &id))| (cell as i64, id))
            .unzip()
    }

    /// The rows of `top` `[B, T, P]` that have a target, `[N, P]`, and their target ids; `None`
    /// when no position has one.
    fn target_rows(top: Tensor<3>, targets: &Targets) -> Option<(Tensor<2>, Vec<u32>)> {
        let (positions, ids) = Self::target_positions(targets);
        if positions.is_empty() {
            return None;
        }
        let [batch, n_steps, d] = top.dims();
        let positions = positions_tensor(positions, &top.device());
        Some((top.reshape([batch * n_steps, d]).select(0, positions), ids))
    }

    /// The joint loss of a batch. In the stateful mode `state` is where each stack starts
    /// (`None`: zero) and the returned state is where it ended; a sentence batch starts from
    /// zero (`state` is not read) and returns no state. With `dropout_seed`, dropout is
    /// applied with masks drawn from that seed (training); without, not at all (evaluation).
    pub fn loss(
        &self,
        batch: &LmBatch,
        state: Option<CarriedState>,
        softmax: SoftmaxMode,
        dropout_seed: Option<u64>,
        device: &Device,
    ) -> LmStep {
        let streams = batch.streams();
        let embedded = self.bilm.encode_tokens(&stream_char_ids(&streams), device);
        let dropout = |direction: u64| self.stack_dropout(dropout_seed, direction);
        let [forward, _] = &streams.grids;
        let n_rows = forward.rows.len();
        let lengths = vec![forward.n_steps; n_rows];
        let (f_start, b_start) = match state.filter(|_| streams.carries_state) {
            Some(s) => (Some(s.forward), Some(s.backward)),
            None => (None, None),
        };
        let f_in = embedded.clone().narrow(0, 0, n_rows);
        let b_in = embedded.narrow(0, n_rows, n_rows);
        // Both streams are read left to right: the reversed one is already reversed.
        let ((f_top, f_state), (b_top, b_state)) = self.both_stacks(
            DirectionRun {
                embedded: &f_in,
                lengths: &lengths,
                initial: f_start,
                dropout: dropout(0),
            },
            DirectionRun {
                embedded: &b_in,
                lengths: &lengths,
                initial: b_start,
                dropout: dropout(1),
            },
        );
        let [forward_targets, backward_targets] = &streams.targets;
        LmStep {
            loss: self.joint_loss([f_top, b_top], [forward_targets, backward_targets], softmax),
            state: streams.carries_state.then_some(CarriedState {
                forward: f_state,
                backward: b_state,
            }),
        }
    }

    /// One direction's dropout streams (0 forward, 1 backward) for a step's `seed`.
    pub(crate) fn stack_dropout(&self, seed: Option<u64>, direction: u64) -> StackDropout {
        StackDropout::new(&self.dropout, seed, direction, self.kernels)
    }

    /// The mean of the two directions' mean NLLs, from their top layers `[B, T, P]`. Both
    /// directions' rows go through the shared softmax in one call (one weight gather, one
    /// matmul).
    pub(crate) fn joint_loss(
        &self,
        tops: [Tensor<3>; 2],
        [forward_targets, backward_targets]: [&Targets; 2],
        softmax: SoftmaxMode,
    ) -> LmLoss {
        let [forward_top, backward_top] = tops;
        let n_forward = forward_targets.count();
        let n_backward = backward_targets.count();
        let forward_rows = Self::target_rows(forward_top.clone(), forward_targets);
        let backward_rows = Self::target_rows(backward_top.clone(), backward_targets);
        let n_forward_rows = forward_rows.as_ref().map_or(0, |(_, ids)| ids.len());
        let (hidden, ids): (Vec<Tensor<2>>, Vec<Vec<u32>>) =
            [forward_rows, backward_rows].into_iter().flatten().unzip();
        let ids = ids.concat();
        let nll = (!hidden.is_empty()).then(|| {
            let hidden = Tensor::cat(hidden, 0);
            match softmax {
                SoftmaxMode::Full => self.softmax.full_nll(hidden, &ids),
                SoftmaxMode::Sampled(candidates) => {
                    self.softmax.sampled_nll(hidden, &ids, candidates)
                }
            }
        });
        // A direction without targets gets a zero that keeps the graph connected, so that
        // backward() always has a path.
        let summed = |top: Tensor<3>, start: usize, n: usize| match &nll {
            Some(nll) if n > 0 => nll.clone().narrow(0, start, n).sum(),
            _ => top.sum().mul_scalar(0.0),
        };
        let forward_nll = summed(forward_top, 0, n_forward_rows);
        let backward_nll = summed(backward_top, n_forward_rows, ids.len() - n_forward_rows);
        let loss = (forward_nll.clone().div_scalar(n_forward.max(1) as f64)
            + backward_nll.clone().div_scalar(n_backward.max(1) as f64))
        .div_scalar(2.0);
        LmLoss {
            loss,
            forward_nll,
            backward_nll,
            n_forward,
            n_backward,
        }
    }

    /// Runs the forward and the backward stack side by side ([`both_directions`]; one after
    /// the other under autodiff).
    fn both_stacks(
        &self,
        forward: DirectionRun,
        backward: DirectionRun,
    ) -> ((Tensor<3>, Vec<LstmState>), (Tensor<3>, Vec<LstmState>)) {
        both_directions(
            forward.embedded.is_autodiff(),
            || self.run_direction(&self.bilm.forward_layers, forward),
            || self.run_direction(&self.bilm.backward_layers, backward),
        )
    }
}

/// One stack's input (read left to right), start and dropout.
struct DirectionRun<'a> {
    /// Borrowed, so that it outlives both stacks' threads ([`both_directions`]).
    embedded: &'a Tensor<3>,
    lengths: &'a [usize],
    initial: Option<Vec<LstmState>>,
    dropout: StackDropout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_rows_zeroes_only_the_chosen_rows_of_every_layer() {
        let device = Device::flex();
        let layer = |v: f32| LstmState {
            hidden: Tensor::full([3, 2], v, &device),
            memory: Tensor::full([3, 4], v + 1.0, &device),
        };
        let state = CarriedState {
            forward: vec![layer(1.0), layer(2.0)],
            backward: vec![layer(3.0)],
        };
        let reset = state.reset_rows(&[false, true, false]);
        for (l, v) in reset
            .forward
            .iter()
            .chain(&reset.backward)
            .zip([1.0f32, 2.0, 3.0])
        {
            let hidden = l.hidden.to_data().try_to_vec::<f32>().unwrap();
            let memory = l.memory.to_data().try_to_vec::<f32>().unwrap();
            assert_eq!(hidden, [v, v, 0.0, 0.0, v, v]);
            assert_eq!(&memory[..4], [v + 1.0; 4]);
            assert_eq!(&memory[4..8], [0.0; 4]);
            assert_eq!(&memory[8..], [v + 1.0; 4]);
        }
    }
}
