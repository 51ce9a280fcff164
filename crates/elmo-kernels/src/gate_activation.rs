//! The four LSTM gate activations (`σ` for input, forget and output, `tanh` for the cell input;
//! Hochreiter & Schmidhuber 1997 as in AllenNLP's `LstmCellWithProjection`) as one `[.., 4C]`
//! pass of cheap elementwise operations.
//!
//! The pre-activations are computed negated, and doubled for the cell input: the weights and
//! bias are multiplied column-wise by −1 or −2 ([`GateActivation::prepare`], exact in floating
//! point). Then `1 / (1 + exp(·))` over all four gates gives `σ(z)` and `σ(2g)`, and one
//! multiply-add turns the latter into `tanh(g) = 2σ(2g) − 1`. Why: `tanh` and `sigmoid` are slow
//! scalar loops on the CPU backends (flex: `tanh` 6x, `sigmoid` 2x the time of `exp` on the same
//! block), and burn's `sigmoid` is six kernels on a GPU.
//!
//! The argument of `exp` is clamped to ±80 first: `exp` cannot overflow (an infinity would turn
//! into NaN under autodiff), and the result is unchanged in `f32` (`σ(80)` rounds to 1, `σ(−80)`
//! to 1.8e−35, `tanh(40)` to 1).

use burn::tensor::{Device, Tensor, TensorData};

/// Largest argument given to `exp` (here and in the fused cell kernels of `cube_lstm_cell.rs`).
pub const EXP_LIMIT: f32 = 80.0;

/// Column constants over the gates `i, f, g, o` (`[1, 4C]` rows).
#[derive(Debug, Clone)]
pub struct GateActivation {
    /// −1 for `i, f, o`, −2 for `g`.
    negate: Tensor<2>,
    /// 1 for `i, f, o`, 2 for `g`.
    scale: Tensor<2>,
    /// 0 for `i, f, o`, −1 for `g`.
    shift: Tensor<2>,
}

/// A `[1, 4C]` row: `value_g` in the `g` block, `value_ifo` elsewhere.
fn per_gate(d_cell: usize, value_ifo: f32, value_g: f32, device: &Device) -> Tensor<2> {
    let mut row = vec![value_ifo; 4 * d_cell];
    row[2 * d_cell..3 * d_cell].fill(value_g);
    Tensor::from_data(TensorData::new(row, [1, 4 * d_cell]), device)
}

impl GateActivation {
    pub fn new(d_cell: usize, device: &Device) -> Self {
        Self {
            negate: per_gate(d_cell, -1.0, -2.0, device),
            scale: per_gate(d_cell, 1.0, 2.0, device),
            shift: per_gate(d_cell, 0.0, -1.0, device),
        }
    }

    /// A weight `[d, 4C]` or bias `[1, 4C]` whose products give [`Self::activate`]'s input.
    pub fn prepare(&self, weight: Tensor<2>) -> Tensor<2> {
        weight * self.negate.clone()
    }

    /// `[B, 4C]` pre-activations made with [`Self::prepare`]d weights → `σ(i), σ(f), tanh(g),
    /// σ(o)`.
    pub fn activate(&self, prepared: Tensor<2>) -> Tensor<2> {
        prepared
            .clamp(-f64::from(EXP_LIMIT), f64::from(EXP_LIMIT))
            .exp()
            .add_scalar(1.0)
            .recip()
            * self.scale.clone()
            + self.shift.clone()
    }
}
