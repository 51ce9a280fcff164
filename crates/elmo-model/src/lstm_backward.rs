//! The training fast path of [`LstmWithProjection`]: a forward pass outside autodiff that records
//! what backpropagation needs ([`LstmTape`]), and hand-written backpropagation through time
//! (the LSTMP equations of Sak et al. 2014 as in bilm-tf's `LSTMCell(num_proj, cell_clip,
//! proj_clip)`; the same arithmetic as `LstmWithProjection::forward`).
//!
//! Why by hand: under burn's autodiff every step of every layer is a dozen recorded operations
//! whose backward runs on one thread, each gate `narrow` costs a zero-filled gradient of the whole
//! gate block, and every weight gradient is accumulated as one small rank-B update per step.
//! Here the backward pass computes the per-step gate gradients and then each weight gradient
//! with ONE matmul over all steps (`[x_t]ᵀ·[dz_t]`), as cuDNN does, and a caller can run the
//! two directions' backward passes on two threads.
//!
//! Scope: every row runs all `T` steps left to right (the packed stateful batches of biLM
//! training); no gradient flows into the initial state (it is cut at batch boundaries).

use burn::tensor::Tensor;
use burn::tensor::activation::{sigmoid, tanh};

use crate::lstm_projection::{LstmOutput, LstmState, LstmWithProjection};

/// What one step keeps for the backward pass (all `[B, C]` except `hidden_prev`, `[B, P]`).
#[derive(Debug, Clone)]
struct StepRecord {
    input_gate: Tensor<2>,
    forget_gate: Tensor<2>,
    cell_input: Tensor<2>,
    output_gate: Tensor<2>,
    memory_prev: Tensor<2>,
    tanh_memory: Tensor<2>,
    /// 1 where the cell clip did not cut (`|c| ≤ clip`), else 0; `None` without a clip.
    memory_kept: Option<Tensor<2>>,
    /// 1 where the projection clip did not cut (`[B, P]`).
    hidden_kept: Option<Tensor<2>>,
    hidden_prev: Tensor<2>,
}

/// The record of [`LstmWithProjection::forward_recorded`], consumed by
/// [`LstmWithProjection::backward_recorded`].
#[derive(Debug, Clone)]
pub struct LstmTape {
    /// `[B·T, d_input]`, row `b·T + t`.
    inputs: Tensor<2>,
    steps: Vec<StepRecord>,
}

/// Gradients of [`LstmWithProjection::backward_recorded`].
#[derive(Debug, Clone)]
pub struct LstmGradients {
    /// `[B, T, d_input]`: gradient of the layer's inputs.
    pub inputs: Tensor<3>,
    /// Gradients of the parameters.
    pub weights: LstmWeightGradients,
}

/// Gradients of an [`LstmWithProjection`]'s parameters, shaped as the parameters.
#[derive(Debug, Clone)]
pub struct LstmWeightGradients {
    /// `[d_input, 4C]`.
    pub input_weight: Tensor<2>,
    /// `[P, 4C]`.
    pub state_weight: Tensor<2>,
    /// `[4C]`.
    pub bias: Tensor<1>,
    /// `[C, P]`.
    pub projection: Tensor<2>,
}

/// The parameters as plain tensors (no autodiff association).
struct PlainWeights {
    input: Tensor<2>,
    state: Tensor<2>,
    bias: Tensor<2>,
    projection: Tensor<2>,
}

/// 1 where `|x| ≤ clip`, else 0 (where a clamp passes its gradient through, as burn's does).
fn kept_by_clip(x: &Tensor<2>, clip: Option<f64>) -> Option<Tensor<2>> {
    clip.map(|clip| x.clone().abs().lower_equal_elem(clip).float())
}

impl LstmWithProjection {
    fn plain_weights(&self) -> PlainWeights {
        PlainWeights {
            input: self.input_weight.val().inner(),
            state: self.state_weight.val().inner(),
            bias: self.bias.val().inner().unsqueeze_dim::<2>(0),
            projection: self.projection.val().inner(),
        }
    }

    /// [`Self::forward`] for rows that all run `T` steps left to right, computed outside autodiff
    /// (inputs, state and weights are used without their autodiff association) and recorded for
    /// [`Self::backward_recorded`]. Outputs equal `forward`'s up to float rounding.
    ///
    /// # Shapes
    /// - inputs: `[B, T, d_input]`
    /// - output: `outputs` `[B, T, P]`, the state after step `T`
    pub fn forward_recorded(
        &self,
        inputs: Tensor<3>,
        initial_state: Option<LstmState>,
    ) -> (LstmOutput, LstmTape) {
        let inputs = inputs.inner();
        let device = inputs.device();
        let [batch, n_steps, d_input] = inputs.dims();
        let d_cell = self.d_cell();
        let weights = self.plain_weights();
        let LstmState {
            hidden: mut h,
            memory: mut c,
        } = initial_state
            .map(|s| LstmState {
                hidden: s.hidden.inner(),
                memory: s.memory.inner(),
            })
            .unwrap_or_else(|| self.zero_state(batch, &device));
        let flat_inputs = inputs.reshape([batch * n_steps, d_input]);
        // All steps' input contributions in one matmul (training unrolls are short).
        let projected =
            flat_inputs
                .clone()
                .matmul(weights.input.clone())
                .reshape([batch, n_steps, 4 * d_cell]);
        let mut steps = Vec::with_capacity(n_steps);
        let mut outputs = Vec::with_capacity(n_steps);
        for t in 0..n_steps {
            let x_t = projected
                .clone()
                .narrow(1, t, 1)
                .reshape([batch, 4 * d_cell]);
            let gates = x_t + (h.clone().matmul(weights.state.clone()) + weights.bias.clone());
            let gate = |k: usize| gates.clone().narrow(1, k * d_cell, d_cell);
            let input_gate = sigmoid(gate(0));
            let forget_gate = sigmoid(gate(1));
            let cell_input = tanh(gate(2));
            let output_gate = sigmoid(gate(3));
            let raw_memory =
                input_gate.clone() * cell_input.clone() + forget_gate.clone() * c.clone();
            let memory_kept = kept_by_clip(&raw_memory, self.cell_clip);
            let memory = match self.cell_clip {
                Some(clip) => raw_memory.clamp(-clip, clip),
                None => raw_memory,
            };
            let tanh_memory = tanh(memory.clone());
            let raw_hidden =
                (output_gate.clone() * tanh_memory.clone()).matmul(weights.projection.clone());
            let hidden_kept = kept_by_clip(&raw_hidden, self.projection_clip);
            let hidden = match self.projection_clip {
                Some(clip) => raw_hidden.clamp(-clip, clip),
                None => raw_hidden,
            };
            steps.push(StepRecord {
                input_gate,
                forget_gate,
                cell_input,
                output_gate,
                memory_prev: c,
                tanh_memory,
                memory_kept,
                hidden_kept,
                hidden_prev: h,
            });
            outputs.push(hidden.clone());
            h = hidden;
            c = memory;
        }
        let outputs = if outputs.is_empty() {
            Tensor::zeros([batch, 0, self.d_projection()], &device)
        } else {
            Tensor::stack(outputs, 1)
        };
        let output = LstmOutput {
            outputs,
            final_state: LstmState {
                hidden: h,
                memory: c,
            },
        };
        (
            output,
            LstmTape {
                inputs: flat_inputs,
                steps,
            },
        )
    }

    /// Backpropagation through time of a [`Self::forward_recorded`] pass, given the gradient of
    /// its outputs (none flows out of the final state or into the initial state).
    ///
    /// # Shapes
    /// - grad_outputs: `[B, T, P]`
    /// - output: [`LstmGradients`]
    pub fn backward_recorded(&self, tape: LstmTape, grad_outputs: Tensor<3>) -> LstmGradients {
        let grad_outputs = grad_outputs.inner();
        let device = grad_outputs.device();
        let [batch, n_steps, d_projection] = grad_outputs.dims();
        let d_cell = self.d_cell();
        let d_input = tape.inputs.dims()[1];
        let weights = self.plain_weights();
        let state_weight_t = weights.state.clone().transpose();
        let projection_t = weights.projection.clone().transpose();

        let mut grad_hidden_next = Tensor::<2>::zeros([batch, d_projection], &device);
        let mut grad_memory_next = Tensor::<2>::zeros([batch, d_cell], &device);
        // Per step, filled from the last step back: gate gradients `dz_t` `[B, 4C]`, projection
        // gradients `dp_t` `[B, P]`, and the projection inputs `o·tanh c` `[B, C]`.
        let mut grad_gates = Vec::with_capacity(n_steps);
        let mut grad_projected = Vec::with_capacity(n_steps);
        let mut projection_inputs = Vec::with_capacity(n_steps);
        let mut hidden_prev = Vec::with_capacity(n_steps);
        for (t, step) in tape.steps.into_iter().enumerate().rev() {
            let grad_hidden = grad_outputs
                .clone()
                .narrow(1, t, 1)
                .reshape([batch, d_projection])
                + grad_hidden_next;
            let grad_raw_hidden = match &step.hidden_kept {
                Some(kept) => grad_hidden * kept.clone(),
                None => grad_hidden,
            };
            // `o·tanh c`, the projection's input (recomputed: one multiply, not a kept tensor).
            projection_inputs.push(step.output_gate.clone() * step.tanh_memory.clone());
            let grad_cell_output = grad_raw_hidden.clone().matmul(projection_t.clone());
            let grad_output_gate = grad_cell_output.clone() * step.tanh_memory.clone();
            let tanh_derivative = step.tanh_memory.clone().square().neg().add_scalar(1.0);
            let grad_memory =
                grad_cell_output * step.output_gate.clone() * tanh_derivative + grad_memory_next;
            let grad_raw_memory = match &step.memory_kept {
                Some(kept) => grad_memory * kept.clone(),
                None => grad_memory,
            };
            let sigmoid_derivative = |s: &Tensor<2>| s.clone() * s.clone().neg().add_scalar(1.0);
            let grad_input_gate = grad_raw_memory.clone()
                * step.cell_input.clone()
                * sigmoid_derivative(&step.input_gate);
            let grad_forget_gate =
                grad_raw_memory.clone() * step.memory_prev * sigmoid_derivative(&step.forget_gate);
            let grad_cell_input = grad_raw_memory.clone()
                * step.input_gate
                * step.cell_input.square().neg().add_scalar(1.0);
            let grad_output_pre = grad_output_gate * sigmoid_derivative(&step.output_gate);
            grad_memory_next = grad_raw_memory * step.forget_gate;
            let grad_step_gates = Tensor::cat(
                vec![
                    grad_input_gate,
                    grad_forget_gate,
                    grad_cell_input,
                    grad_output_pre,
                ],
                1,
            );
            grad_hidden_next = grad_step_gates.clone().matmul(state_weight_t.clone());
            grad_gates.push(grad_step_gates);
            grad_projected.push(grad_raw_hidden);
            hidden_prev.push(step.hidden_prev);
        }
        // Back in time order, rows `b·T + t` as the inputs.
        let flat = |mut per_step: Vec<Tensor<2>>, width: usize| -> Tensor<2> {
            per_step.reverse();
            if per_step.is_empty() {
                return Tensor::zeros([0, width], &device);
            }
            Tensor::stack::<3>(per_step, 1).reshape([batch * n_steps, width])
        };
        let grad_gates = flat(grad_gates, 4 * d_cell);
        let grad_projected = flat(grad_projected, d_projection);
        let projection_inputs = flat(projection_inputs, d_cell);
        let hidden_prev = flat(hidden_prev, d_projection);
        LstmGradients {
            inputs: grad_gates
                .clone()
                .matmul(weights.input.transpose())
                .reshape([batch, n_steps, d_input]),
            weights: LstmWeightGradients {
                input_weight: tape.inputs.transpose().matmul(grad_gates.clone()),
                state_weight: hidden_prev.transpose().matmul(grad_gates.clone()),
                bias: grad_gates.sum_dim(0).reshape([4 * d_cell]),
                projection: projection_inputs.transpose().matmul(grad_projected),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LstmWithProjectionConfig;
    use burn::tensor::{Device, TensorData};

    fn values(n: usize, scale: f32, phase: f32) -> Vec<f32> {
        (0..n)
            .map(|i| scale * (i as f32 * 0.61 + phase).sin())
            .collect()
    }

    /// Outputs equal the autodiff path's, and every gradient equals autodiff's, with both clips
    /// active somewhere (large inputs and a small clip) and a non-zero initial state.
    #[test]
    fn hand_written_gradients_equal_autodiff() {
        let device = Device::flex().autodiff();
        for (cell_clip, projection_clip) in [(Some(0.5), Some(0.08)), (None, None)] {
            let layer = crate::seeded_init(&device, 3, || {
                LstmWithProjectionConfig {
                    d_input: 5,
                    d_cell: 7,
                    d_projection: 4,
                    cell_clip,
                    projection_clip,
                }
                .init(&device)
            });
            let (batch, n_steps) = (3, 6);
            let data = |n: usize, scale: f32, phase: f32, shape: Vec<usize>| {
                TensorData::new(values(n, scale, phase), shape)
            };
            let inputs = Tensor::<3>::from_data(
                data(batch * n_steps * 5, 2.5, 0.0, vec![batch, n_steps, 5]),
                &device,
            )
            .require_grad();
            let start = LstmState {
                hidden: Tensor::from_data(data(batch * 4, 0.5, 1.0, vec![batch, 4]), &device),
                memory: Tensor::from_data(data(batch * 7, 0.8, 2.0, vec![batch, 7]), &device),
            };
            // A loss that weighs every output differently.
            let weights = Tensor::<3>::from_data(
                data(batch * n_steps * 4, 1.0, 3.0, vec![batch, n_steps, 4]),
                &device,
            );
            let lengths = vec![n_steps; batch];
            let reference = layer.forward(inputs.clone(), &lengths, true, Some(start.clone()));
            let grads = (reference.outputs.clone() * weights.clone())
                .sum()
                .backward();

            let (recorded, tape) = layer.forward_recorded(inputs.clone(), Some(start));
            let diff = |a: Tensor<3>, b: Tensor<3>| -> f32 {
                (a.inner() - b.inner()).abs().max().into_scalar()
            };
            assert!(diff(reference.outputs.clone(), recorded.outputs) < 1e-6);
            if let (Some(cell_clip), Some(projection_clip)) = (cell_clip, projection_clip) {
                // The clips must matter for this test to check their gradients.
                let h: f32 = reference.outputs.clone().inner().abs().max().into_scalar();
                let c: f32 = reference
                    .final_state
                    .memory
                    .clone()
                    .inner()
                    .abs()
                    .max()
                    .into_scalar();
                let reached = |value: f32, clip: f64| (f64::from(value) - clip).abs() < 1e-6;
                assert!(
                    reached(h, projection_clip),
                    "projection clip not reached: {h}"
                );
                assert!(reached(c, cell_clip), "cell clip not reached: {c}");
            }
            let manual = layer.backward_recorded(tape, weights.inner());
            let close = |name: &str, expected: Option<Tensor<2>>, got: Tensor<2>| {
                let expected = expected.unwrap_or_else(|| panic!("no autodiff gradient: {name}"));
                let scale: f32 = expected.clone().abs().max().into_scalar();
                let error: f32 = (expected - got).abs().max().into_scalar();
                assert!(
                    error <= 1e-5 * scale.max(1.0),
                    "{name} (clips {cell_clip:?}): error {error}, scale {scale}"
                );
            };
            let flat_inputs = |t: Tensor<3>| t.reshape([batch * n_steps, 5]);
            close(
                "inputs",
                inputs.grad(&grads).map(flat_inputs),
                flat_inputs(manual.inputs),
            );
            close(
                "input_weight",
                layer.input_weight.val().grad(&grads),
                manual.weights.input_weight,
            );
            close(
                "state_weight",
                layer.state_weight.val().grad(&grads),
                manual.weights.state_weight,
            );
            close(
                "projection",
                layer.projection.val().grad(&grads),
                manual.weights.projection,
            );
            close(
                "bias",
                layer.bias.val().grad(&grads).map(|b| b.unsqueeze_dim(0)),
                manual.weights.bias.unsqueeze_dim(0),
            );
        }
    }
}
