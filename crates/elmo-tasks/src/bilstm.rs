//! A masked bidirectional LSTM layer for the task heads: a forward and a backward
//! [`LstmWithProjection`] (projection to the cell width, no clipping), each row read within its
//! own length so that padding never reaches the backward direction.

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use elmo_model::{LstmWithProjection, LstmWithProjectionConfig};

/// Configuration of a [`BiLstmLayer`].
#[derive(Debug, Clone)]
pub struct BiLstmLayerConfig {
    /// Input width.
    pub d_input: usize,
    /// Hidden width per direction.
    pub d_hidden: usize,
}

impl BiLstmLayerConfig {
    /// Creates the layer with random weights.
    pub fn init(&self, device: &Device) -> BiLstmLayer {
        let direction = LstmWithProjectionConfig {
            d_input: self.d_input,
            d_cell: self.d_hidden,
            d_projection: self.d_hidden,
            cell_clip: None,
            projection_clip: None,
        };
        BiLstmLayer {
            forward: direction.init(device),
            backward: direction.init(device),
        }
    }
}

/// Forward and backward LSTMs over padded rows.
#[derive(Module, Debug)]
pub struct BiLstmLayer {
    /// Left-to-right LSTM.
    pub forward: LstmWithProjection,
    /// Right-to-left LSTM.
    pub backward: LstmWithProjection,
}

impl BiLstmLayer {
    /// Output width (`2H`).
    pub fn d_output(&self) -> usize {
        2 * self.forward.d_projection()
    }

    /// Runs both directions; padded positions give zeros.
    ///
    /// # Shapes
    /// - inputs: `[B, T, d_input]`, `lengths`: `B` values `<= T`
    /// - output: `[B, T, 2H]`
    pub fn forward(&self, inputs: Tensor<3>, lengths: &[usize]) -> Tensor<3> {
        let forward = self.forward.forward(inputs.clone(), lengths, true, None);
        let backward = self.backward.forward(inputs, lengths, false, None);
        Tensor::cat(vec![forward.outputs, backward.outputs], 2)
    }
}
