//! Highway layer (Srivastava et al. 2015) in bilm-tf's gate form, as used after ELMo's char CNN
//! (Peters et al. 2018, §3.4; bilm-tf `bilm/model.py`).
//!
//! `g = σ(x·W_carry + b_carry)`, `y = g·relu(x·W_transform + b_transform) + (1 − g)·x`.
//! AllenNLP stores the same layer with a negated carry half; the two are identical.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::{relu, sigmoid};
use burn::tensor::{Device, Tensor};
use elmo_kernels::{KernelSettings, product};

/// Configuration of a [`Highway`] layer.
#[derive(Debug, Clone)]
pub struct HighwayConfig {
    /// Input and output width.
    pub d_model: usize,
}

/// One highway layer with a ReLU transform.
#[derive(Module, Debug)]
pub struct Highway {
    /// Gate: `[d_model, d_model]`, weight laid out `[d_input, d_output]` (bilm-tf `W_carry`).
    pub carry: Linear,
    /// Transform: `[d_model, d_model]` (bilm-tf `W_transform`).
    pub transform: Linear,
}

impl HighwayConfig {
    /// Creates a highway layer with random weights.
    pub fn init(&self, device: &Device) -> Highway {
        let linear = LinearConfig::new(self.d_model, self.d_model);
        Highway {
            carry: linear.init(device),
            transform: linear.init(device),
        }
    }
}

impl Highway {
    /// # Shapes
    /// - input: `[..., d_model]`
    /// - output: `[..., d_model]`
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let gate = sigmoid(self.carry.forward(x.clone()));
        let transformed = relu(self.transform.forward(x.clone()));
        x.clone() + gate * (transformed - x)
    }

    /// [`Self::forward`] with the two products run as `kernels` asks ([`product`]: the
    /// precision and, on a GPU, the kernel of the shape).
    ///
    /// # Shapes
    /// - input, output: `[n, d_model]`
    pub fn forward_in(&self, x: Tensor<2>, kernels: KernelSettings) -> Tensor<2> {
        self.forward_recorded(x, kernels).output
    }

    /// [`Self::forward_in`], keeping what a hand-written backward pass needs (the training
    /// step's, `elmo_train`'s `encoder_backward`).
    ///
    /// # Shapes
    /// - input: `[n, d_model]`; every tensor of the output: `[n, d_model]`
    pub fn forward_recorded(&self, x: Tensor<2>, kernels: KernelSettings) -> HighwayRecord {
        let gate = sigmoid(linear_in(&self.carry, x.clone(), kernels));
        let transform = linear_in(&self.transform, x.clone(), kernels);
        let output = x.clone() + gate.clone() * (relu(transform.clone()) - x.clone());
        HighwayRecord {
            input: x,
            gate,
            transform,
            output,
        }
    }
}

/// One highway layer's pass ([`Highway::forward_recorded`]).
#[derive(Debug, Clone)]
pub struct HighwayRecord {
    /// `x`, `[n, d_model]`.
    pub input: Tensor<2>,
    /// `g = σ(x·W_carry + b_carry)`, `[n, d_model]`.
    pub gate: Tensor<2>,
    /// `x·W_transform + b_transform` before the ReLU, `[n, d_model]`.
    pub transform: Tensor<2>,
    /// The layer's output `x + g·(relu(transform) − x)`, `[n, d_model]`.
    pub output: Tensor<2>,
}

/// `layer`'s `x·W + b` with the product run as `kernels` asks ([`product`]).
///
/// # Shapes
/// - x: `[n, d_input]`; output: `[n, d_output]`
pub fn linear_in(layer: &Linear, x: Tensor<2>, kernels: KernelSettings) -> Tensor<2> {
    let out = product(x, layer.weight.val(), kernels);
    match &layer.bias {
        Some(bias) => out + bias.val().unsqueeze_dim(0),
        None => out,
    }
}
