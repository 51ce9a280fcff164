//! The LSTM stacks of a training step run outside autodiff and backpropagated by hand
//! (`lstm_backward.rs`), walked by elmo-model's `lstm_stack`: dropout on every layer input and
//! on the top output, and the residual from layer 1 on adding the dropped-out input, as bilm-tf's
//! `DropoutWrapper(ResidualWrapper(LSTMCell))` and `BiLanguageModel`'s autodiff path; with weight
//! drop, each layer runs with its masked recurrent weights and the gradient of the weights is the
//! masked weights' gradient times the mask. One call runs one stack, or several stacks of one
//! shape as one (the two directions on a GPU): their rows stacked, each depth an `LstmGroup`.

use burn::tensor::Tensor;
use elmo_kernels::KernelSettings;
use elmo_model::lstm_stack::{LayerRun, residual_input_gradient, run_stack};
use elmo_model::{LstmState, LstmWithProjection};

use crate::dropout::StackDropout;
use crate::lstm_backward::{LstmGroup, LstmGroupGradients, LstmTape, LstmWeightGradients};

/// The stacks' forward pass and what their backward pass needs.
pub(crate) struct RecordedStack {
    /// `[G·B, T, P]`: the dropped-out top layer of each stack's rows (what the softmax reads),
    /// without autodiff.
    pub top: Tensor<3>,
    /// State after the last step, per stack and layer.
    pub finals: Vec<Vec<LstmState>>,
    /// Per layer, bottom first.
    layers: Vec<RecordedLayer>,
    top_mask: Option<Tensor<3>>,
    /// The kernels of the forward pass, for the backward pass.
    kernels: KernelSettings,
}

/// What the backward pass needs of one layer (all stacks).
struct RecordedLayer {
    tape: LstmTape,
    /// `[G·B, ·, d]`: the dropout mask of the layer's input.
    input_mask: Option<Tensor<3>>,
    /// With weight drop, per stack: the layer with its masked recurrent weights, and the mask.
    dropped: Option<Vec<(LstmWithProjection, Tensor<2>)>>,
}

/// Gradients of the stacks' backward pass.
pub(crate) struct StackGradients {
    /// `[G·B, T, d_input]`: gradient of the stacks' input (the token embeddings).
    pub embedded: Tensor<3>,
    /// Per stack, per layer (bottom first).
    pub layers: Vec<Vec<LstmWeightGradients>>,
}

/// Every stack's mask, stacked along the rows as the group's (`LstmGroup::stacked_rows`);
/// `None` when dropout is off.
fn stacked_masks(masks: Vec<Option<Tensor<3>>>) -> Option<Tensor<3>> {
    let masks: Option<Vec<_>> = masks.into_iter().collect();
    masks.map(LstmGroup::stacked_rows)
}

/// Runs `stacks` (G stacks of one shape) over `embedded`, stack `g` on rows `g·B .. (g+1)·B`
/// (every row all `T` steps, left to right), each from its `initial` state (`None`: zero) with
/// its `dropout`, running `kernels` on a CubeCL device.
///
/// # Shapes
/// - embedded: `[G·B, T, d_input]`
pub(crate) fn forward_stack(
    stacks: &[&[LstmWithProjection]],
    use_skip_connections: bool,
    embedded: Tensor<3>,
    initial: Vec<Option<Vec<LstmState>>>,
    dropout: Vec<StackDropout>,
    kernels: KernelSettings,
) -> RecordedStack {
    let n_stacks = stacks.len();
    let n_layers = stacks[0].len();
    let (mut activations, mut weight_drops): (Vec<_>, Vec<_>) = dropout
        .into_iter()
        .map(|d| (d.activations, d.recurrent))
        .unzip();
    let embedded = embedded.inner();
    let mut initial: Vec<_> = initial
        .into_iter()
        .map(|states| states.map(Vec::into_iter))
        .collect();
    let mut next_masks = |x: &Tensor<3>| {
        let [rows, n_steps, d] = x.dims();
        let masks = (activations.iter_mut())
            .map(|masks| masks.next_mask([rows / n_stacks, n_steps, d], x))
            .collect();
        stacked_masks(masks)
    };
    let stack = run_stack(
        n_layers,
        use_skip_connections,
        embedded,
        false,
        |index, x| {
            let (layers, weight_masks): (Vec<_>, Vec<_>) = (stacks.iter().zip(&mut weight_drops))
                .map(|(stack, weight_drop)| weight_drop.drop_recurrent_untracked(&stack[index]))
                .unzip();
            let mask = next_masks(&x);
            let input = match &mask {
                Some(mask) => x * mask.clone(),
                None => x,
            };
            let starts: Option<Vec<LstmState>> = (initial.iter_mut())
                .map(|states| states.as_mut().and_then(Iterator::next))
                .collect();
            let start = starts.map(|starts| {
                let (hidden, memory) = starts.into_iter().map(|s| (s.hidden, s.memory)).unzip();
                LstmState {
                    hidden: LstmGroup::stacked_rows(hidden),
                    memory: LstmGroup::stacked_rows(memory),
                }
            });
            let group =
                LstmGroup::new(layers.iter().map(|layer| layer.as_ref()).collect(), kernels);
            let (out, tape) = group.forward_recorded(input.clone(), start);
            let finals: Vec<LstmState> = (0..n_stacks)
                .map(|g| LstmState {
                    hidden: LstmGroup::rows_of(&out.final_state.hidden, g, n_stacks),
                    memory: LstmGroup::rows_of(&out.final_state.memory, g, n_stacks),
                })
                .collect();
            let weight_masks: Option<Vec<_>> = weight_masks.into_iter().collect();
            let dropped = weight_masks.map(|masks| {
                let layers = layers.into_iter().map(|layer| layer.into_owned());
                layers.zip(masks.into_iter().map(|m| m.inner())).collect()
            });
            LayerRun {
                input,
                output: out.outputs,
                record: (
                    RecordedLayer {
                        tape,
                        input_mask: mask,
                        dropped,
                    },
                    finals,
                ),
            }
        },
    );
    let top_mask = next_masks(&stack.top);
    let top = match &top_mask {
        Some(mask) => stack.top * mask.clone(),
        None => stack.top,
    };
    let mut finals = vec![Vec::with_capacity(n_layers); n_stacks];
    let mut layers = Vec::with_capacity(n_layers);
    for (layer, layer_finals) in stack.records {
        layers.push(layer);
        for (stack_finals, state) in finals.iter_mut().zip(layer_finals) {
            stack_finals.push(state);
        }
    }
    RecordedStack {
        top,
        finals,
        layers,
        top_mask,
        kernels,
    }
}

/// Backpropagates `grad_top` (`[G·B, T, P]`, the gradient of [`RecordedStack::top`]) through
/// the stacks.
pub(crate) fn backward_stack(
    stacks: &[&[LstmWithProjection]],
    use_skip_connections: bool,
    stack: RecordedStack,
    grad_top: Tensor<3>,
) -> StackGradients {
    let mask = |grad: Tensor<3>, mask: Option<Tensor<3>>| match mask {
        Some(mask) => grad * mask,
        None => grad,
    };
    // Gradient of the current layer's output (after its residual).
    let mut grad = mask(grad_top.inner(), stack.top_mask);
    let mut per_layer = Vec::with_capacity(stack.layers.len());
    for (index, layer) in stack.layers.into_iter().enumerate().rev() {
        let RecordedLayer {
            tape,
            input_mask,
            dropped,
        } = layer;
        let group = match &dropped {
            Some(dropped) => dropped.iter().map(|(layer, _)| layer).collect(),
            None => stacks.iter().map(|stack| &stack[index]).collect(),
        };
        let LstmGroupGradients {
            inputs,
            mut weights,
        } = LstmGroup::new(group, stack.kernels).backward_recorded(tape, grad.clone());
        if let Some(dropped) = &dropped {
            weights = (weights.into_iter().zip(dropped))
                .map(|(mut w, (_, mask))| {
                    w.state_weight = w.state_weight * mask.clone();
                    w
                })
                .collect();
        }
        let grad_input = residual_input_gradient(index, use_skip_connections, inputs, grad);
        grad = mask(grad_input, input_mask);
        per_layer.push(weights);
    }
    per_layer.reverse();
    // Per layer and stack → per stack and layer.
    let mut layers = vec![Vec::with_capacity(per_layer.len()); stacks.len()];
    for weights in per_layer {
        for (stack_layers, w) in layers.iter_mut().zip(weights) {
            stack_layers.push(w);
        }
    }
    StackGradients {
        embedded: grad,
        layers,
    }
}
