//! The recurrent state of one LSTMP layer and direction (Peters et al. 2018, §3.1): the
//! projected hidden state and the memory cell, as AllenNLP's `LstmCellWithProjection` carries
//! them between steps and, in stateful mode, between batches.

use burn::tensor::Tensor;

/// The recurrent state of one direction of one layer.
///
/// # Shapes
/// - hidden: `[B, P]`
/// - memory: `[B, C]`
#[derive(Debug, Clone)]
pub struct LstmState {
    /// Projected hidden state `h`.
    pub hidden: Tensor<2>,
    /// Memory cell `c`.
    pub memory: Tensor<2>,
}

impl LstmState {
    /// The same state cut from any autodiff graph (truncated backpropagation through time).
    pub fn detach(self) -> Self {
        Self {
            hidden: self.hidden.detach(),
            memory: self.memory.detach(),
        }
    }
}
