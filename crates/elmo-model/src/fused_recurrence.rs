//! The LSTMP inference recurrence on a CubeCL device with elmo-kernels' fused inference kernels
//! (`cube_lstm_inference.rs`): a group of layers of one shape (a biLM layer's two directions,
//! or one layer) as one recurrence on their rows stacked, each step two products and two
//! kernels for the whole group. The equations and row rules are `LstmWithProjection::forward`'s
//! (AllenNLP's `LstmCellWithProjection`: rows of any length and order, a reversed row starting
//! at its own last token, zero outputs and kept state where a row does not run).

use burn::tensor::{FloatDType, Tensor};
use elmo_kernels::{
    GateActivation, InferenceBuffers, InferenceStep, InputContributions, KernelSettings,
    SplitWeight, inference_cell, inference_hidden, product, slices_for_grid, to_half,
};

use crate::lstm_state::LstmState;

/// Time steps whose input projection is computed in one matmul (bounds memory on long inputs),
/// in this recurrence and in `LstmWithProjection`'s composed one.
pub const PROJECTION_CHUNK_STEPS: usize = 32;

/// The time steps of one input projection `[steps, rows, gates]` (`f32`):
/// [`PROJECTION_CHUNK_STEPS`], fewer where that buffer would pass the limit of `kernels` on
/// `like`'s device (`original` at 1,024 sentences paired: 128 MiB a step).
pub(crate) fn projection_chunk_steps(
    kernels: KernelSettings,
    like: &Tensor<3>,
    rows: usize,
    gates: usize,
) -> usize {
    PROJECTION_CHUNK_STEPS.min(kernels.rows_per_buffer(like, rows * gates * 4))
}

/// What the recurrence reads of one layer (`LstmWithProjection::group_layer`; the host loop on
/// flex reads the same, `HostWeights::layer`).
///
/// # Shapes
/// - input_weight: `[d_input, 4C]`; state_weight: `[P, 4C]`; bias: `[4C]`; projection: `[C, P]`
pub(crate) struct GroupLayer {
    pub input_weight: Tensor<2>,
    pub state_weight: Tensor<2>,
    pub bias: Tensor<1>,
    pub projection: Tensor<2>,
    pub cell_clip: Option<f64>,
    pub projection_clip: Option<f64>,
}

/// What [`forward_group`] returns.
///
/// # Shapes
/// - outputs: `[G·B, T, P]`, layer `g`'s rows at `g·B .. (g+1)·B`, zero at padded positions
/// - final_states: per layer, `[B, ·]`
pub(crate) struct GroupOutput {
    /// Every layer's outputs, rows stacked.
    pub outputs: Tensor<3>,
    /// Every layer's state after its rows' last real step.
    pub final_states: Vec<LstmState>,
}

/// A buffer that the kernels may write in place: `tensor`'s values in a contiguous buffer that
/// no other tensor shares (the caller's state is never written).
fn owned<const D: usize>(tensor: Tensor<D>) -> Tensor<D> {
    elmo_kernels::contiguous(tensor.mul_scalar(1.0))
}

/// Runs `layers` (G layers of one shape and clips) as one recurrence: layer `g` over rows
/// `g·B .. (g+1)·B` of `inputs`, left to right when `go_forward[g]`, else right to left from each
/// row's own last token, from `initial[g]`, running `kernels`: with `split_products` the step
/// products split along their inner dimension where their output is too small to fill the
/// device ([`slices_for_grid`]); the large products as [`product`] runs them.
///
/// # Shapes
/// - inputs: `[G·B, T, d_input]`
/// - lengths: `B` values `<= T`, in any order
/// - initial: per layer `[B, ·]`
pub(crate) fn forward_group(
    layers: &[GroupLayer],
    kernels: KernelSettings,
    inputs: Tensor<3>,
    lengths: &[usize],
    go_forward: &[bool],
    initial: Vec<LstmState>,
) -> GroupOutput {
    let device = inputs.device();
    let [rows, n_steps, d_input] = inputs.dims();
    let n_groups = layers.len();
    let batch = rows / n_groups;
    let first = &layers[0];
    let [d_cell, d_projection] = first.projection.dims();
    let split = kernels.split_products;
    if n_steps == 0 || batch == 0 {
        // Nothing to run (and no kernel launches over zero units).
        return GroupOutput {
            outputs: Tensor::zeros([rows, n_steps, d_projection], &device),
            final_states: initial,
        };
    }
    let activation = GateActivation::new(d_cell, &device);
    // Mixed precision: every product's operands in 16 bits, results and state in `f32`.
    let mode = kernels.product_mode(&inputs);
    let step_mode = kernels.step_product_mode(&inputs, [d_cell, d_projection]);
    let half = mode.half;
    // A vendor BLAS splits K itself.
    let split = split && !step_mode.vendor_blas;
    // A reversed layer reads its inputs flipped in time: step `s` of every layer is plane `s`.
    // `[G, B, T, d_input]`.
    let timed: Tensor<4> = Tensor::stack(
        (0..n_groups)
            .map(|g| {
                let x = inputs.clone().narrow(0, g * batch, batch);
                if go_forward[g] { x } else { x.flip([1]) }
            })
            .collect(),
        0,
    );
    // `[G, d_input, 4C]`: the group's input projections as one batched product.
    let input_weights: Tensor<3> = Tensor::stack(
        (layers.iter())
            .map(|l| to_half(activation.prepare(l.input_weight.clone()), half))
            .collect(),
        0,
    );
    // `[G, 4C]`: added by the cell kernel as it reads the input contributions.
    let bias = Tensor::cat(
        (layers.iter())
            .map(|l| activation.prepare(l.bias.clone().unsqueeze_dim::<2>(0)))
            .collect(),
        0,
    );
    let state_product = SplitWeight::grouped(
        (layers.iter())
            .map(|l| activation.prepare(l.state_weight.clone()))
            .collect(),
        slices_for_grid(split, n_groups, batch, d_projection, 4 * d_cell),
    )
    .prepared(step_mode);
    let projection_product = SplitWeight::grouped(
        layers.iter().map(|l| l.projection.clone()).collect(),
        slices_for_grid(split, n_groups, batch, d_cell, d_projection),
    )
    .prepared(step_mode);
    let lengths_tensor = Tensor::<1>::from_floats(
        lengths
            .iter()
            .map(|&l| l as f32)
            .collect::<Vec<_>>()
            .as_slice(),
        &device,
    );
    let (hidden, memory): (Vec<_>, Vec<_>) =
        initial.into_iter().map(|s| (s.hidden, s.memory)).unzip();
    let memory = owned(Tensor::cat(memory, 0));
    // The hidden state in the state product's split layout and type (16 bits in mixed
    // precision: the kernels update it in place and the product reads it as it is).
    let state = owned(
        state_product
            .layout()
            .arrange(Tensor::cat(hidden, 0))
            .cast(state_product.factor_dtype()),
    );
    let outputs = elmo_kernels::empty_buffer([rows, n_steps, d_projection], &device);
    let buffers = InferenceBuffers {
        lengths: &lengths_tensor,
        memory: &memory,
        state: &state,
        outputs: &outputs,
    };
    let reversed = (0..n_groups)
        .filter(|&g| !go_forward[g])
        .fold(0u32, |bits, g| bits | 1 << g);
    // A chunk's input projection `[G, len, B, 4C]` is one buffer.
    let chunk_steps = projection_chunk_steps(kernels, &inputs, rows, 4 * d_cell);
    for chunk_start in (0..n_steps).step_by(chunk_steps) {
        let len = chunk_steps.min(n_steps - chunk_start);
        let x = (timed.clone().narrow(2, chunk_start, len).swap_dims(1, 2)).reshape([
            n_groups,
            len * batch,
            d_input,
        ]);
        let projected =
            product(x, input_weights.clone(), kernels).reshape([n_groups, len, batch, 4 * d_cell]);
        for step in chunk_start..chunk_start + len {
            let at = InferenceStep {
                step,
                n_steps,
                reversed,
            };
            let recurrent = state_product.split_left_partials_in(state.clone(), kernels);
            let input = InputContributions {
                projected: &projected,
                bias: &bias,
            };
            let cell_output = inference_cell(
                input,
                step - chunk_start,
                recurrent,
                &buffers,
                at,
                first.cell_clip,
                &projection_product,
            );
            inference_hidden(
                projection_product.split_left_partials_in(cell_output, kernels),
                &buffers,
                at,
                first.projection_clip,
                state_product.layout(),
            );
        }
    }
    let hidden = state_product.layout().gather(state).cast(FloatDType::F32);
    let final_states = (0..n_groups)
        .map(|g| LstmState {
            hidden: hidden.clone().narrow(0, g * batch, batch),
            memory: memory.clone().narrow(0, g * batch, batch),
        })
        .collect();
    GroupOutput {
        outputs,
        final_states,
    }
}
