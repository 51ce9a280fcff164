//! Recurrent state carried across calls in stateful mode, with AllenNLP's bookkeeping
//! (`_EncoderBase._get_initial_states` / `_update_states`, allennlp/modules/encoder_base.py).
//!
//! State is kept per batch row: a bigger batch grows the state with zero rows, a smaller batch
//! uses (and updates) only its first rows and leaves the others untouched, and a row that had no
//! real token keeps its previous state. Carried state never carries gradient.

use burn::tensor::{Device, Tensor, TensorData};

use crate::lstm_projection::LstmState;

/// The state of both directions of every layer of a biLM.
#[derive(Debug, Clone)]
pub struct BiLmState {
    /// `layers[l]` = (forward, backward) state of layer `l`.
    pub layers: Vec<DirectionalState>,
}

/// Forward and backward state of one layer.
#[derive(Debug, Clone)]
pub struct DirectionalState {
    /// State of the left-to-right LSTM.
    pub forward: LstmState,
    /// State of the right-to-left LSTM.
    pub backward: LstmState,
}

fn rows(state: &LstmState) -> usize {
    state.hidden.dims()[0]
}

fn grow(state: LstmState, batch: usize) -> LstmState {
    let have = rows(&state);
    if have >= batch {
        return state;
    }
    let device = state.hidden.device();
    let pad = |t: Tensor<2>| {
        let width = t.dims()[1];
        Tensor::cat(vec![t, Tensor::zeros([batch - have, width], &device)], 0)
    };
    LstmState {
        hidden: pad(state.hidden),
        memory: pad(state.memory),
    }
}

fn first_rows(state: &LstmState, batch: usize) -> LstmState {
    LstmState {
        hidden: state.hidden.clone().narrow(0, 0, batch),
        memory: state.memory.clone().narrow(0, 0, batch),
    }
}

/// `[batch, 1]` with 1.0 for rows that had at least one real token.
fn used_rows(lengths: &[usize], device: &Device) -> Tensor<2> {
    let used: Vec<f32> = lengths
        .iter()
        .map(|&l| f32::from(u8::from(l > 0)))
        .collect();
    Tensor::from_data(TensorData::new(used, [lengths.len(), 1]), device)
}

fn merge(old: LstmState, new: LstmState, used: &Tensor<2>) -> LstmState {
    let batch = rows(&new);
    let blend = |old: Tensor<2>, new: Tensor<2>| {
        let total = old.dims()[0];
        let width = old.dims()[1];
        let head = old.clone().narrow(0, 0, batch);
        let unused = used.clone().neg().add_scalar(1.0);
        let merged = new.detach() * used.clone() + head * unused;
        if total > batch {
            old.slice_assign([0..batch, 0..width], merged)
        } else {
            merged
        }
    };
    LstmState {
        hidden: blend(old.hidden, new.hidden),
        memory: blend(old.memory, new.memory),
    }
}

impl BiLmState {
    /// Initial states for a batch of `batch` rows (growing the stored state if needed).
    pub fn initial_for(&mut self, batch: usize) -> Vec<DirectionalState> {
        for layer in &mut self.layers {
            layer.forward = grow(layer.forward.clone(), batch);
            layer.backward = grow(layer.backward.clone(), batch);
        }
        self.layers
            .iter()
            .map(|layer| DirectionalState {
                forward: first_rows(&layer.forward, batch),
                backward: first_rows(&layer.backward, batch),
            })
            .collect()
    }

    /// Stores the final states of a batch; rows with `lengths[b] == 0` and rows beyond the batch
    /// keep their previous state.
    pub fn update(&mut self, finals: Vec<DirectionalState>, lengths: &[usize]) {
        let device = self.layers[0].forward.hidden.device();
        let used = used_rows(lengths, &device);
        for (layer, new) in self.layers.iter_mut().zip(finals) {
            layer.forward = merge(layer.forward.clone(), new.forward, &used);
            layer.backward = merge(layer.backward.clone(), new.backward, &used);
        }
    }

    /// Number of batch rows the state holds.
    pub fn n_rows(&self) -> usize {
        self.layers.first().map_or(0, |l| rows(&l.forward))
    }

    /// A state detached from any autodiff graph (for the next batch of truncated BPTT).
    pub fn detach(self) -> Self {
        Self {
            layers: self
                .layers
                .into_iter()
                .map(|l| DirectionalState {
                    forward: l.forward.detach(),
                    backward: l.backward.detach(),
                })
                .collect(),
        }
    }
}
