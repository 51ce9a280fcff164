//! Fused LSTMP cell kernels for CubeCL devices: one time step of elmo-train's recorded LSTM
//! forward pass (`lstm_backward.rs`) and of its backpropagation through time as two
//! elementwise kernels each, beside the step's two matmuls (the same equations as
//! `lstm_backward.rs`: Sak et al. 2014 as in bilm-tf's `LSTMCell(num_proj, cell_clip,
//! proj_clip)`).
//!
//! Why: on a GPU a training step's time is per-kernel overhead, not arithmetic
//! (profiled on GPUs). Written with burn's tensor operations a time step of
//! one layer is ~32 kernels (forward and backward); here it is 8: forward `h·W`, the cell
//! (gates, memory, clip, `tanh`, `o·tanh c`, the tape written in place), the projection, its
//! clip; backward the hidden state's gradient (clip mask, tape), `·Pᵀ`, the gates' gradients
//! with the memory gradient carried to the previous step, `·Wᵀ`.
//!
//! Layout: every tensor is contiguous and row-major; `[T, B, ·]` records are time-major (row
//! `t·B + b`) and written at step `t` in place, as `slice_assign` into a uniquely held buffer
//! would. The step products are split along K (`split_product`): each kernel writes the next
//! product's left factor in the sliced layout `[S, B, K/S]` and sums the partial products
//! `[S, B, N]` it reads, so the split costs no copy and no kernel. A group of G layers (the two
//! directions of a biLM layer, `LstmGroup`) runs as one: its rows are stacked (`[T, G·B, ·]`
//! records), each product is one batched matmul over the groups' weights, and the split layout
//! is `[G·S, B, K/S]` (`SplitLayout`), so a step's kernels serve all G. The gate pre-activations
//! arrive prepared by `GateActivation` (negated, doubled for `g`), and the activation is its
//! formula, so both paths give the same values.

use burn::tensor::Tensor;

use crate::KernelSettings;
#[cfg(feature = "cubecl")]
use crate::cube_tensor::{
    ElementwiseOutput, element_type, empty_buffer_of, kernel_in_place, kernel_input,
    kernel_input_or, kernel_rows_input,
};
use crate::split_product::SplitWeight;

/// Why the fused cell functions cannot run in a build without the `cubecl` feature: there
/// [`CellKernels::for_tensor`] never chooses them.
#[cfg(not(feature = "cubecl"))]
const NOT_BUILT: &str = "the fused LSTM cell kernels need elmo-kernels' `cubecl` feature";

/// The kernels (CubeCL's `Tensor` is not burn's, hence a module of their own).
#[cfg(feature = "cubecl")]
pub(crate) mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    use crate::gate_activation::EXP_LIMIT;

    /// `1 / (1 + exp(clamp(x)))`: `σ(−x)`, the activation of a prepared pre-activation.
    #[cube]
    fn prepared_sigmoid<F: Float>(prepared: F) -> F {
        let limit = F::new(EXP_LIMIT);
        F::new(1.0) / (F::new(1.0) + prepared.clamp(-limit, limit).exp())
    }

    /// Where `(row, column)` of a `[G·B, K]` matrix lies in its split layout `[G·S, B, K / S]`
    /// (`split_product::SplitLayout`: per group of B rows, the S slices of K one after the
    /// other; row-major at one group and one slice), `[n_planes, batch, width]` being the shape
    /// `[G·S, B, K / S]` of the split tensor.
    #[cube]
    pub(crate) fn split_index(
        row: usize,
        column: usize,
        n_planes: usize,
        batch: usize,
        width: usize,
        n_groups: u32,
    ) -> usize {
        let n_slices = n_planes / n_groups as usize;
        ((row / batch * n_slices + column / width) * batch + row % batch) * width + column % width
    }

    /// `Σ_s partials[g·S + s, b, column]` for `row = g·B + b`: the sum, in order, of a split
    /// product's partial products `[G·S, B, N]` (`split_product::SplitLayout`; one plane per
    /// group when whole), read at their strides (rows contiguous, possibly padded: a matmul's
    /// output on CUDA, `cube_tensor::kernel_rows_input`).
    #[cube]
    pub(crate) fn summed<F: Float>(
        partials: &Tensor<F>,
        row: usize,
        column: usize,
        n_groups: u32,
    ) -> F {
        let n_partials = partials.shape(0) / n_groups as usize;
        let batch = partials.shape(1);
        let plane = partials.stride(0);
        let index =
            (row / batch) * n_partials * plane + (row % batch) * partials.stride(1) + column;
        let mut total = partials[index];
        for s in 1..n_partials {
            total += partials[s * plane + index];
        }
        total
    }

    /// The activated gates `(i, f, g, o)` of `unit` of `row` at step `plane` of the prepared
    /// input contributions `projected` `[G, T, B, 4C]` (layer `g`'s rows `g·B .. (g+1)·B`; read
    /// at its strides, rows possibly padded; gate `k` at column `unit + k·C`) plus the prepared
    /// bias of the row's layer (`bias` `[G, 4C]`) plus the recurrent partial products (summed
    /// in order): `(x·W + b) + h·W`, in the order of adding the bias to the input contributions
    /// first.
    #[cube]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn activated_gates<F: Float>(
        projected: &Tensor<F>,
        bias: &Tensor<F>,
        recurrent: &Tensor<F>,
        plane: usize,
        row: usize,
        unit: usize,
        d_cell: usize,
        n_groups: u32,
    ) -> (F, F, F, F) {
        let batch = projected.shape(2);
        let group = row / batch;
        let gate_base = group * projected.stride(0)
            + plane * projected.stride(1)
            + (row % batch) * projected.stride(2)
            + unit;
        let bias_base = group * bias.stride(0) + unit;
        let z_i =
            (projected[gate_base] + bias[bias_base]) + summed::<F>(recurrent, row, unit, n_groups);
        let z_f = (projected[gate_base + d_cell] + bias[bias_base + d_cell])
            + summed::<F>(recurrent, row, unit + d_cell, n_groups);
        let z_g = (projected[gate_base + 2 * d_cell] + bias[bias_base + 2 * d_cell])
            + summed::<F>(recurrent, row, unit + 2 * d_cell, n_groups);
        let z_o = (projected[gate_base + 3 * d_cell] + bias[bias_base + 3 * d_cell])
            + summed::<F>(recurrent, row, unit + 3 * d_cell, n_groups);
        (
            prepared_sigmoid::<F>(z_i),
            prepared_sigmoid::<F>(z_f),
            prepared_sigmoid::<F>(z_g) * F::new(2.0) - F::new(1.0),
            prepared_sigmoid::<F>(z_o),
        )
    }

    /// The memory `i·g + f·c` clipped to `±cell_clip` when `has_clip`.
    #[cube]
    pub(crate) fn next_memory<F: Float>(
        memory: F,
        cell_clip: f32,
        #[comptime] has_clip: bool,
    ) -> F {
        let mut next = memory;
        if has_clip {
            let clip = F::cast_from(cell_clip);
            next = next.clamp(-clip, clip);
        }
        next
    }

    /// `|x| < clip` as 1 or 0 (1 without a clip).
    // The outer `if` is resolved when the kernel is compiled, the inner one when it runs.
    #[allow(clippy::collapsible_if)]
    #[cube]
    fn kept<F: Float>(x: F, clip: F, #[comptime] has_clip: bool) -> F {
        let mut kept = F::new(1.0);
        if has_clip {
            if x.abs() >= clip {
                kept = F::new(0.0);
            }
        }
        kept
    }

    /// One step of the cell, one unit per `(b, j)`: activates the gates, updates and clips the
    /// memory, and writes the gates, memory and `tanh(memory)` of step `t` and `o·tanh(memory)`
    /// (in the split layout of `cell_output`'s shape and in its type `L`, for the projection's
    /// product).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cell_forward_kernel<F: Float, L: Float>(
        projected: &Tensor<F>,
        bias: &Tensor<F>,
        recurrent: &Tensor<F>,
        initial_memory: &Tensor<F>,
        gates: &mut Tensor<F>,
        memory: &mut Tensor<F>,
        tanh_memory: &mut Tensor<F>,
        cell_output: &mut Tensor<L>,
        step: u32,
        cell_clip: f32,
        n_groups: u32,
        #[comptime] has_clip: bool,
        #[define(F, L)] _dtypes: [ElemType; 2],
    ) {
        let position = ABSOLUTE_POS;
        if position >= initial_memory.len() {
            terminate!();
        }
        let d_cell = initial_memory.shape(1);
        let batch = initial_memory.shape(0);
        let row = position / d_cell;
        let unit = position % d_cell;
        let t = step as usize;
        let gate_base = (t * batch + row) * 4 * d_cell + unit;
        let (input_gate, forget_gate, cell_input, output_gate) =
            activated_gates::<F>(projected, bias, recurrent, t, row, unit, d_cell, n_groups);
        let previous = if t == 0 {
            initial_memory[position]
        } else {
            memory[(t - 1) * batch * d_cell + position]
        };
        let next = next_memory::<F>(
            input_gate * cell_input + forget_gate * previous,
            cell_clip,
            has_clip,
        );
        let squashed = next.tanh();
        gates[gate_base] = input_gate;
        gates[gate_base + d_cell] = forget_gate;
        gates[gate_base + 2 * d_cell] = cell_input;
        gates[gate_base + 3 * d_cell] = output_gate;
        let record = t * batch * d_cell + position;
        memory[record] = next;
        tanh_memory[record] = squashed;
        let (n_planes, split_batch, width) = (
            cell_output.shape(0),
            cell_output.shape(1),
            cell_output.shape(2),
        );
        cell_output[split_index(row, unit, n_planes, split_batch, width, n_groups)] =
            L::cast_from(output_gate * squashed);
    }

    /// The projection's clip at step `t`: writes the clipped hidden state into the record and into
    /// the state carried to the next step (in the split layout of `state`'s shape and in its
    /// type `L`).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn hidden_forward_kernel<F: Float, L: Float>(
        projected: &Tensor<F>,
        hidden: &mut Tensor<F>,
        state: &mut Tensor<L>,
        step: u32,
        projection_clip: f32,
        n_groups: u32,
        #[comptime] has_clip: bool,
        #[define(F, L)] _dtypes: [ElemType; 2],
    ) {
        let position = ABSOLUTE_POS;
        let batch = hidden.shape(1);
        let d_projection = hidden.shape(2);
        let size = batch * d_projection;
        if position >= size {
            terminate!();
        }
        let (row, unit) = (position / d_projection, position % d_projection);
        let mut value = summed::<F>(projected, row, unit, n_groups);
        if has_clip {
            let clip = F::cast_from(projection_clip);
            value = value.clamp(-clip, clip);
        }
        hidden[step as usize * size + position] = value;
        let (n_planes, split_batch, width) = (state.shape(0), state.shape(1), state.shape(2));
        state[split_index(row, unit, n_planes, split_batch, width, n_groups)] = L::cast_from(value);
    }

    /// The gradient of the hidden state before its clip at step `t`: the output's gradient (read
    /// from the batch-major `[B, T, P]`) plus the one from step `t + 1`, masked by the clip; written
    /// into the record and returned (in the split layout of `grad_hidden`'s shape and in its
    /// type `L`).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn hidden_backward_kernel<F: Float, L: Float>(
        grad_outputs: &Tensor<F>,
        hidden: &Tensor<F>,
        grad_next: &Tensor<F>,
        grad_projected: &mut Tensor<F>,
        grad_hidden: &mut Tensor<L>,
        step: u32,
        projection_clip: f32,
        n_groups: u32,
        #[comptime] has_next: bool,
        #[comptime] has_clip: bool,
        #[define(F, L)] _dtypes: [ElemType; 2],
    ) {
        let position = ABSOLUTE_POS;
        if position >= grad_hidden.len() {
            terminate!();
        }
        let n_steps = grad_outputs.shape(1);
        let d_projection = grad_outputs.shape(2);
        let row = position / d_projection;
        let unit = position % d_projection;
        let t = step as usize;
        let record = t * grad_hidden.len() + position;
        let mut value = grad_outputs[(row * n_steps + t) * d_projection + unit];
        if has_next {
            value += summed::<F>(grad_next, row, unit, n_groups);
        }
        value *= kept::<F>(hidden[record], F::cast_from(projection_clip), has_clip);
        grad_projected[record] = value;
        let (n_planes, split_batch, width) = (
            grad_hidden.shape(0),
            grad_hidden.shape(1),
            grad_hidden.shape(2),
        );
        grad_hidden[split_index(row, unit, n_planes, split_batch, width, n_groups)] =
            L::cast_from(value);
    }

    /// The gates' gradients at step `t` from the gradient of `o·tanh(memory)` and the memory
    /// gradient carried from step `t + 1`; writes them into the record and, in the split layout
    /// of its shape and in its type `L`, into `grad_gates_split` (for the product with `Wᵀ`),
    /// and returns the memory gradient carried to step `t − 1` (`· f_t`, masked by the clip of
    /// memory `t − 1`).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cell_backward_kernel<F: Float, L: Float>(
        grad_cell_output: &Tensor<F>,
        gates: &Tensor<F>,
        memory: &Tensor<F>,
        tanh_memory: &Tensor<F>,
        initial_memory: &Tensor<F>,
        grad_memory_next: &Tensor<F>,
        grad_gates: &mut Tensor<F>,
        grad_gates_split: &mut Tensor<L>,
        grad_memory_previous: &mut Tensor<F>,
        step: u32,
        cell_clip: f32,
        n_groups: u32,
        #[comptime] has_next: bool,
        #[comptime] has_clip: bool,
        #[define(F, L)] _dtypes: [ElemType; 2],
    ) {
        let position = ABSOLUTE_POS;
        if position >= initial_memory.len() {
            terminate!();
        }
        let batch = initial_memory.shape(0);
        let d_cell = initial_memory.shape(1);
        let size = initial_memory.len();
        let row = position / d_cell;
        let unit = position % d_cell;
        let t = step as usize;
        let clip = F::cast_from(cell_clip);
        let one = F::new(1.0);
        let gate_base = (t * batch + row) * 4 * d_cell + unit;
        let input_gate = gates[gate_base];
        let forget_gate = gates[gate_base + d_cell];
        let cell_input = gates[gate_base + 2 * d_cell];
        let output_gate = gates[gate_base + 3 * d_cell];
        let record = t * size + position;
        let squashed = tanh_memory[record];
        let grad_output = summed::<F>(grad_cell_output, row, unit, n_groups);
        let mut grad_memory = grad_output
            * (output_gate * (one - squashed * squashed))
            * kept::<F>(memory[record], clip, has_clip);
        if has_next {
            grad_memory += grad_memory_next[position];
        }
        let previous = if t == 0 {
            initial_memory[position]
        } else {
            memory[record - size]
        };
        let grad_i = grad_memory * (cell_input * (input_gate * (one - input_gate)));
        let grad_f = grad_memory * (previous * (forget_gate * (one - forget_gate)));
        let grad_g = grad_memory * (input_gate * (one - cell_input * cell_input));
        let grad_o = grad_output * (squashed * (output_gate * (one - output_gate)));
        grad_gates[gate_base] = grad_i;
        grad_gates[gate_base + d_cell] = grad_f;
        grad_gates[gate_base + 2 * d_cell] = grad_g;
        grad_gates[gate_base + 3 * d_cell] = grad_o;
        let (n_planes, split_batch, width) = (
            grad_gates_split.shape(0),
            grad_gates_split.shape(1),
            grad_gates_split.shape(2),
        );
        let at_i = split_index(row, unit, n_planes, split_batch, width, n_groups);
        let at_f = split_index(row, unit + d_cell, n_planes, split_batch, width, n_groups);
        let at_g = split_index(
            row,
            unit + 2 * d_cell,
            n_planes,
            split_batch,
            width,
            n_groups,
        );
        let at_o = split_index(
            row,
            unit + 3 * d_cell,
            n_planes,
            split_batch,
            width,
            n_groups,
        );
        grad_gates_split[at_i] = L::cast_from(grad_i);
        grad_gates_split[at_f] = L::cast_from(grad_f);
        grad_gates_split[at_g] = L::cast_from(grad_g);
        grad_gates_split[at_o] = L::cast_from(grad_o);
        if t > 0 {
            grad_memory_previous[position] =
                grad_memory * forget_gate * kept::<F>(previous, clip, has_clip);
        }
    }
}

/// Which kernels run a time step of the recorded LSTM passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellKernels {
    /// burn's tensor operations (~32 kernels a step and layer on a GPU): every backend.
    Composed,
    /// The fused kernels of this module: CubeCL devices with the `cubecl` feature only.
    Fused,
    /// The host loops of `host_lstm_cell.rs` ([`crate::host_forward_steps`]): `f32` tensors of
    /// burn's flex backend outside autodiff, with the `flex` feature only.
    Host,
}

impl CellKernels {
    /// `Fused` where `kernels` runs the fused kernels on `tensor`
    /// ([`KernelSettings::fused_for`]), `Host` where it runs the host kernels on it
    /// ([`KernelSettings::host_for`]); `Composed` elsewhere.
    pub fn for_tensor<const D: usize>(tensor: &Tensor<D>, kernels: KernelSettings) -> Self {
        if kernels.fused_for(tensor) {
            Self::Fused
        } else if kernels.host_for(tensor) {
            Self::Host
        } else {
            Self::Composed
        }
    }
}

/// A clip as the kernels take it: the value (unused without one) and whether there is one.
#[cfg(feature = "cubecl")]
fn clip_arguments(clip: Option<f64>) -> (f32, bool) {
    (clip.unwrap_or(0.0) as f32, clip.is_some())
}

/// The `[T, B, ·]` records of a layer's forward pass, written at each step (B: all the rows,
/// `G·B'` for a group of G layers).
pub struct CellRecords<'a> {
    /// `[T, B, 4C]`: the activated gates.
    pub gates: &'a Tensor<3>,
    /// `[T, B, C]`: the clipped memory.
    pub memory: &'a Tensor<3>,
    /// `[T, B, C]`: its `tanh`.
    pub tanh_memory: &'a Tensor<3>,
    /// `[T, B, P]`: the clipped hidden state.
    pub hidden: &'a Tensor<3>,
}

/// A layer group's input contributions to its gates, as the cell kernels read them: `x·W` of
/// every step (prepared, [`crate::GateActivation::prepare`]) without the bias, layer by layer
/// as one batched product over the group gives them, and the bias apart, which the kernels add
/// as they read each step: neither a pass adding the bias nor a copy joining the layers' rows
/// of every step over the `G·T·B·4C` values.
#[derive(Debug, Clone, Copy)]
pub struct InputContributions<'a> {
    /// `[G, T, B, 4C]`: each layer's prepared `x·W` of all steps (rows `t·B + b` of its product
    /// `[T·B, 4C]`).
    pub projected: &'a Tensor<4>,
    /// `[G, 4C]`: each layer's prepared bias (row `g` for rows `g·B .. (g+1)·B`).
    pub bias: &'a Tensor<2>,
}

/// Step `t` of the cell: writes the step's gates, memory and `tanh(memory)` and returns
/// `o·tanh(memory)` as the left factor of `next`'s products (the projection): in its split
/// layout and its element type ([`SplitWeight::factor_dtype`]: 16 bits in mixed precision, so
/// that the product casts nothing). The partial products read here are in the layout of the
/// same groups (any number of slices).
///
/// # Shapes
/// - input: [`InputContributions`] of `B` rows (`G` layers of `B / G`)
/// - recurrent: `[G·S', B / G, 4C]`, the prepared `h_{t−1}·W` as partial products (summed here)
/// - initial_memory: `[B, C]`
/// - output: `[G·S, B / G, C / S]`
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn cell_forward(
    input: InputContributions<'_>,
    recurrent: Tensor<3>,
    initial_memory: &Tensor<2>,
    records: &CellRecords<'_>,
    step: usize,
    cell_clip: Option<f64>,
    next: &SplitWeight,
) -> Tensor<3> {
    #[cfg(not(feature = "cubecl"))]
    unreachable!("{NOT_BUILT}");
    #[cfg(feature = "cubecl")]
    {
        let layout = next.layout();
        let shape = layout.shape(initial_memory.dims());
        let out = ElementwiseOutput::of(shape, &initial_memory.device(), next.factor_dtype());
        let state_type = element_type(initial_memory);
        let (clip, has_clip) = clip_arguments(cell_clip);
        kernels::cell_forward_kernel::launch(
            &out.client,
            out.count.clone(),
            out.dim,
            kernel_rows_input(input.projected).into_tensor_arg(),
            kernel_rows_input(input.bias).into_tensor_arg(),
            kernel_rows_input(&recurrent).into_tensor_arg(),
            kernel_input(initial_memory).into_tensor_arg(),
            kernel_in_place(records.gates).into_tensor_arg(),
            kernel_in_place(records.memory).into_tensor_arg(),
            kernel_in_place(records.tanh_memory).into_tensor_arg(),
            out.primitive.into_tensor_arg(),
            step as u32,
            clip,
            layout.n_groups as u32,
            has_clip,
            [state_type, out.dtype],
        );
        out.tensor
    }
}

/// Step `t`'s projection clip: writes the hidden state into its record and returns it as the
/// left factor of `next`'s products (the next step's state product), in its split layout and
/// element type.
///
/// # Shapes
/// - projected: `[G·S', B / G, P]`, the projection's partial products (summed here)
/// - output: `[G·S, B / G, P / S]`
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn hidden_forward(
    projected: Tensor<3>,
    records: &CellRecords<'_>,
    step: usize,
    projection_clip: Option<f64>,
    next: &SplitWeight,
) -> Tensor<3> {
    #[cfg(not(feature = "cubecl"))]
    unreachable!("{NOT_BUILT}");
    #[cfg(feature = "cubecl")]
    {
        let layout = next.layout();
        let [_, batch, d_projection] = records.hidden.dims();
        let shape = layout.shape([batch, d_projection]);
        let out = ElementwiseOutput::of(shape, &projected.device(), next.factor_dtype());
        let state_type = element_type(records.hidden);
        let (clip, has_clip) = clip_arguments(projection_clip);
        kernels::hidden_forward_kernel::launch(
            &out.client,
            out.count.clone(),
            out.dim,
            kernel_rows_input(&projected).into_tensor_arg(),
            kernel_in_place(records.hidden).into_tensor_arg(),
            out.primitive.into_tensor_arg(),
            step as u32,
            clip,
            layout.n_groups as u32,
            has_clip,
            [state_type, out.dtype],
        );
        out.tensor
    }
}

/// Step `t`'s gradient of the hidden state before its clip (the output's plus `grad_next`
/// from step `t + 1`), written into `grad_projected` and returned as the left factor of
/// `next`'s products (the product with `Pᵀ`), in its split layout and element type.
///
/// # Shapes
/// - grad_outputs: `[B, T, P]`; hidden, grad_projected: `[T, B, P]`
/// - grad_next: `[G·S', B / G, P]`, partial products (summed here)
/// - output: `[G·S, B / G, P / S]`
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn hidden_backward(
    grad_outputs: &Tensor<3>,
    hidden: &Tensor<3>,
    grad_next: Option<Tensor<3>>,
    grad_projected: &Tensor<3>,
    step: usize,
    projection_clip: Option<f64>,
    next: &SplitWeight,
) -> Tensor<3> {
    #[cfg(not(feature = "cubecl"))]
    unreachable!("{NOT_BUILT}");
    #[cfg(feature = "cubecl")]
    {
        let layout = next.layout();
        let [_, batch, d_projection] = hidden.dims();
        let shape = layout.shape([batch, d_projection]);
        let out = ElementwiseOutput::of(shape, &hidden.device(), next.factor_dtype());
        let state_type = element_type(hidden);
        let (clip, has_clip) = clip_arguments(projection_clip);
        let has_next = grad_next.is_some();
        // Without a next step the kernel reads no `grad_next`.
        let next = match &grad_next {
            Some(partials) => kernel_rows_input(partials),
            None => kernel_input(grad_outputs),
        };
        kernels::hidden_backward_kernel::launch(
            &out.client,
            out.count.clone(),
            out.dim,
            kernel_input(grad_outputs).into_tensor_arg(),
            kernel_input(hidden).into_tensor_arg(),
            next.into_tensor_arg(),
            kernel_in_place(grad_projected).into_tensor_arg(),
            out.primitive.into_tensor_arg(),
            step as u32,
            clip,
            layout.n_groups as u32,
            has_next,
            has_clip,
            [state_type, out.dtype],
        );
        out.tensor
    }
}

/// What [`cell_backward`] returns.
pub struct CellBackwardOutput {
    /// `[B, C]`: the memory gradient carried to step `t − 1` (`None` at step 0).
    pub grad_memory_previous: Option<Tensor<2>>,
    /// `[G·S, B / G, 4C / S]`: step `t`'s gate gradients as the left factor of the product with
    /// `Wᵀ` (its split layout and element type).
    pub grad_gates: Tensor<3>,
}

/// Step `t`'s gate gradients from the gradient of `o·tanh(memory)` (`[G·S', B / G, C]` partial
/// products, summed here) and the memory gradient carried from step `t + 1`, written into
/// `grad_gates` (`[T, B, 4C]`) and returned as the left factor of `next`'s products (`Wᵀ`),
/// in its split layout and element type, with the memory gradient carried to step `t − 1`.
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn cell_backward(
    grad_cell_output: Tensor<3>,
    records: &CellRecords<'_>,
    initial_memory: &Tensor<2>,
    grad_memory_next: Option<Tensor<2>>,
    grad_gates: &Tensor<3>,
    step: usize,
    cell_clip: Option<f64>,
    next: &SplitWeight,
) -> CellBackwardOutput {
    #[cfg(not(feature = "cubecl"))]
    unreachable!("{NOT_BUILT}");
    #[cfg(feature = "cubecl")]
    {
        let layout = next.layout();
        let out = ElementwiseOutput::new(initial_memory.dims(), &initial_memory.device());
        let [batch, d_cell] = initial_memory.dims();
        let split = layout.shape([batch, 4 * d_cell]);
        let grad_gates_split =
            empty_buffer_of(split, &initial_memory.device(), next.factor_dtype());
        let factor_type = element_type(&grad_gates_split);
        let (clip, has_clip) = clip_arguments(cell_clip);
        let has_next = grad_memory_next.is_some();
        // Without a next step the kernel reads no `grad_memory_next`.
        let next = kernel_input_or(grad_memory_next.as_ref(), initial_memory);
        kernels::cell_backward_kernel::launch(
            &out.client,
            out.count.clone(),
            out.dim,
            kernel_rows_input(&grad_cell_output).into_tensor_arg(),
            kernel_input(records.gates).into_tensor_arg(),
            kernel_input(records.memory).into_tensor_arg(),
            kernel_input(records.tanh_memory).into_tensor_arg(),
            kernel_input(initial_memory).into_tensor_arg(),
            next.into_tensor_arg(),
            kernel_in_place(grad_gates).into_tensor_arg(),
            kernel_in_place(&grad_gates_split).into_tensor_arg(),
            out.primitive.into_tensor_arg(),
            step as u32,
            clip,
            layout.n_groups as u32,
            has_next,
            has_clip,
            [out.dtype, factor_type],
        );
        CellBackwardOutput {
            grad_memory_previous: (step > 0).then_some(out.tensor),
            grad_gates: grad_gates_split,
        }
    }
}

#[cfg(all(test, feature = "cubecl"))]
mod tests {
    use super::*;
    use crate::ProductMode;
    use crate::cube_tensor::{cube_primitive, empty_buffer};
    use burn::tensor::{DType, Device, Distribution, TensorData};

    /// `x` `[A, R, N]` as a view into rows of `N + pad` values (the rest other values), as
    /// CubeCL's CUDA runtime pads a matmul's output rows: the same values, other strides (burn
    /// slices without a copy where the bytes cut off are a multiple of the device's alignment:
    /// `pad` of 64 values is 256 bytes).
    fn padded<const D: usize>(x: &Tensor<D>, pad: usize) -> Tensor<D> {
        let mut shape = x.dims();
        let n = shape[D - 1];
        shape[D - 1] = pad;
        let filler = Tensor::<D>::random(shape, Distribution::Default, &x.device());
        let view = Tensor::cat(vec![x.clone(), filler], D - 1).narrow(D - 1, 0, n);
        let strides = cube_primitive(&view)
            .expect("a wgpu tensor")
            .meta
            .strides()
            .to_vec();
        let mut expected = vec![1; D];
        expected[D - 2] = n + pad;
        for i in (0..D - 2).rev() {
            expected[i] = expected[i + 1] * x.dims()[i + 1];
        }
        assert_eq!(strides, expected, "the view is padded");
        view
    }

    /// The padding of a row in these tests, in values.
    const PAD: usize = 64;

    fn values<const D: usize>(x: &Tensor<D>) -> TensorData {
        x.clone().into_data()
    }

    fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
    }

    /// The inputs of one forward and one backward step of the cell kernels: two groups of 3
    /// rows, 5 cells, a projection of 4, 3 steps; the partial products in 2 slices.
    struct StepInputs {
        projected: Tensor<4>,
        bias: Tensor<2>,
        recurrent: Tensor<3>,
        initial_memory: Tensor<2>,
        hidden_partials: Tensor<3>,
        grad_outputs: Tensor<3>,
        grad_next: Tensor<3>,
        grad_cell_output: Tensor<3>,
    }

    const GROUPS: usize = 2;
    const BATCH: usize = 3;
    const CELLS: usize = 5;
    const PROJECTION: usize = 4;
    const STEPS: usize = 3;

    impl StepInputs {
        fn random(device: &Device) -> Self {
            let rows = GROUPS * BATCH;
            Self {
                projected: random([GROUPS, STEPS, BATCH, 4 * CELLS], device),
                bias: random([GROUPS, 4 * CELLS], device),
                recurrent: random([2 * GROUPS, BATCH, 4 * CELLS], device),
                initial_memory: random([rows, CELLS], device),
                hidden_partials: random([2 * GROUPS, BATCH, PROJECTION], device),
                grad_outputs: random([rows, STEPS, PROJECTION], device),
                grad_next: random([2 * GROUPS, BATCH, PROJECTION], device),
                grad_cell_output: random([2 * GROUPS, BATCH, CELLS], device),
            }
        }

        /// Step 1 forward and backward, the large inputs padded by `pad` values a row (0: as
        /// they are), the products' left factors whole and in the type of weights prepared for
        /// `mode`: the outputs, the left factors at 0, 1, 5 and 8.
        fn run(&self, pad: usize, mode: ProductMode) -> Vec<TensorData> {
            let device = self.projected.device();
            let rows = GROUPS * BATCH;
            let view = |x: &Tensor<3>| match pad {
                0 => x.clone(),
                _ => padded(x, pad),
            };
            // The weights whose products take the left factors (only their type and layout
            // matter here).
            let next = |k: usize, n: usize| {
                SplitWeight::grouped(vec![Tensor::zeros([k, n], &device); GROUPS], 1).prepared(mode)
            };
            let records = [4 * CELLS, CELLS, CELLS, PROJECTION]
                .map(|width| empty_buffer([STEPS, rows, width], &device));
            let cell_records = CellRecords {
                gates: &records[0],
                memory: &records[1],
                tanh_memory: &records[2],
                hidden: &records[3],
            };
            let step = 1;
            // The bias's rows padded as CUDA pads `[2, 4,800]` (`ptb-large.json`'s).
            let bias = match pad {
                0 => self.bias.clone(),
                _ => padded(&self.bias, pad),
            };
            let cell_output = cell_forward(
                InputContributions {
                    projected: &match pad {
                        0 => self.projected.clone(),
                        _ => padded(&self.projected, pad),
                    },
                    bias: &bias,
                },
                view(&self.recurrent),
                &self.initial_memory,
                &cell_records,
                step,
                Some(0.8),
                &next(CELLS, PROJECTION),
            );
            let state = hidden_forward(
                view(&self.hidden_partials),
                &cell_records,
                step,
                Some(0.5),
                &next(PROJECTION, 4 * CELLS),
            );
            let grad_projected = empty_buffer([STEPS, rows, PROJECTION], &device);
            let grad_hidden = hidden_backward(
                &self.grad_outputs,
                &records[3],
                Some(view(&self.grad_next)),
                &grad_projected,
                step,
                Some(0.5),
                &next(PROJECTION, CELLS),
            );
            let grad_gates = empty_buffer([STEPS, rows, 4 * CELLS], &device);
            let cell = cell_backward(
                view(&self.grad_cell_output),
                &cell_records,
                &self.initial_memory,
                None,
                &grad_gates,
                step,
                Some(0.8),
                &next(4 * CELLS, PROJECTION),
            );
            let at_step = |x: &Tensor<3>| values(&x.clone().narrow(0, step, 1));
            vec![
                values(&cell_output),
                values(&state),
                at_step(&records[0]),
                at_step(&records[1]),
                at_step(&records[3]),
                values(&grad_hidden),
                at_step(&grad_projected),
                at_step(&grad_gates),
                values(&cell.grad_gates),
                values(
                    &cell
                        .grad_memory_previous
                        .expect("step 1 has a previous one"),
                ),
            ]
        }
    }

    /// The left factors among [`StepInputs::run`]'s outputs.
    const LEFT_FACTORS: [usize; 4] = [0, 1, 5, 8];

    /// One forward and one backward step of the cell kernels with their large inputs (the
    /// input contributions and their bias, every partial product) padded as on CUDA, against the same inputs
    /// contiguous: the kernels read them at their strides, with the same values to the bit,
    /// and `kernel_rows_input` passes the padded tensor without a copy.
    #[test]
    fn the_cell_kernels_read_padded_rows_at_their_strides() {
        let Some(device) = elmo_test_support::wgpu_device_or_skip(
            "the_cell_kernels_read_padded_rows_at_their_strides",
        ) else {
            return;
        };
        let inputs = StepInputs::random(&device);
        let kept = kernel_rows_input(&padded(&inputs.recurrent, PAD));
        assert_eq!(
            kept.meta.strides()[1],
            4 * CELLS + PAD,
            "no copy of padded rows"
        );
        let (contiguous, padded) = (
            inputs.run(0, ProductMode::F32),
            inputs.run(PAD, ProductMode::F32),
        );
        for (i, (a, b)) in contiguous.iter().zip(&padded).enumerate() {
            assert_eq!(a, b, "output {i} differs with padded inputs");
        }
    }

    /// With the next products' weights in 16 bits (mixed precision), the kernels write those
    /// products' left factors in 16 bits, each the `f32` value's rounding (as the cast that
    /// ran after them before), and every record as in `f32`.
    #[test]
    fn the_cell_kernels_write_left_factors_in_the_weights_type() {
        let Some(device) = elmo_test_support::wgpu_device_or_skip(
            "the_cell_kernels_write_left_factors_in_the_weights_type",
        ) else {
            return;
        };
        let Some(half) = crate::Precision::Mixed.half_for(&Tensor::<1>::zeros([1], &device)) else {
            eprintln!("skipping: no 16-bit type on this wgpu device");
            return;
        };
        let inputs = StepInputs::random(&device);
        let full = inputs.run(0, ProductMode::F32);
        let mode = ProductMode {
            half: Some(half),
            vendor_blas: false,
            host: None,
            host_bf16: false,
        };
        let mixed = inputs.run(0, mode);
        for (i, (a, b)) in full.iter().zip(&mixed).enumerate() {
            if LEFT_FACTORS.contains(&i) {
                assert_eq!(
                    b.dtype(),
                    DType::from(half),
                    "output {i} is a 16-bit factor"
                );
                let rounded = Tensor::<3>::from_data(a.clone().convert::<f32>(), &device)
                    .cast(half)
                    .into_data();
                assert_eq!(b, &rounded, "output {i} is not the f32 value rounded");
            } else {
                assert_eq!(a, b, "record {i} differs in mixed precision");
            }
        }
    }
}
