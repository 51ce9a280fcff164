//! One LSTM stack of a training step run outside autodiff and backpropagated by hand
//! (`elmo_model::lstm_backward`): dropout on every layer input and on the top output, and the
//! residual from layer 1 on adding the dropped-out input, as bilm-tf's
//! `DropoutWrapper(ResidualWrapper(LSTMCell))` and `BiLanguageModel`'s autodiff path; with weight
//! drop, each layer runs with its masked recurrent weights and the gradient of the weights is the
//! masked weights' gradient times the mask.

use burn::tensor::Tensor;
use elmo_model::{LstmGradients, LstmState, LstmTape, LstmWeightGradients, LstmWithProjection};

use crate::dropout::StackDropout;

/// A stack's forward pass and what its backward pass needs.
pub(crate) struct RecordedStack {
    /// `[B, T, P]`: the dropped-out top layer (what the softmax reads), without autodiff.
    pub top: Tensor<3>,
    /// State after the last step, per layer.
    pub finals: Vec<LstmState>,
    tapes: Vec<LstmTape>,
    input_masks: Vec<Option<Tensor<3>>>,
    top_mask: Option<Tensor<3>>,
    /// Per layer with weight drop: the layer with its masked recurrent weights, and the mask.
    dropped: Vec<Option<(LstmWithProjection, Tensor<2>)>>,
}

/// Gradients of a stack's backward pass.
pub(crate) struct StackGradients {
    /// `[B, T, d_input]`: gradient of the stack's input (the token embeddings).
    pub embedded: Tensor<3>,
    /// Per layer, bottom first.
    pub layers: Vec<LstmWeightGradients>,
}

/// Runs `layers` over `embedded` (every row all `T` steps, left to right) from `initial`
/// (`None`: zero).
pub(crate) fn forward_stack(
    layers: &[LstmWithProjection],
    use_skip_connections: bool,
    embedded: Tensor<3>,
    initial: Option<Vec<LstmState>>,
    dropout: StackDropout,
) -> RecordedStack {
    let StackDropout {
        activations: mut dropout,
        recurrent: mut weight_drop,
    } = dropout;
    let mut x = embedded.inner();
    let device = x.device();
    let mut initial = initial.map(Vec::into_iter);
    let mut finals = Vec::with_capacity(layers.len());
    let mut tapes = Vec::with_capacity(layers.len());
    let mut input_masks = Vec::with_capacity(layers.len());
    let mut dropped = Vec::with_capacity(layers.len());
    for (index, layer) in layers.iter().enumerate() {
        let (layer, weight_mask) = weight_drop.drop_recurrent(layer);
        let mask = dropout.next_mask(x.dims(), &device);
        let input = match &mask {
            Some(mask) => x * mask.clone(),
            None => x,
        };
        let start = initial.as_mut().and_then(Iterator::next);
        let (out, tape) = layer.forward_recorded(input.clone(), start);
        finals.push(out.final_state);
        tapes.push(tape);
        input_masks.push(mask);
        dropped.push(weight_mask.map(|mask| (layer.into_owned(), mask.inner())));
        x = if index > 0 && use_skip_connections {
            out.outputs + input
        } else {
            out.outputs
        };
    }
    let top_mask = dropout.next_mask(x.dims(), &device);
    let top = match &top_mask {
        Some(mask) => x * mask.clone(),
        None => x,
    };
    RecordedStack {
        top,
        finals,
        tapes,
        input_masks,
        top_mask,
        dropped,
    }
}

/// Backpropagates `grad_top` (`[B, T, P]`, the gradient of [`RecordedStack::top`]) through the
/// stack.
pub(crate) fn backward_stack(
    layers: &[LstmWithProjection],
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
    let mut per_layer = Vec::with_capacity(layers.len());
    let recorded = (stack.tapes.into_iter().zip(stack.input_masks)).zip(stack.dropped);
    for (index, (layer, ((tape, input_mask), dropped))) in
        layers.iter().zip(recorded).enumerate().rev()
    {
        let (ran, weight_mask) = match &dropped {
            Some((dropped, mask)) => (dropped, Some(mask)),
            None => (layer, None),
        };
        let LstmGradients {
            inputs,
            mut weights,
        } = ran.backward_recorded(tape, grad.clone());
        if let Some(mask) = weight_mask {
            weights.state_weight = weights.state_weight * mask.clone();
        }
        let grad_input = if index > 0 && use_skip_connections {
            inputs + grad
        } else {
            inputs
        };
        grad = mask(grad_input, input_mask);
        per_layer.push(weights);
    }
    per_layer.reverse();
    StackGradients {
        embedded: grad,
        layers: per_layer,
    }
}
