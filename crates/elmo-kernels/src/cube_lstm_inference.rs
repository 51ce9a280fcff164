//! Fused LSTMP cell kernels for inference on CubeCL devices: one time step of a group of layers
//! (a biLM layer's two directions) over rows of different lengths, as two elementwise kernels
//! beside the step's two products, with nothing recorded for a backward pass. The equations are
//! those of `LstmWithProjection::forward` (AllenNLP's `LstmCellWithProjection`): a row runs at
//! the positions `0..length`, left to right or, reversed, from its own last token; a row that is
//! not running keeps its memory and hidden state and outputs zero there.
//!
//! Layout as in `cube_lstm_cell.rs`: a group of G layers has its rows stacked (`[G·B, ·]`), the
//! step products' left factors and partial products are in the split layout `[G·S, B, K / S]`
//! (`SplitLayout`), and the kernels read the partial products summed in order. Step `s` of a
//! reversed layer is position `T − 1 − s`; its input projection is computed on the inputs
//! flipped in time, so that step `s` of every layer reads the same plane of the projected
//! inputs. The memory `[G·B, C]` and the hidden state (split layout) are updated in place,
//! row by row, so finished rows need no copy.

use burn::tensor::Tensor;

use crate::cube_lstm_cell::InputContributions;
#[cfg(feature = "cubecl")]
use crate::cube_tensor::{kernel_in_place, kernel_input, kernel_rows_input};
use crate::split_product::{SplitLayout, SplitWeight};

/// The kernels (CubeCL's `Tensor` is not burn's, hence a module of their own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    use crate::cube_lstm_cell::kernels::{activated_gates, next_memory, split_index, summed};

    /// The position that step `step` of row `row`'s layer reads (`T − 1 − step` when the layer's
    /// bit in `reversed` is set), and whether the row runs there (`position < length`).
    #[cube]
    fn running<F: Float>(
        lengths: &Tensor<F>,
        row: usize,
        step: u32,
        n_steps: u32,
        reversed: u32,
    ) -> (u32, bool) {
        let batch = lengths.len();
        let group = (row / batch) as u32;
        let mut position = step;
        if (reversed >> group) & 1u32 == 1u32 {
            position = n_steps - 1u32 - step;
        }
        (position, F::cast_from(position) < lengths[row % batch])
    }

    /// One step of the cell, one unit per `(row, j)`: for a running row, activates the gates,
    /// updates and clips the memory in place and writes `o·tanh(memory)` (in the split layout
    /// of `cell_output`'s shape and in its type `L`, for the projection's product); zero there
    /// for the others.
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn inference_cell_kernel<F: Float, L: Float>(
        projected: &Tensor<F>,
        bias: &Tensor<F>,
        recurrent: &Tensor<F>,
        lengths: &Tensor<F>,
        memory: &mut Tensor<F>,
        cell_output: &mut Tensor<L>,
        plane: u32,
        step: u32,
        n_steps: u32,
        reversed: u32,
        cell_clip: f32,
        n_groups: u32,
        #[comptime] has_clip: bool,
        #[define(F, L)] _dtypes: [ElemType; 2],
    ) {
        let position = ABSOLUTE_POS;
        if position >= memory.len() {
            terminate!();
        }
        let d_cell = memory.shape(1);
        let row = position / d_cell;
        let unit = position % d_cell;
        let (n_planes, split_batch, width) = (
            cell_output.shape(0),
            cell_output.shape(1),
            cell_output.shape(2),
        );
        let at = split_index(row, unit, n_planes, split_batch, width, n_groups);
        let (_, runs) = running::<F>(lengths, row, step, n_steps, reversed);
        if runs {
            let (input_gate, forget_gate, cell_input, output_gate) = activated_gates::<F>(
                projected,
                bias,
                recurrent,
                plane as usize,
                row,
                unit,
                d_cell,
                n_groups,
            );
            let next = next_memory::<F>(
                input_gate * cell_input + forget_gate * memory[position],
                cell_clip,
                has_clip,
            );
            memory[position] = next;
            cell_output[at] = L::cast_from(output_gate * next.tanh());
        } else {
            cell_output[at] = L::new(0.0);
        }
    }

    /// The projection's clip at step `step`, one unit per `(row, j)`: for a running row, writes
    /// the clipped hidden state into the outputs `[G·B, T, P]` at the row's position and into the
    /// state carried to the next step (in place, in the split layout of `state`'s shape); zero
    /// into the outputs for the others, whose state is kept. The state is in its own type `L`
    /// (the state product's, 16 bits in mixed precision).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn inference_hidden_kernel<F: Float, L: Float>(
        projected: &Tensor<F>,
        lengths: &Tensor<F>,
        state: &mut Tensor<L>,
        outputs: &mut Tensor<F>,
        step: u32,
        n_steps: u32,
        reversed: u32,
        projection_clip: f32,
        n_groups: u32,
        #[comptime] has_clip: bool,
        #[define(F, L)] _dtypes: [ElemType; 2],
    ) {
        let position = ABSOLUTE_POS;
        let rows = outputs.shape(0);
        let d_projection = outputs.shape(2);
        if position >= rows * d_projection {
            terminate!();
        }
        let (row, unit) = (position / d_projection, position % d_projection);
        let (time, runs) = running::<F>(lengths, row, step, n_steps, reversed);
        let out = (row * n_steps as usize + time as usize) * d_projection + unit;
        if runs {
            let mut value = summed::<F>(projected, row, unit, n_groups);
            if has_clip {
                let clip = F::cast_from(projection_clip);
                value = value.clamp(-clip, clip);
            }
            outputs[out] = value;
            let (n_planes, split_batch, width) = (state.shape(0), state.shape(1), state.shape(2));
            state[split_index(row, unit, n_planes, split_batch, width, n_groups)] =
                L::cast_from(value);
        } else {
            outputs[out] = F::new(0.0);
        }
    }
}

/// The buffers of a group's inference recurrence, updated at every step.
///
/// # Shapes
/// - lengths: `[B]`, each row's length as a float (the rows of every layer of the group)
/// - memory: `[G·B, C]`, contiguous, held by this recurrence alone
/// - state: `[G·S, B, P / S]`, the hidden state in the split layout of the state product and
///   in the type of its weights (`SplitWeight::factor_dtype`: 16 bits in mixed precision, the
///   product's left factor as it is), contiguous, held by this recurrence alone
/// - outputs: `[G·B, T, P]`, contiguous, every position written once over the `T` steps
pub struct InferenceBuffers<'a> {
    /// Each row's length.
    pub lengths: &'a Tensor<1>,
    /// The memory cells.
    pub memory: &'a Tensor<2>,
    /// The hidden state.
    pub state: &'a Tensor<3>,
    /// The outputs.
    pub outputs: &'a Tensor<3>,
}

/// Where step `step` is in a group's recurrence: `T`, and which layers of the group run
/// reversed (bit `g` of `reversed` for layer `g`).
#[derive(Debug, Clone, Copy)]
pub struct InferenceStep {
    /// The step, `0..T`.
    pub step: usize,
    /// `T`.
    pub n_steps: usize,
    /// Bit `g` set: layer `g` reads position `T − 1 − step` at step `step`.
    pub reversed: u32,
}

/// Step `step` of the cell for a group of layers: updates the running rows' memory in place and
/// returns `o·tanh(memory)` (zero for rows not running) as the left factor of `next`'s
/// products (the projection), in its split layout and element type
/// ([`SplitWeight::factor_dtype`]). `plane` is the plane of `projected` that holds step `step`
/// (a chunk of steps).
///
/// # Shapes
/// - input: [`InputContributions`] of `T'` steps (a chunk), `G` layers of `B` rows, step `s`
///   of every layer at `[g, s]`
/// - recurrent: `[G·S', B, 4C]`, the prepared `h·W` as partial products (summed here)
/// - output: `[G·S, B, C / S]`
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn inference_cell(
    input: InputContributions<'_>,
    plane: usize,
    recurrent: Tensor<3>,
    buffers: &InferenceBuffers<'_>,
    at: InferenceStep,
    cell_clip: Option<f64>,
    next: &SplitWeight,
) -> Tensor<3> {
    #[cfg(not(feature = "cubecl"))]
    unreachable!("the fused LSTM kernels need elmo-kernels' `cubecl` feature");
    #[cfg(feature = "cubecl")]
    {
        use crate::cube_tensor::{ElementwiseOutput, element_type, elementwise_grid};
        let layout = next.layout();
        let shape = layout.shape(buffers.memory.dims());
        let out = ElementwiseOutput::of(shape, &buffers.memory.device(), next.factor_dtype());
        // One unit per memory cell (the output's shape is the same count of values).
        let (count, dim) = elementwise_grid(&out.client, buffers.memory.dims().iter().product());
        kernels::inference_cell_kernel::launch(
            &out.client,
            count,
            dim,
            kernel_rows_input(input.projected).into_tensor_arg(),
            kernel_rows_input(input.bias).into_tensor_arg(),
            kernel_rows_input(&recurrent).into_tensor_arg(),
            kernel_input(buffers.lengths).into_tensor_arg(),
            kernel_in_place(buffers.memory).into_tensor_arg(),
            out.primitive.into_tensor_arg(),
            plane as u32,
            at.step as u32,
            at.n_steps as u32,
            at.reversed,
            cell_clip.unwrap_or(0.0) as f32,
            layout.n_groups as u32,
            cell_clip.is_some(),
            [element_type(buffers.memory), out.dtype],
        );
        out.tensor
    }
}

/// Step `step`'s projection clip for a group of layers: writes the running rows' hidden state
/// into the outputs and, in place, into the state (zero into the outputs for the others).
///
/// # Shapes
/// - projected: `[G·S', B, P]`, the projection's partial products (summed here)
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn inference_hidden(
    projected: Tensor<3>,
    buffers: &InferenceBuffers<'_>,
    at: InferenceStep,
    projection_clip: Option<f64>,
    layout: SplitLayout,
) {
    #[cfg(not(feature = "cubecl"))]
    unreachable!("the fused LSTM kernels need elmo-kernels' `cubecl` feature");
    #[cfg(feature = "cubecl")]
    {
        use crate::cube_tensor::{element_type, elementwise_grid};
        let outputs = kernel_in_place(buffers.outputs);
        let [rows, _, d_projection] = buffers.outputs.dims();
        let client = outputs.client.clone();
        let (count, dim) = elementwise_grid(&client, rows * d_projection);
        let dtypes = [element_type(buffers.outputs), element_type(buffers.state)];
        kernels::inference_hidden_kernel::launch(
            &client,
            count,
            dim,
            kernel_rows_input(&projected).into_tensor_arg(),
            kernel_input(buffers.lengths).into_tensor_arg(),
            kernel_in_place(buffers.state).into_tensor_arg(),
            outputs.into_tensor_arg(),
            at.step as u32,
            at.n_steps as u32,
            at.reversed,
            projection_clip.unwrap_or(0.0) as f32,
            layout.n_groups as u32,
            projection_clip.is_some(),
            dtypes,
        );
    }
}
