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
//! two directions' passes on two threads (a CPU) or as one [`LstmGroup`] (a GPU: both
//! directions in each step's products and kernels). Both passes keep the operations
//! per time step few: ~32 for forward and backward together with burn's operations, each a
//! kernel launch on a GPU, and 8 with the fused kernels of `cube_lstm_cell` that run on a
//! CubeCL device.
//!
//! Scope: every row runs all `T` steps left to right (the packed stateful batches of biLM
//! training); no gradient flows into the initial state (it is cut at batch boundaries).

use burn::tensor::Tensor;
use elmo_kernels::{
    CellKernels, CellRecords, GateActivation, HostRecords, HostSteps, InputContributions,
    KernelSettings, ProductMode, SplitWeight, half_product, host_backward_steps,
    host_forward_steps, sum_columns, to_half, transposed_product,
};
use elmo_model::lstm_projection::{LstmOutput, LstmState, LstmWithProjection};

/// The record of a recorded forward pass ([`RecordedLstm::forward_recorded`],
/// [`LstmGroup::forward_recorded`]), consumed by the matching backward pass. Time-major (row
/// `t·B + b`, B all the rows of the group), so that one step is a contiguous block.
#[derive(Debug, Clone)]
pub struct LstmTape {
    /// Per layer of the group, `[T·B', d_input]`: its rows' inputs, time-major.
    inputs: Vec<Tensor<2>>,
    /// `[T, B, 4C]`: the activated gates `σ(i), σ(f), tanh(g), σ(o)` of every step.
    gates: Tensor<3>,
    /// `[T, B, C]`: the (clipped) memory after every step.
    memory: Tensor<3>,
    /// `[T, B, C]`: its `tanh` (kept: recomputing it costs more than storing it on a CPU).
    tanh_memory: Tensor<3>,
    /// `[T, B, P]`: the (clipped) hidden state after every step, the layer's outputs.
    hidden: Tensor<3>,
    /// The state before step 0.
    initial: LstmState,
}

/// Gradients of [`RecordedLstm::backward_recorded`].
#[derive(Debug, Clone)]
pub struct LstmGradients {
    /// `[B, T, d_input]`: gradient of the layer's inputs.
    pub inputs: Tensor<3>,
    /// Gradients of the parameters.
    pub weights: LstmWeightGradients,
}

/// Gradients of [`LstmGroup::backward_recorded`].
#[derive(Debug, Clone)]
pub struct LstmGroupGradients {
    /// `[G·B, T, d_input]`: gradient of the group's inputs (each layer's rows in turn).
    pub inputs: Tensor<3>,
    /// Gradients of each layer's parameters, in the group's order.
    pub weights: Vec<LstmWeightGradients>,
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
    /// `[1, 4C]`.
    bias: Tensor<2>,
    projection: Tensor<2>,
}

/// 1 where `|x| < clip` (the clip did not cut), else 0; `None` without a clip. Read from the
/// clipped value: it differs from the unclipped `|x| ≤ clip` only where `|x|` equals the clip.
fn kept_by_clip<const D: usize>(clipped: &Tensor<D>, clip: Option<f64>) -> Option<Tensor<D>> {
    clip.map(|clip| clipped.clone().abs().lower_elem(clip).float())
}

/// `x` times a clip mask (see [`kept_by_clip`]); `x` itself without a clip.
fn masked<const D: usize>(x: Tensor<D>, kept: Option<Tensor<D>>) -> Tensor<D> {
    match kept {
        Some(kept) => x * kept,
        None => x,
    }
}

/// `1 − x²`.
fn one_minus_square<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    x.square().neg().add_scalar(1.0)
}

/// `x` (`[B, T, d]`) as time-major rows `[T·B, d]` (one copy).
fn time_major(x: Tensor<3>) -> Tensor<2> {
    let [batch, n_steps, width] = x.dims();
    x.swap_dims(0, 1).reshape([n_steps * batch, width])
}

/// Step `t` of a time-major `[T, B, d]` tensor as `[B, d]` (a view).
fn step(x: &Tensor<3>, t: usize) -> Tensor<2> {
    let [_, batch, width] = x.dims();
    x.clone().narrow(0, t, 1).reshape([batch, width])
}

/// `[initial; x_0 … x_{T−2}]`: every step's previous value (`[T, B, d]`).
fn previous(initial: Tensor<2>, x: &Tensor<3>) -> Tensor<3> {
    let n_steps = x.dims()[0];
    if n_steps == 1 {
        // burn narrows to no steps by no operation.
        return initial.unsqueeze_dim(0);
    }
    Tensor::cat(
        vec![
            initial.unsqueeze_dim(0),
            x.clone().narrow(0, 0, n_steps - 1),
        ],
        0,
    )
}

/// A recorded forward pass's output and tape from its records `[gates, memory, tanh_memory,
/// hidden]` (`[T, B, ·]`): the outputs are the hidden records, the final state the last step's
/// (the initial one without steps).
fn recorded(
    inputs: Vec<Tensor<2>>,
    [gates, memory, tanh_memory, hidden]: [Tensor<3>; 4],
    initial: LstmState,
) -> (LstmOutput, LstmTape) {
    let n_steps = hidden.dims()[0];
    let final_state = match n_steps {
        0 => initial.clone(),
        _ => LstmState {
            hidden: step(&hidden, n_steps - 1),
            memory: step(&memory, n_steps - 1),
        },
    };
    let output = LstmOutput {
        outputs: hidden.clone().swap_dims(0, 1),
        final_state,
    };
    let tape = LstmTape {
        inputs,
        gates,
        memory,
        tanh_memory,
        hidden,
        initial,
    };
    (output, tape)
}

/// `parts` concatenated along `dim` (the one part itself, uncopied).
fn joined<const D: usize>(mut parts: Vec<Tensor<D>>, dim: usize) -> Tensor<D> {
    match parts.len() {
        1 => parts.remove(0),
        _ => Tensor::cat(parts, dim),
    }
}

/// Layers of one shape and the same clips run as one on their rows stacked (`[G·B, T, ·]`,
/// layer `g` on rows `g·B .. (g+1)·B`): the two directions of a biLM layer, which are
/// independent. Every step is then one batched product per weight for all G layers
/// (`split_product::SplitWeight::grouped`) and, on a CubeCL device, one launch of each fused cell
/// kernel: G times the work per launch, 1/G of the launches, where a GPU step is bound by small
/// products and launches. The arithmetic of each row is that of
/// its layer alone ([`RecordedLstm::forward_recorded`] is a group of one).
pub struct LstmGroup<'a> {
    layers: Vec<&'a LstmWithProjection>,
    kernels: KernelSettings,
}

impl<'a> LstmGroup<'a> {
    /// The group of `layers`, in row order, running `kernels` on a CubeCL device.
    ///
    /// # Panics
    /// Without layers, or when they differ in shape or clips.
    pub fn new(layers: Vec<&'a LstmWithProjection>, kernels: KernelSettings) -> Self {
        let first = *layers.first().expect("an LSTM group needs a layer");
        assert!(
            layers.iter().all(|layer| layer.same_shape(first)),
            "the layers of an LSTM group differ in shape or clips"
        );
        Self { layers, kernels }
    }

    /// G, the layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    fn first(&self) -> &LstmWithProjection {
        self.layers[0]
    }

    fn plain_weights(&self) -> Vec<PlainWeights> {
        self.layers
            .iter()
            .map(|layer| PlainWeights {
                input: layer.input_weight.val().inner(),
                state: layer.state_weight.val().inner(),
                bias: layer.bias.val().inner().unsqueeze_dim::<2>(0),
                projection: layer.projection.val().inner(),
            })
            .collect()
    }

    /// Layer `layer`'s rows of `x`, the rows of `n_layers` layers stacked (`[G·B, ..]` →
    /// `[B, ..]`; a view): the group's row layout, for callers that split its outputs.
    pub fn rows_of<const D: usize>(x: &Tensor<D>, layer: usize, n_layers: usize) -> Tensor<D> {
        let batch = x.dims()[0] / n_layers;
        x.clone().narrow(0, layer * batch, batch)
    }

    /// The rows of each layer (`[B, ..]` each) stacked in order, `[G·B, ..]` (one layer's
    /// itself, uncopied): the inverse of [`Self::rows_of`].
    pub fn stacked_rows<const D: usize>(parts: Vec<Tensor<D>>) -> Tensor<D> {
        joined(parts, 0)
    }

    /// [`RecordedLstm::forward_recorded`] for the group: every layer over its rows.
    ///
    /// # Shapes
    /// - inputs: `[G·B, T, d_input]`; initial_state: `[G·B, ·]`
    /// - output: `outputs` `[G·B, T, P]`, the state after step `T` `[G·B, ·]`
    pub fn forward_recorded(
        &self,
        inputs: Tensor<3>,
        initial_state: Option<LstmState>,
    ) -> (LstmOutput, LstmTape) {
        let cells = CellKernels::for_tensor(&inputs, self.kernels);
        self.forward_recorded_using(inputs, initial_state, cells)
    }

    /// [`Self::forward_recorded`] with the cell's kernels chosen by the caller.
    pub(crate) fn forward_recorded_using(
        &self,
        inputs: Tensor<3>,
        initial_state: Option<LstmState>,
        kernels: CellKernels,
    ) -> (LstmOutput, LstmTape) {
        let inputs = inputs.inner();
        let device = inputs.device();
        let [rows, n_steps, _] = inputs.dims();
        let n_layers = self.n_layers();
        assert!(
            rows.is_multiple_of(n_layers),
            "{rows} rows do not split among {n_layers} layers"
        );
        let batch = rows / n_layers;
        let layer = self.first();
        let d_cell = layer.d_cell();
        let d_projection = layer.d_projection();
        let weights = self.plain_weights();
        let initial = initial_state
            .map(|s| LstmState {
                hidden: s.hidden.inner(),
                memory: s.memory.inner(),
            })
            .unwrap_or_else(|| layer.zero_state(rows, &device));
        let activation = GateActivation::new(d_cell, &device);
        // Mixed precision: every product's operands in 16 bits, its result in `f32`.
        let mode = self.kernels.product_mode(&inputs);
        let step_mode = self
            .kernels
            .step_product_mode(&inputs, [d_cell, d_projection]);
        let flat_inputs: Vec<Tensor<2>> = (0..n_layers)
            .map(|g| time_major(Self::rows_of(&inputs, g, n_layers)))
            .collect();
        if kernels == CellKernels::Host
            && let Some(recorded) =
                self.host_forward(&flat_inputs, &weights, &initial, [n_steps, batch], mode)
        {
            return recorded;
        }
        let fused = kernels == CellKernels::Fused;
        // All steps' input contributions: with the fused kernels one batched product for the
        // group, `[G, T, B, 4C]`, whose bias the cell kernel adds as it reads them
        // (`InputContributions`); otherwise one product per layer plus its bias, the layers'
        // rows of every step joined, `[T, G·B, 4C]`.
        let (grouped, projected) = match fused {
            true => {
                let prepared = weights.iter().map(|w| activation.prepare(w.input.clone()));
                let product = half_product::<3>(
                    Tensor::stack(flat_inputs.clone(), 0),
                    Tensor::stack(prepared.collect(), 0),
                    mode,
                )
                .reshape([n_layers, n_steps, batch, 4 * d_cell]);
                let bias = weights.iter().map(|w| activation.prepare(w.bias.clone()));
                (Some((product, Tensor::cat(bias.collect(), 0))), None)
            }
            false => {
                let joined = joined(
                    flat_inputs
                        .iter()
                        .zip(&weights)
                        .map(|(x, w)| {
                            (half_product(x.clone(), activation.prepare(w.input.clone()), mode)
                                + activation.prepare(w.bias.clone()))
                            .reshape([n_steps, batch, 4 * d_cell])
                        })
                        .collect(),
                    1,
                );
                (None, Some(joined))
            }
        };
        // The cell kernels read the initial memory at every step, forward and backward (the
        // tape keeps it): one contiguous copy here where it is padded (CUDA pads the rows of
        // `[B, 1,200]` to 1,280), not one a step.
        let initial = match fused {
            true => LstmState {
                memory: elmo_kernels::contiguous(initial.memory),
                ..initial
            },
            false => initial,
        };
        let (mut h, mut c) = (initial.hidden.clone(), initial.memory.clone());
        // With the fused kernels (a GPU) the step products are split along K (`split_product`),
        // and the kernels write the products' left factors in the split layout; not where a
        // vendor BLAS runs them (it splits K itself).
        let split = fused && self.kernels.split_products && !step_mode.vendor_blas;
        let state_product = SplitWeight::for_group(
            weights
                .iter()
                .map(|w| activation.prepare(w.state.clone()))
                .collect(),
            split,
        )
        .prepared(step_mode)
        .on_host(step_mode);
        let projection_product = SplitWeight::for_group(
            weights.iter().map(|w| w.projection.clone()).collect(),
            split,
        )
        .prepared(step_mode)
        .on_host(step_mode);
        // The fused kernels write these records in place.
        let mut gates_all = elmo_kernels::empty_buffer([n_steps, rows, 4 * d_cell], &device);
        let mut memory_all = elmo_kernels::empty_buffer([n_steps, rows, d_cell], &device);
        let mut tanh_memory_all = elmo_kernels::empty_buffer([n_steps, rows, d_cell], &device);
        let mut hidden_all = elmo_kernels::empty_buffer([n_steps, rows, d_projection], &device);
        let mut split_state: Option<Tensor<3>> = None;
        for t in 0..n_steps {
            if fused {
                let recurrent = match split_state.take() {
                    Some(state) => state_product.split_left_partials(state),
                    None => state_product.left_partials(h.clone()),
                };
                let records = CellRecords {
                    gates: &gates_all,
                    memory: &memory_all,
                    tanh_memory: &tanh_memory_all,
                    hidden: &hidden_all,
                };
                let (projected, bias) = grouped.as_ref().expect("prepared for the kernels");
                let input = InputContributions { projected, bias };
                let cell_output = elmo_kernels::cell_forward(
                    input,
                    recurrent,
                    &initial.memory,
                    &records,
                    t,
                    layer.cell_clip,
                    &projection_product,
                );
                split_state = Some(elmo_kernels::hidden_forward(
                    projection_product.split_left_partials(cell_output),
                    &records,
                    t,
                    layer.projection_clip,
                    &state_product,
                ));
                continue;
            }
            let recurrent = state_product.left_product(h.clone());
            let projected = projected.as_ref().expect("joined for the composed steps");
            let gates = activation.activate(step(projected, t) + recurrent);
            let gate = |k: usize| gates.clone().narrow(1, k * d_cell, d_cell);
            let mut memory = gate(0) * gate(2) + gate(1) * c;
            if let Some(clip) = layer.cell_clip {
                memory = memory.clamp(-clip, clip);
            }
            let tanh_memory = memory.clone().tanh();
            let mut hidden = projection_product.left_product(gate(3) * tanh_memory.clone());
            if let Some(clip) = layer.projection_clip {
                hidden = hidden.clamp(-clip, clip);
            }
            let at = |width: usize| [t..t + 1, 0..rows, 0..width];
            gates_all = gates_all.slice_assign(at(4 * d_cell), gates.unsqueeze_dim(0));
            memory_all = memory_all.slice_assign(at(d_cell), memory.clone().unsqueeze_dim(0));
            tanh_memory_all =
                tanh_memory_all.slice_assign(at(d_cell), tanh_memory.unsqueeze_dim(0));
            hidden_all = hidden_all.slice_assign(at(d_projection), hidden.clone().unsqueeze_dim(0));
            h = hidden;
            c = memory;
        }
        let records = [gates_all, memory_all, tanh_memory_all, hidden_all];
        recorded(flat_inputs, records, initial)
    }

    /// The recorded forward pass as elmo-kernels' host loops ([`host_forward_steps`]) of
    /// `n_steps` steps of `batch` rows a layer, `None` where they do not run. The weights stay as they are: the loops negate the
    /// pre-activations themselves (exactly as the prepared weights would, `GateActivation`), and
    /// add the bias as they read each step's input contributions, so that neither the weights
    /// nor the contributions take a pass of their own.
    fn host_forward(
        &self,
        flat_inputs: &[Tensor<2>],
        weights: &[PlainWeights],
        initial: &LstmState,
        [n_steps, batch]: [usize; 2],
        mode: ProductMode,
    ) -> Option<(LstmOutput, LstmTape)> {
        let layer = self.first();
        let shape = [n_steps, batch, 4 * layer.d_cell()];
        let contributions = joined(
            (flat_inputs.iter().zip(weights))
                .map(|(x, w)| half_product(x.clone(), w.input.clone(), mode).reshape(shape))
                .collect(),
            1,
        );
        let group = |weight: fn(&PlainWeights) -> &Tensor<2>| {
            SplitWeight::for_group(weights.iter().map(|w| weight(w).clone()).collect(), false)
                .on_host(ProductMode {
                    host: Some(self.kernels.host_instructions),
                    ..mode
                })
        };
        let (state, projection) = (group(|w| &w.state), group(|w| &w.projection));
        let steps = HostSteps {
            state: &state,
            projection: &projection,
            cell_clip: layer.cell_clip,
            projection_clip: layer.projection_clip,
        };
        let biases: Vec<Tensor<2>> = weights.iter().map(|w| w.bias.clone()).collect();
        let HostRecords {
            gates,
            memory,
            tanh_memory,
            hidden,
        } = host_forward_steps(
            &steps,
            &contributions,
            &biases,
            &initial.hidden,
            &initial.memory,
        )?;
        let records = [gates, memory, tanh_memory, hidden];
        Some(recorded(flat_inputs.to_vec(), records, initial.clone()))
    }

    /// [`RecordedLstm::backward_recorded`] for the group: `grad_outputs` `[G·B, T, P]`,
    /// each layer's rows in turn.
    pub fn backward_recorded(&self, tape: LstmTape, grad_outputs: Tensor<3>) -> LstmGroupGradients {
        let cells = CellKernels::for_tensor(&grad_outputs, self.kernels);
        self.backward_recorded_using(tape, grad_outputs, cells)
    }

    /// [`Self::backward_recorded`] with the cell's kernels chosen by the caller.
    pub(crate) fn backward_recorded_using(
        &self,
        tape: LstmTape,
        grad_outputs: Tensor<3>,
        kernels: CellKernels,
    ) -> LstmGroupGradients {
        let grad_outputs = grad_outputs.inner();
        let device = grad_outputs.device();
        let [rows, n_steps, _] = grad_outputs.dims();
        let batch = rows / self.n_layers();
        let d_cell = self.first().d_cell();
        let d_input = tape.inputs[0].dims()[1];
        let weights = self.plain_weights();
        if n_steps == 0 {
            return LstmGroupGradients {
                inputs: Tensor::zeros([rows, 0, d_input], &device),
                weights: weights
                    .iter()
                    .map(|w| LstmWeightGradients {
                        input_weight: w.input.zeros_like(),
                        state_weight: w.state.zeros_like(),
                        bias: Tensor::zeros([4 * d_cell], &device),
                        projection: w.projection.zeros_like(),
                    })
                    .collect(),
            };
        }
        let split = kernels == CellKernels::Fused && self.kernels.split_products;
        let mode = self.kernels.product_mode(&grad_outputs);
        let step_mode = self
            .kernels
            .step_product_mode(&grad_outputs, [d_cell, self.first().d_projection()]);
        let transposed = |weight: fn(&PlainWeights) -> &Tensor<2>| {
            SplitWeight::for_group(
                weights
                    .iter()
                    .map(|w| weight(w).clone().transpose())
                    .collect(),
                split && !step_mode.vendor_blas,
            )
            .prepared(step_mode)
            .on_host(step_mode)
        };
        let transposed = TransposedWeights {
            state: transposed(|w| &w.state),
            projection: transposed(|w| &w.projection),
        };
        let StepGradients {
            gates: grad_gates,
            projected: grad_projected,
        } = match kernels {
            CellKernels::Composed => self.composed_steps(&tape, grad_outputs, &transposed),
            CellKernels::Fused => self.fused_steps(&tape, &grad_outputs, &transposed),
            CellKernels::Host => self.host_steps(&tape, grad_outputs, &transposed),
        };
        let LstmTape {
            inputs,
            gates,
            tanh_memory,
            hidden,
            initial,
            ..
        } = tape;
        let hidden_prev = previous(initial.hidden, &hidden);
        let projection_inputs = gates.narrow(2, 3 * d_cell, d_cell) * tanh_memory;
        // Layer g's rows of a `[T, G·B, d]` record as `[T·B, d]` (a copy when G > 1).
        let rows_of = |x: &Tensor<3>, g: usize| {
            let width = x.dims()[2];
            x.clone()
                .narrow(1, g * batch, batch)
                .reshape([n_steps * batch, width])
        };
        let mut grad_inputs = Vec::with_capacity(self.n_layers());
        let mut grad_weights = Vec::with_capacity(self.n_layers());
        for (g, (w, inputs)) in weights.iter().zip(inputs).enumerate() {
            let grad_gates = rows_of(&grad_gates, g);
            // In 16 bits once for its three products (each would cast it: `[T·B, 4C]`, 42M
            // values at `original` 128 × 20); the bias gradient sums the `f32` values.
            let gates_factor = to_half(grad_gates.clone(), mode.half);
            // `∂z · W_xᵀ` has a long inner dimension (4C: 16,384 at `original`) and a narrow
            // output (`d_input`: a few cubes of a GPU's matmul per row block): split along it
            // where the fused kernels run, as the weight gradients below over their rows.
            grad_inputs.push(
                transposed_product(
                    gates_factor.clone().transpose(),
                    w.input.clone().transpose(),
                    split,
                    mode,
                )
                .reshape([n_steps, batch, d_input])
                .swap_dims(0, 1),
            );
            // Products over all T·B rows: split over them where the fused kernels run.
            grad_weights.push(LstmWeightGradients {
                input_weight: transposed_product(inputs, gates_factor.clone(), split, mode),
                state_weight: transposed_product(
                    rows_of(&hidden_prev, g),
                    gates_factor,
                    split,
                    mode,
                ),
                bias: sum_columns(grad_gates, self.kernels),
                projection: transposed_product(
                    rows_of(&projection_inputs, g),
                    rows_of(&grad_projected, g),
                    split,
                    mode,
                ),
            });
        }
        LstmGroupGradients {
            inputs: Self::stacked_rows(grad_inputs),
            weights: grad_weights,
        }
    }

    /// The per-step part of [`Self::backward_recorded`] with burn's tensor operations.
    fn composed_steps(
        &self,
        tape: &LstmTape,
        grad_outputs: Tensor<3>,
        transposed: &TransposedWeights,
    ) -> StepGradients {
        let device = grad_outputs.device();
        let [rows, n_steps, d_projection] = grad_outputs.dims();
        let layer = self.first();
        let d_cell = layer.d_cell();
        let LstmTape {
            gates,
            memory,
            tanh_memory,
            hidden,
            initial,
            ..
        } = tape;
        let gate = |k: usize| gates.clone().narrow(2, k * d_cell, d_cell);
        let (input_gate, forget_gate, cell_input, output_gate) =
            (gate(0), gate(1), gate(2), gate(3));

        // All steps at once, `[T, B, ·]`.
        let memory_kept = kept_by_clip(memory, layer.cell_clip);
        let hidden_kept = kept_by_clip(hidden, layer.projection_clip);
        // d memory / d(o·tanh c), with the cell clip's mask.
        let to_memory = masked(
            output_gate * one_minus_square(tanh_memory.clone()),
            memory_kept.clone(),
        );
        // The memory gradient carried from step t+1 to t: `f_{t+1}`, masked at t.
        let carry_memory = (n_steps > 1).then(|| {
            masked(
                forget_gate.clone().narrow(0, 1, n_steps - 1),
                memory_kept
                    .clone()
                    .map(|kept| kept.narrow(0, 0, n_steps - 1)),
            )
        });
        // σ' = σ(1 − σ) for i, f, o (the g block is unused).
        let sigmoid_derivative = gates.clone() * gates.clone().neg().add_scalar(1.0);
        let derivative = |k: usize| sigmoid_derivative.clone().narrow(2, k * d_cell, d_cell);
        let memory_prev = previous(initial.memory.clone(), memory);
        // d z_{i,f,g} / d memory, and d z_o / d(o·tanh c).
        let from_memory = Tensor::cat(
            vec![
                cell_input.clone() * derivative(0),
                memory_prev * derivative(1),
                input_gate * one_minus_square(cell_input),
            ],
            2,
        );
        let from_cell_output = tanh_memory.clone() * derivative(3);
        // Time-major, every layer's rows: row `t·G·B + g·B + b`, the records' layout.
        let grad_outputs = time_major(grad_outputs).reshape([n_steps, rows, d_projection]);
        let grad_hidden_out = masked(grad_outputs, hidden_kept.clone());

        let mut grad_gates = Tensor::<3>::empty([n_steps, rows, 4 * d_cell], &device);
        let mut grad_projected = Tensor::<3>::empty([n_steps, rows, d_projection], &device);
        let mut grad_hidden_next: Option<Tensor<2>> = None;
        let mut grad_memory_next: Option<Tensor<2>> = None;
        for t in (0..n_steps).rev() {
            let mut grad_raw_hidden = step(&grad_hidden_out, t);
            if let Some(next) = grad_hidden_next.take() {
                let kept = hidden_kept.as_ref().map(|kept| step(kept, t));
                grad_raw_hidden = grad_raw_hidden + masked(next, kept);
            }
            let grad_cell_output = transposed.projection.left_product(grad_raw_hidden.clone());
            let mut grad_memory = grad_cell_output.clone() * step(&to_memory, t);
            if let Some(next) = grad_memory_next.take() {
                grad_memory = grad_memory + next;
            }
            let grad_ifg = grad_memory.clone().unsqueeze_dim::<3>(1)
                * step(&from_memory, t).reshape([rows, 3, d_cell]);
            let grad_o = grad_cell_output * step(&from_cell_output, t);
            let at = |from: usize, width: usize| [t..t + 1, 0..rows, from..from + width];
            grad_gates = grad_gates
                .slice_assign(at(0, 3 * d_cell), grad_ifg.reshape([1, rows, 3 * d_cell]))
                .slice_assign(at(3 * d_cell, d_cell), grad_o.unsqueeze_dim(0));
            grad_projected =
                grad_projected.slice_assign(at(0, d_projection), grad_raw_hidden.unsqueeze_dim(0));
            if t > 0 {
                let carry = carry_memory.as_ref().map(|carry| step(carry, t - 1));
                grad_memory_next = carry.map(|carry| grad_memory * carry);
                grad_hidden_next = Some(transposed.state.left_product(step(&grad_gates, t)));
            }
        }
        StepGradients {
            gates: grad_gates,
            projected: grad_projected,
        }
    }

    /// The per-step part of [`Self::backward_recorded`] as elmo-kernels' host loops
    /// ([`host_backward_steps`]); with burn's operations where they do not run.
    fn host_steps(
        &self,
        tape: &LstmTape,
        grad_outputs: Tensor<3>,
        transposed: &TransposedWeights,
    ) -> StepGradients {
        let layer = self.first();
        let steps = HostSteps {
            state: &transposed.state,
            projection: &transposed.projection,
            cell_clip: layer.cell_clip,
            projection_clip: layer.projection_clip,
        };
        let records = CellRecords {
            gates: &tape.gates,
            memory: &tape.memory,
            tanh_memory: &tape.tanh_memory,
            hidden: &tape.hidden,
        };
        match host_backward_steps(&steps, &records, &tape.initial.memory, &grad_outputs) {
            Some(gradients) => StepGradients {
                gates: gradients.gates,
                projected: gradients.projected,
            },
            None => self.composed_steps(tape, grad_outputs, transposed),
        }
    }

    /// The per-step part of [`Self::backward_recorded`] with the fused kernels of
    /// `cube_lstm_cell`: a step is the hidden state's gradient, `·Pᵀ`, the gates' gradients and
    /// `·Wᵀ`; nothing is computed for all steps beforehand.
    fn fused_steps(
        &self,
        tape: &LstmTape,
        grad_outputs: &Tensor<3>,
        transposed: &TransposedWeights,
    ) -> StepGradients {
        let device = grad_outputs.device();
        let [rows, n_steps, d_projection] = grad_outputs.dims();
        let layer = self.first();
        let d_cell = layer.d_cell();
        let records = CellRecords {
            gates: &tape.gates,
            memory: &tape.memory,
            tanh_memory: &tape.tanh_memory,
            hidden: &tape.hidden,
        };
        let grad_gates = elmo_kernels::empty_buffer([n_steps, rows, 4 * d_cell], &device);
        let grad_projected = elmo_kernels::empty_buffer([n_steps, rows, d_projection], &device);
        // Every step's kernel reads it: one copy here when it is strided, not one a step.
        let grad_outputs = &elmo_kernels::contiguous(grad_outputs.clone());
        let (state_product, projection_product) = (&transposed.state, &transposed.projection);
        let mut grad_hidden_next: Option<Tensor<3>> = None;
        let mut grad_memory_next: Option<Tensor<2>> = None;
        for t in (0..n_steps).rev() {
            let grad_raw_hidden = elmo_kernels::hidden_backward(
                grad_outputs,
                &tape.hidden,
                grad_hidden_next.take(),
                &grad_projected,
                t,
                layer.projection_clip,
                projection_product,
            );
            let cell = elmo_kernels::cell_backward(
                projection_product.split_left_partials(grad_raw_hidden),
                &records,
                &tape.initial.memory,
                grad_memory_next.take(),
                &grad_gates,
                t,
                layer.cell_clip,
                state_product,
            );
            grad_memory_next = cell.grad_memory_previous;
            if t > 0 {
                grad_hidden_next = Some(state_product.split_left_partials(cell.grad_gates));
            }
        }
        StepGradients {
            gates: grad_gates,
            projected: grad_projected,
        }
    }
}

/// The training fast path of an [`LstmWithProjection`]: a recorded forward pass outside autodiff
/// and its hand-written backpropagation through time (a group of one, [`LstmGroup`]).
pub trait RecordedLstm {
    /// `LstmWithProjection::forward` for rows that all run `T` steps left to right, computed
    /// outside autodiff (inputs, state and weights are used without their autodiff association)
    /// and recorded for [`Self::backward_recorded`]. Outputs equal `forward`'s up to float
    /// rounding.
    ///
    /// Few operations per step (each one a kernel launch on a GPU): the gates in one
    /// `GateActivation` pass, the steps' records written into preallocated time-major buffers;
    /// where `kernels` runs them, the fused cell kernels of elmo-kernels ([`CellKernels`]).
    ///
    /// # Shapes
    /// - inputs: `[B, T, d_input]`
    /// - output: `outputs` `[B, T, P]`, the state after step `T`
    fn forward_recorded(
        &self,
        inputs: Tensor<3>,
        initial_state: Option<LstmState>,
        kernels: KernelSettings,
    ) -> (LstmOutput, LstmTape);

    /// Backpropagation through time of a [`Self::forward_recorded`] pass, given the gradient of
    /// its outputs (none flows out of the final state or into the initial state).
    ///
    /// Everything that does not depend on the gradient flowing back through time (the gates'
    /// derivatives, the clip masks) is computed for all steps at once before the loop; a step
    /// is then two matmuls and a few elementwise operations, and each weight gradient is one
    /// matmul over all steps (`[x_t]ᵀ·[dz_t]`), as cuDNN does. With the fused kernels
    /// ([`CellKernels`]) those factors are computed inside the step instead: a step is two
    /// matmuls and two kernels, with nothing computed beforehand.
    ///
    /// # Shapes
    /// - grad_outputs: `[B, T, P]`
    /// - output: [`LstmGradients`]
    fn backward_recorded(
        &self,
        tape: LstmTape,
        grad_outputs: Tensor<3>,
        kernels: KernelSettings,
    ) -> LstmGradients;
}

impl RecordedLstm for LstmWithProjection {
    fn forward_recorded(
        &self,
        inputs: Tensor<3>,
        initial_state: Option<LstmState>,
        kernels: KernelSettings,
    ) -> (LstmOutput, LstmTape) {
        LstmGroup::new(vec![self], kernels).forward_recorded(inputs, initial_state)
    }

    fn backward_recorded(
        &self,
        tape: LstmTape,
        grad_outputs: Tensor<3>,
        kernels: KernelSettings,
    ) -> LstmGradients {
        let LstmGroupGradients {
            inputs,
            mut weights,
        } = LstmGroup::new(vec![self], kernels).backward_recorded(tape, grad_outputs);
        LstmGradients {
            inputs,
            weights: weights.remove(0),
        }
    }
}

/// The transposed weights that backpropagation through time multiplies by at every step, one
/// per layer of the group (split along K on the fused path).
struct TransposedWeights {
    /// `[4C, P]` each.
    state: SplitWeight,
    /// `[P, C]` each.
    projection: SplitWeight,
}

/// What the per-step part of backpropagation through time produces, time-major.
struct StepGradients {
    /// `[T, B, 4C]`: the gradients of the gate pre-activations.
    gates: Tensor<3>,
    /// `[T, B, P]`: the gradients of the projection's outputs (before its clip).
    projected: Tensor<3>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};
    use elmo_kernels::HostInstructions;
    use elmo_model::LstmWithProjectionConfig;

    const ON: KernelSettings = KernelSettings::ALL;

    /// A layer of `[d_input, d_cell, d_projection]` with weights drawn from `seed`.
    fn seeded_layer(
        device: &Device,
        seed: u64,
        [d_input, d_cell, d_projection]: [usize; 3],
        cell_clip: Option<f64>,
        projection_clip: Option<f64>,
    ) -> LstmWithProjection {
        LstmWithProjectionConfig {
            d_input,
            d_cell,
            d_projection,
            cell_clip,
            projection_clip,
        }
        .init_seeded(device, seed)
    }

    fn values(n: usize, scale: f32, phase: f32) -> Vec<f32> {
        (0..n)
            .map(|i| scale * (i as f32 * 0.61 + phase).sin())
            .collect()
    }

    /// Outputs equal the autodiff path's, and every gradient equals autodiff's, with both clips
    /// active somewhere (large inputs and a small clip) and a non-zero initial state.
    #[test]
    fn hand_written_gradients_equal_autodiff() {
        check_against_autodiff(&Device::flex().autodiff());
    }

    /// The same on wgpu (in CI: lavapipe), where the recorded passes run the fused cell kernels.
    #[test]
    fn fused_kernels_equal_autodiff_on_wgpu() {
        if let Some(device) =
            elmo_test_support::wgpu_device_or_skip("fused_kernels_equal_autodiff_on_wgpu")
        {
            let probe = Tensor::<1>::zeros([1], &device);
            assert_eq!(CellKernels::for_tensor(&probe, ON), CellKernels::Fused);
            check_against_autodiff(&device.autodiff());
        }
    }

    /// `expected` and `got` agree to 1e-5 of `expected`'s largest magnitude (at least 1).
    fn assert_close<const D: usize>(name: &str, expected: Tensor<D>, got: Tensor<D>) {
        let scale: f32 = expected.clone().abs().max().into_scalar();
        let error: f32 = (expected - got).abs().max().into_scalar();
        assert!(
            error <= 1e-5 * scale.max(1.0),
            "{name}: error {error}, scale {scale}"
        );
    }

    /// The outputs, final state and every gradient of two runs agree ([`assert_close`]).
    fn assert_same_run(
        what: &str,
        (expected, expected_grads): (&LstmOutput, &LstmGradients),
        (got, got_grads): (&LstmOutput, &LstmGradients),
    ) {
        let close =
            |name: &str, a: Tensor<2>, b: Tensor<2>| assert_close(&format!("{what}: {name}"), a, b);
        assert_close(
            &format!("{what}: outputs"),
            expected.outputs.clone(),
            got.outputs.clone(),
        );
        let (e, g) = (&expected.final_state, &got.final_state);
        close("final hidden", e.hidden.clone(), g.hidden.clone());
        close("final memory", e.memory.clone(), g.memory.clone());
        assert_close(
            &format!("{what}: inputs"),
            expected_grads.inputs.clone(),
            got_grads.inputs.clone(),
        );
        let (e, g) = (expected_grads.weights.clone(), got_grads.weights.clone());
        close("input_weight", e.input_weight, g.input_weight);
        close("state_weight", e.state_weight, g.state_weight);
        close("projection", e.projection, g.projection);
        assert_close(&format!("{what}: bias"), e.bias, g.bias);
    }

    /// Inputs, output gradients and a start state for `rows` rows at C = P = 256 (the fused path
    /// splits all four step products along K there: 2, 2, 2 and 8 slices), large enough for both
    /// clips of [`wide_layer`] to cut.
    struct WideCase {
        inputs: Tensor<3>,
        grad_outputs: Tensor<3>,
        start: LstmState,
    }

    const WIDE: [usize; 3] = [12, 256, 256];
    const WIDE_STEPS: usize = 5;

    /// A layer of [`WIDE`] shape with both clips, its bias its own (`seed`'s) as well as its
    /// weights, so that a group's layers differ in every parameter.
    fn wide_layer(device: &Device, seed: u64) -> LstmWithProjection {
        let mut layer = seeded_layer(device, seed, WIDE, Some(0.5), Some(0.3));
        let n = 4 * WIDE[1];
        let bias = TensorData::new(values(n, 0.4, seed as f32), [n]);
        layer.bias = burn::module::Param::from_tensor(Tensor::from_data(bias, device));
        layer
    }

    impl WideCase {
        fn new(device: &Device, rows: usize) -> Self {
            let [d_input, d_cell, d_projection] = WIDE;
            let tensor = |scale: f32, phase: f32, shape: [usize; 3]| {
                let n = shape.iter().product();
                Tensor::<3>::from_data(TensorData::new(values(n, scale, phase), shape), device)
            };
            let state = |scale: f32, phase: f32, width: usize| {
                tensor(scale, phase, [1, rows, width]).reshape([rows, width])
            };
            Self {
                inputs: tensor(3.0, 0.5, [rows, WIDE_STEPS, d_input]),
                grad_outputs: tensor(1.0, 1.5, [rows, WIDE_STEPS, d_projection]),
                start: LstmState {
                    hidden: state(0.3, 2.5, d_projection),
                    memory: state(0.8, 3.5, d_cell),
                },
            }
        }

        /// Rows `from .. from + n`.
        fn rows(&self, from: usize, n: usize) -> Self {
            let rows3 = |x: &Tensor<3>| x.clone().narrow(0, from, n);
            let rows2 = |x: &Tensor<2>| x.clone().narrow(0, from, n);
            Self {
                inputs: rows3(&self.inputs),
                grad_outputs: rows3(&self.grad_outputs),
                start: LstmState {
                    hidden: rows2(&self.start.hidden),
                    memory: rows2(&self.start.memory),
                },
            }
        }

        /// Forward and backward through `layers` as one group.
        fn run(
            &self,
            layers: &[&LstmWithProjection],
            kernels: CellKernels,
        ) -> (LstmOutput, LstmGroupGradients) {
            self.run_with(layers, kernels, ON)
        }

        /// [`Self::run`] with `settings`.
        fn run_with(
            &self,
            layers: &[&LstmWithProjection],
            kernels: CellKernels,
            settings: KernelSettings,
        ) -> (LstmOutput, LstmGroupGradients) {
            let group = LstmGroup::new(layers.to_vec(), settings);
            let (output, tape) = group.forward_recorded_using(
                self.inputs.clone(),
                Some(self.start.clone()),
                kernels,
            );
            let grads = group.backward_recorded_using(tape, self.grad_outputs.clone(), kernels);
            (output, grads)
        }
    }

    /// One layer's run from a group of one.
    fn alone((output, mut grads): (LstmOutput, LstmGroupGradients)) -> (LstmOutput, LstmGradients) {
        let weights = grads.weights.remove(0);
        let inputs = grads.inputs;
        (output, LstmGradients { inputs, weights })
    }

    /// The fused kernels against the composed operations on the same wgpu device, at a width
    /// that spans several workgroups and splits every step product, with both clips cutting:
    /// outputs, final state and every gradient.
    #[test]
    fn fused_kernels_equal_composed_on_wgpu() {
        let Some(device) =
            elmo_test_support::wgpu_device_or_skip("fused_kernels_equal_composed_on_wgpu")
        else {
            return;
        };
        check_against_composed(&device, CellKernels::Fused);
    }

    /// The host loops against the composed operations on flex, as above (more rows than the
    /// product kernel's blocks, rows shared among threads in the cell passes), with every
    /// instruction set this CPU has.
    #[test]
    fn host_loops_equal_composed_on_flex() {
        let device = Device::flex();
        let probe = Tensor::<1>::zeros([1], &device);
        assert_eq!(CellKernels::for_tensor(&probe, ON), CellKernels::Host);
        let composed_only = KernelSettings {
            host_recurrence: false,
            ..ON
        };
        assert_eq!(
            CellKernels::for_tensor(&probe, composed_only),
            CellKernels::Composed
        );
        for host_instructions in HostInstructions::EVERY {
            let settings = KernelSettings {
                host_instructions,
                ..ON
            };
            check_against_composed_with(&device, CellKernels::Host, settings);
        }
    }

    /// With [`Precision::Mixed`](elmo_kernels::Precision) on flex, where this CPU has a unit
    /// for `bf16` products (AMX's tiles, AVX512-BF16), the host loops' products run in `bf16`
    /// (the input projection, every step's state and projection products forward and
    /// backward, the input and weight gradients): the outputs, final state and every gradient
    /// within 2% of their largest value of the `f32` run's (measured on a Xeon with AMX:
    /// 2.7e-3 for the outputs, 7.5e-3 at most, the projection's gradient), and not equal to
    /// them.
    #[test]
    fn host_loops_in_bf16_stay_within_its_rounding() {
        if !elmo_kernels::host_bf16_products(HostInstructions::Widest) {
            eprintln!("skipping: this CPU has no unit for bf16 products");
            return;
        }
        fn relative<const D: usize>(name: &str, exact: Tensor<D>, mixed: Tensor<D>) -> f32 {
            let scale: f32 = exact.clone().abs().max().into_scalar();
            let error: f32 = (exact - mixed).abs().max().into_scalar();
            let relative = error / scale;
            assert!(relative < 0.02, "{name}: {relative}");
            relative
        }
        let device = Device::flex();
        let layer = wide_layer(&device, 11);
        let case = WideCase::new(&device, 10);
        let (exact, exact_grads) = alone(case.run(&[&layer], CellKernels::Host));
        let mixed = KernelSettings {
            precision: elmo_kernels::Precision::Mixed,
            ..ON
        };
        let (got, grads) = alone(case.run_with(&[&layer], CellKernels::Host, mixed));
        let (e, g) = (exact_grads.weights, grads.weights);
        let errors = [
            relative("outputs", exact.outputs, got.outputs),
            relative("hidden", exact.final_state.hidden, got.final_state.hidden),
            relative("memory", exact.final_state.memory, got.final_state.memory),
            relative("inputs", exact_grads.inputs, grads.inputs),
            relative("input_weight", e.input_weight, g.input_weight),
            relative("state_weight", e.state_weight, g.state_weight),
            relative("projection", e.projection, g.projection),
            relative("bias", e.bias, g.bias),
        ];
        assert!(
            errors.iter().all(|&error| error > 1e-5),
            "some part ran in f32: {errors:?}"
        );
    }

    /// Regression: the host loops' clips replaced a NaN by a bound (`max`/`min`), so a run whose
    /// weights had diverged went on with finite losses (elmo-train's
    /// `non_finite_loss_stops_with_the_last_checkpoint_intact`). A NaN input stays NaN in the
    /// outputs and the memory, as with burn's operations, with both clips set.
    #[test]
    fn host_loops_keep_a_nan() {
        let device = Device::flex();
        let layer = wide_layer(&device, 11);
        let case = WideCase::new(&device, 3);
        let nan = Tensor::<3>::from_data(TensorData::new(vec![f32::NAN], [1, 1, 1]), &device);
        let inputs = case.inputs.clone().slice_assign([1..2, 2..3, 0..1], nan);
        let group = LstmGroup::new(vec![&layer], ON);
        for kernels in [CellKernels::Composed, CellKernels::Host] {
            let (output, _) =
                group.forward_recorded_using(inputs.clone(), Some(case.start.clone()), kernels);
            let nans = |x: Tensor<2>| x.is_nan().int().sum().into_scalar::<i64>();
            let outputs = output.outputs.clone().reshape([3 * WIDE_STEPS, WIDE[2]]);
            assert!(nans(outputs) > 0, "{kernels:?}: outputs");
            assert!(nans(output.final_state.memory) > 0, "{kernels:?}: memory");
        }
    }

    /// `kernels` against the composed operations on `device` for [`WideCase`] (both clips cut).
    fn check_against_composed(device: &Device, kernels: CellKernels) {
        check_against_composed_with(device, kernels, ON);
    }

    /// [`check_against_composed`] with `settings`.
    fn check_against_composed_with(
        device: &Device,
        kernels: CellKernels,
        settings: KernelSettings,
    ) {
        let layer = wide_layer(device, 11);
        let case = WideCase::new(device, 10);
        let composed = alone(case.run(&[&layer], CellKernels::Composed));
        let got = alone(case.run_with(&[&layer], kernels, settings));
        let clipped = |x: &Tensor<3>, clip: f32| -> usize {
            let cut = x.clone().abs().greater_equal_elem(clip - 1e-6);
            cut.int().sum().into_scalar::<i64>() as usize
        };
        assert!(
            clipped(&composed.0.outputs, 0.3) > 0,
            "projection clip never cut"
        );
        let memory_cut: f32 = composed
            .0
            .final_state
            .memory
            .clone()
            .abs()
            .max()
            .into_scalar();
        assert!((memory_cut - 0.5).abs() < 1e-6, "cell clip never cut");
        let what = format!("{kernels:?} {:?}", settings.host_instructions);
        assert_same_run(&what, (&composed.0, &composed.1), (&got.0, &got.1));
    }

    /// A group of two layers (a biLM layer's two directions) equals each layer run alone on its
    /// rows: outputs, final state and every gradient. Composed and host loops on flex (batched
    /// products over the group; each group's rows with its own packed weights) and fused on
    /// wgpu (one launch per kernel for both, the grouped split layout `[G·S, B, K/S]` of every
    /// product).
    #[test]
    fn a_group_equals_its_layers_alone() {
        let mut runs = vec![
            (Device::flex(), CellKernels::Composed),
            (Device::flex(), CellKernels::Host),
        ];
        runs.extend(
            elmo_test_support::wgpu_device_or_skip("a_group_equals_its_layers_alone")
                .map(|device| (device, CellKernels::Fused)),
        );
        let batch = 3;
        for (device, kernels) in runs {
            let layers = [wide_layer(&device, 11), wide_layer(&device, 12)];
            let case = WideCase::new(&device, 2 * batch);
            let (output, grads) = case.run(&[&layers[0], &layers[1]], kernels);
            for (g, layer) in layers.iter().enumerate() {
                let rows3 = |x: &Tensor<3>| LstmGroup::rows_of(x, g, 2);
                let rows2 = |x: &Tensor<2>| LstmGroup::rows_of(x, g, 2);
                let grouped = (
                    LstmOutput {
                        outputs: rows3(&output.outputs),
                        final_state: LstmState {
                            hidden: rows2(&output.final_state.hidden),
                            memory: rows2(&output.final_state.memory),
                        },
                    },
                    LstmGradients {
                        inputs: rows3(&grads.inputs),
                        weights: grads.weights[g].clone(),
                    },
                );
                let expected = alone(case.rows(g * batch, batch).run(&[layer], kernels));
                let what = format!("{kernels:?} layer {g}");
                assert_same_run(&what, (&expected.0, &expected.1), (&grouped.0, &grouped.1));
            }
        }
    }

    fn check_against_autodiff(device: &Device) {
        let device = device.clone();
        // The third case saturates the gates (`exp` overflows to infinity in `σ(z) = 1/(1 + e⁻ᶻ)`);
        // the last has one step (`elmo train --unroll-steps 1`, which panicked in `previous`).
        for (cell_clip, projection_clip, input_scale, n_steps) in [
            (Some(0.5), Some(0.08), 2.5, 6),
            (None, None, 2.5, 6),
            (None, None, 400.0, 6),
            (None, None, 2.5, 1),
        ] {
            let layer = seeded_layer(&device, 3, [5, 7, 4], cell_clip, projection_clip);
            let batch = 3;
            let data = |n: usize, scale: f32, phase: f32, shape: Vec<usize>| {
                TensorData::new(values(n, scale, phase), shape)
            };
            let inputs = Tensor::<3>::from_data(
                data(
                    batch * n_steps * 5,
                    input_scale,
                    0.0,
                    vec![batch, n_steps, 5],
                ),
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

            let (recorded, tape) = layer.forward_recorded(inputs.clone(), Some(start), ON);
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
            let manual = layer.backward_recorded(tape, weights.inner(), ON);
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

    /// Zero steps: empty outputs, the initial state as the final one, zero weight gradients.
    #[test]
    fn zero_steps_record_nothing() {
        let device = Device::flex();
        let layer = seeded_layer(&device, 4, [3, 4, 2], Some(1.0), Some(1.0));
        let (output, tape) = layer.forward_recorded(Tensor::zeros([2, 0, 3], &device), None, ON);
        assert_eq!(output.outputs.dims(), [2, 0, 2]);
        assert_eq!(output.final_state.memory.dims(), [2, 4]);
        let grads = layer.backward_recorded(tape, Tensor::zeros([2, 0, 2], &device), ON);
        assert_eq!(grads.inputs.dims(), [2, 0, 3]);
        let total: f32 = grads.weights.state_weight.abs().sum().into_scalar();
        assert_eq!(total, 0.0);
    }
}
