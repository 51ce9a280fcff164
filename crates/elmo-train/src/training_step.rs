//! A training step's loss and gradients, fast path ([`BiLanguageModel::loss_and_gradients`]):
//! the LSTM stacks outside autodiff with hand-written backpropagation through time
//! ([`crate::recorded_stack`]), the softmax's gradients by hand
//! ([`Softmax::nll_with_gradients`](crate::softmax::Softmax::nll_with_gradients)), the token
//! encoder by hand too ([`crate::encoder_backward`]): no autodiff, for packed batches and
//! sentence batches alike (both as two streams read left to right, [`LmBatch::streams`]). Same
//! gradients as plain autodiff through [`BiLanguageModel::loss`] (tested in
//! `tests/training.rs`, on wgpu with the directions paired).

use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use elmo_kernels::sum_row_groups;
use elmo_model::lstm_stack::both_directions;
use elmo_model::{LstmState, LstmWithProjection};

use crate::encoder_backward::EncoderPass;
use crate::language_model::{
    BiLanguageModel, CarriedState, GradientOptions, LmGradients, LmLoss, LmStep, SoftmaxMode,
    positions_tensor, register_if_trained,
};
use crate::lm_batch::{LmBatch, Targets};
use crate::lstm_backward::LstmGroup;
use crate::recorded_stack::{RecordedStack, StackGradients, backward_stack, forward_stack};
use crate::softmax::SampledCandidates;
use crate::step_input::PreparedStreams;

/// The two directions' recorded LSTM stacks: one record of both (paired, their rows stacked)
/// or one record each, in direction order.
struct RecordedDirections(Vec<RecordedStack>);

impl RecordedDirections {
    /// Per direction, `[B, T, P]`: the tops the softmax reads.
    fn tops(&self) -> [Tensor<3>; 2] {
        let tops = self.0.iter().flat_map(|stack| {
            let n_stacks = stack.finals.len();
            (0..n_stacks).map(move |g| LstmGroup::rows_of(&stack.top, g, n_stacks))
        });
        two(tops.collect())
    }

    /// Per direction, the state after the last step of each layer.
    fn finals(&self) -> [Vec<LstmState>; 2] {
        two(self.0.iter().flat_map(|s| s.finals.clone()).collect())
    }
}

/// The two items of `items`, one per direction.
fn two<T>(items: Vec<T>) -> [T; 2] {
    items
        .try_into()
        .unwrap_or_else(|items: Vec<T>| panic!("2 directions, not {}", items.len()))
}

/// The softmax part of a step: the losses, the gradient of each stack's top `[B, T, P]`
/// (forward, backward) and the softmax parameters' gradients.
struct SoftmaxStep {
    loss: LmLoss,
    gradients: ([Tensor<3>; 2], GradientsParams),
    /// The rows of the softmax's row gradients, when it gave them.
    rows: Option<Vec<u32>>,
}

impl BiLanguageModel {
    /// [`Self::loss`] and the gradient of every trainable parameter, for a training step
    /// (`device` with autodiff), without autodiff: the LSTM stacks run over the batch's two
    /// streams (`LmBatch::streams`: a sentence batch's rows, and each reversed within its
    /// length), one thread per direction on a CPU and both as one where the fused kernels run
    /// (`KernelSettings::paired_for`: one batched product and one launch of each fused kernel
    /// for both directions), and are backpropagated by hand; the softmax (full or sampled) and
    /// the token encoder are differentiated by hand too, the encoder receiving both stacks'
    /// input gradients at once. The gradients are those of [`Self::loss`] up to float rounding
    /// (tested), multiplied by `options.loss_scale`. Nothing is read back to the host: the
    /// step queues its work without waiting for the device, and the caller reads the losses
    /// (whose finiteness says whether the gradients are usable).
    pub fn loss_and_gradients(
        &self,
        batch: &LmBatch,
        state: Option<CarriedState>,
        softmax: SoftmaxMode,
        device: &Device,
        options: GradientOptions,
    ) -> LmGradients {
        let streams = PreparedStreams::of(batch);
        self.loss_and_gradients_of(&streams, state, softmax, device, options)
    }

    /// [`Self::loss_and_gradients`] of a batch's streams prepared already
    /// ([`crate::StepInput`]: while the device ran the step before).
    pub(crate) fn loss_and_gradients_of(
        &self,
        streams: &PreparedStreams,
        state: Option<CarriedState>,
        softmax: SoftmaxMode,
        device: &Device,
        options: GradientOptions,
    ) -> LmGradients {
        let GradientOptions {
            dropout_seed,
            loss_scale,
            row_gradients,
            profile,
        } = options;
        let mark = |phase| {
            if let Some(profile) = profile {
                profile.mark(device, phase);
            }
        };
        let encoder_pass = EncoderPass::forward(&self.bilm, &streams.tokens, device);
        let n_rows = streams.n_rows;
        let embedded = encoder_pass.embedded();
        mark("encoder forward");
        let (f_start, b_start) = match state.filter(|_| streams.carries_state) {
            Some(s) => (Some(s.forward), Some(s.backward)),
            None => (None, None),
        };
        let skip = self.bilm.use_skip_connections;
        let stacks: [&[LstmWithProjection]; 2] =
            [&self.bilm.forward_layers, &self.bilm.backward_layers];
        let kernels = self.kernels;
        let recorded = RecordedDirections(if kernels.paired_for(&embedded) {
            vec![forward_stack(
                &stacks,
                skip,
                embedded.clone(),
                vec![f_start, b_start],
                vec![
                    self.stack_dropout(dropout_seed, 0),
                    self.stack_dropout(dropout_seed, 1),
                ],
                kernels,
            )]
        } else {
            let run = |direction: usize, start| {
                forward_stack(
                    &stacks[direction..=direction],
                    skip,
                    embedded.clone().narrow(0, direction * n_rows, n_rows),
                    vec![start],
                    vec![self.stack_dropout(dropout_seed, direction as u64)],
                    kernels,
                )
            };
            let autodiff = embedded.is_autodiff();
            let (f, b) = both_directions(autodiff, || run(0, f_start), || run(1, b_start));
            vec![f, b]
        });
        mark("LSTM forward");
        let [f_top, b_top] = recorded.tops();
        let tops = [&f_top, &b_top];
        let [forward_targets, backward_targets] = &streams.targets;
        let targets = [forward_targets, backward_targets];
        let candidates = match softmax {
            SoftmaxMode::Full => None,
            SoftmaxMode::Sampled(candidates) => Some(candidates),
        };
        let SoftmaxStep {
            loss,
            gradients,
            rows: softmax_rows,
        } = self.softmax_step(tops, targets, candidates, loss_scale, row_gradients);
        mark("softmax");
        let [forward_finals, backward_finals] = recorded.finals();
        let step = LmStep {
            loss,
            state: streams.carries_state.then_some(CarriedState {
                forward: forward_finals,
                backward: backward_finals,
            }),
        };
        let ([f_grad, b_grad], mut grads) = gradients;
        let StackGradients {
            embedded: grad_embedded,
            layers: layer_grads,
        } = match <[RecordedStack; 2]>::try_from(recorded.0) {
            Err(mut paired) => backward_stack(
                &stacks,
                skip,
                paired.remove(0),
                Tensor::cat(vec![f_grad, b_grad], 0),
            ),
            Ok([f_stack, b_stack]) => {
                let (f, b) = both_directions(
                    f_grad.is_autodiff(),
                    || backward_stack(&stacks[..1], skip, f_stack, f_grad),
                    || backward_stack(&stacks[1..], skip, b_stack, b_grad),
                );
                StackGradients {
                    embedded: Tensor::cat(vec![f.embedded, b.embedded], 0),
                    layers: [f.layers, b.layers].concat(),
                }
            }
        };
        mark("LSTM backward");
        for (layers, gradients) in stacks.into_iter().zip(layer_grads) {
            for (layer, g) in layers.iter().zip(gradients) {
                register_if_trained(&mut grads, &layer.input_weight, g.input_weight);
                register_if_trained(&mut grads, &layer.state_weight, g.state_weight);
                register_if_trained(&mut grads, &layer.bias, g.bias);
                register_if_trained(&mut grads, &layer.projection, g.projection);
            }
        }
        encoder_pass.backward(&self.bilm.token_encoder, grad_embedded, kernels, &mut grads);
        mark("encoder backward");
        LmGradients {
            step,
            grads,
            softmax_rows,
        }
    }

    /// The softmax (full, or against `candidates`) over both directions' target rows,
    /// differentiated by hand: each row's NLL is weighted by `1 / (2 · n_direction)`, its share
    /// of the joint loss, times `loss_scale` (the gradients' factor, not the loss's); with
    /// `row_gradients`, the softmax's as rows where it gives them ([`Softmax::nll_with_gradients`]).
    fn softmax_step(
        &self,
        tops: [&Tensor<3>; 2],
        targets: [&Targets; 2],
        candidates: Option<&SampledCandidates>,
        loss_scale: f32,
        row_gradients: bool,
    ) -> SoftmaxStep {
        let [batch, n_steps, d] = tops[0].dims();
        let device = tops[0].device();
        let positions = targets.map(Self::target_positions);
        let [n_forward, n_backward] = positions.clone().map(|(p, _)| p.len());
        let mut rows = Vec::new();
        let (mut ids, mut scales) = (Vec::new(), Vec::new());
        for (top, (cells, targets)) in tops.iter().zip(&positions) {
            if !cells.is_empty() {
                let cells = positions_tensor(cells.clone(), &device);
                rows.push(
                    (*top)
                        .clone()
                        .reshape([batch * n_steps, d])
                        .select(0, cells),
                );
                ids.extend_from_slice(targets);
                scales.extend(std::iter::repeat_n(
                    loss_scale * 0.5 / targets.len() as f32,
                    targets.len(),
                ));
            }
        }
        let hidden = match rows.is_empty() {
            true => Tensor::zeros([0, d], &device),
            false => Tensor::cat(rows, 0),
        };
        let out = self
            .softmax
            .nll_with_gradients(hidden, &ids, &scales, candidates, row_gradients);
        // A reduction along the axis, which adds in a fixed order: a whole-tensor `sum` adds
        // the cubes' partial sums atomically on CUDA.
        let summed = |start: usize, n: usize| match n {
            0 => Tensor::zeros([1], &device),
            _ => out.nll.clone().narrow(0, start, n).sum_dim(0),
        };
        let forward_nll = summed(0, n_forward);
        let backward_nll = summed(n_forward, n_backward);
        let loss = LmLoss {
            loss: (forward_nll.clone().div_scalar(n_forward.max(1) as f64)
                + backward_nll.clone().div_scalar(n_backward.max(1) as f64))
            .div_scalar(2.0),
            forward_nll,
            backward_nll,
            n_forward,
            n_backward,
        };
        // Each direction's row gradients go back to their cells of its top (each cell once).
        let mut start = 0;
        let top_grads = positions.map(|(cells, _)| {
            let n = cells.len();
            let cells: Vec<usize> = cells.iter().map(|&cell| cell as usize).collect();
            let grad = match n {
                0 => Tensor::<2>::zeros([batch * n_steps, d], &device),
                _ => sum_row_groups(
                    out.hidden.clone().narrow(0, start, n),
                    &cells,
                    batch * n_steps,
                    self.kernels,
                ),
            };
            start += n;
            grad.reshape([batch, n_steps, d])
        });
        let mut grads = GradientsParams::new();
        register_if_trained(&mut grads, &self.softmax.weight, out.weight);
        register_if_trained(&mut grads, &self.softmax.bias, out.bias);
        SoftmaxStep {
            loss,
            gradients: (top_grads, grads),
            rows: out.rows,
        }
    }
}
