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

use crate::host_weights::HostBf16Weight;

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
    /// The `bf16` copies of the carry and transform weights for [`Precision::Mixed`]'s
    /// products on a CPU with AMX or AVX512-BF16 ([`HostBf16Weight`]; empty elsewhere).
    ///
    /// [`Precision::Mixed`]: elmo_kernels::Precision::Mixed
    #[module(skip)]
    pub host_bf16: [HostBf16Weight; 2],
}

impl HighwayConfig {
    /// Creates a highway layer with random weights.
    pub fn init(&self, device: &Device) -> Highway {
        let linear = LinearConfig::new(self.d_model, self.d_model);
        Highway {
            carry: linear.init(device),
            transform: linear.init(device),
            host_bf16: Default::default(),
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
        let [carry, transform] = &self.host_bf16;
        let gate = sigmoid(linear_in(&self.carry, x.clone(), kernels, carry));
        let transform = linear_in(&self.transform, x.clone(), kernels, transform);
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

/// `layer`'s `x·W + b` with the product run as `kernels` asks: in `bf16` with the weight's copy
/// kept in `host_bf16` ([`HostBf16Weight`]: with [`Precision::Mixed`] on flex outside autodiff,
/// on a CPU with AMX or AVX512-BF16), else as [`product`] runs it.
///
/// [`Precision::Mixed`]: elmo_kernels::Precision::Mixed
///
/// # Shapes
/// - x: `[n, d_input]`; output: `[n, d_output]`
pub fn linear_in(
    layer: &Linear,
    x: Tensor<2>,
    kernels: KernelSettings,
    host_bf16: &HostBf16Weight,
) -> Tensor<2> {
    let weight = layer.weight.val();
    let out = match host_bf16.product(&x, &weight, kernels) {
        Some(out) => out,
        None => product(x, weight, kernels),
    };
    match &layer.bias {
        Some(bias) => out + bias.val().unsqueeze_dim(0),
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use burn::module::Param;
    use burn::tensor::{Distribution, TensorData};
    use elmo_kernels::Precision;

    use super::*;

    fn max_abs_diff(a: &Tensor<2>, b: &Tensor<2>) -> f32 {
        (a.clone() - b.clone()).abs().max().into_scalar()
    }

    /// With [`Precision::Mixed`] on flex, on a CPU with AMX or AVX512-BF16, the two products
    /// run in `bf16`: within bf16's rounding of `f32` and not equal to it; the weights are
    /// packed once and kept across calls and batch sizes, packed again for the other unit
    /// (where the CPU has both) and for new weights, whose outputs they then give. In `f32`,
    /// under autodiff, and on a CPU without either, nothing is packed and the outputs equal
    /// `f32`'s.
    #[test]
    fn mixed_precision_keeps_bf16_weights() {
        let device = Device::flex();
        let mut layer = HighwayConfig { d_model: 96 }.init(&device);
        let x =
            |rows: usize| Tensor::<2>::random([rows, 96], Distribution::Normal(0.0, 1.0), &device);
        let mixed = KernelSettings {
            precision: Precision::Mixed,
            ..KernelSettings::ALL
        };
        let exact = KernelSettings::ALL;
        let bf16 = cfg!(feature = "flex")
            && elmo_kernels::host_bf16_products(elmo_kernels::HostInstructions::Widest);
        let packed = |layer: &Highway| {
            layer
                .host_bf16
                .iter()
                .map(HostBf16Weight::is_packed)
                .collect::<Vec<_>>()
        };

        let input = x(37);
        let f32_out = layer.forward_in(input.clone(), exact);
        assert_eq!(packed(&layer), [false, false], "f32 packs nothing");
        let bf16_out = layer.forward_in(input.clone(), mixed);
        let diff = max_abs_diff(&f32_out, &bf16_out);
        let largest: f32 = f32_out.clone().abs().max().into_scalar();
        if bf16 {
            assert!(
                diff > 0.0 && diff < 0.02 * largest,
                "bf16: {diff} of {largest}"
            );
            assert_eq!(packed(&layer), [true, true]);
        } else {
            assert_eq!(diff, 0.0, "f32 without a bf16 unit");
            assert_eq!(packed(&layer), [false, false]);
        }
        // Kept: the same outputs from the kept copies, for another batch size too.
        assert_eq!(
            max_abs_diff(&bf16_out, &layer.forward_in(input.clone(), mixed)),
            0.0
        );
        let other = x(5);
        let rows = layer.forward_in(Tensor::cat(vec![other.clone(), input.clone()], 0), mixed);
        assert_eq!(max_abs_diff(&rows.narrow(0, 5, 37), &bf16_out), 0.0);

        // AVX-512 at most: AVX512-BF16's products where the CPU has them (packed again where
        // the tiles ran the first), the same rounded operands summed in another order; then
        // the tiles' outputs again.
        let avx512 = KernelSettings {
            host_instructions: elmo_kernels::HostInstructions::Avx512,
            ..mixed
        };
        let vector_out = layer.forward_in(input.clone(), avx512);
        if cfg!(feature = "flex")
            && elmo_kernels::host_bf16_products(elmo_kernels::HostInstructions::Avx512)
        {
            let from_f32 = max_abs_diff(&vector_out, &f32_out);
            assert!(from_f32 > 0.0, "bf16, not f32");
            if bf16 {
                let diff = max_abs_diff(&vector_out, &bf16_out);
                assert!(
                    diff < 1e-4 * largest,
                    "AVX512-BF16 against the first unit: {diff}"
                );
            } else {
                // An Intel CPU with AVX512-BF16 and no AMX (Cooper Lake, or AMX off Linux),
                // whose first choice is `f32`. Regression: compared with that `f32` output
                // as if it were the tiles', this failed under wine on a Xeon with AMX.
                assert!(
                    from_f32 < 0.02 * largest,
                    "AVX512-BF16: {from_f32} of {largest}"
                );
            }
        } else {
            assert_eq!(
                max_abs_diff(&vector_out, &f32_out),
                0.0,
                "f32 without the unit"
            );
        }
        assert_eq!(
            max_abs_diff(&layer.forward_in(input.clone(), mixed), &bf16_out),
            0.0
        );

        // New weights: packed again, the new layer's own outputs.
        let weight = layer.carry.weight.val().mul_scalar(-1.5);
        layer.carry.weight = Param::from_tensor(weight);
        let new_exact = layer.forward_in(input.clone(), exact);
        let new_mixed = layer.forward_in(input.clone(), mixed);
        let limit = 0.02 * new_exact.clone().abs().max().into_scalar::<f32>();
        assert!(max_abs_diff(&new_exact, &new_mixed) <= limit);
        if bf16 {
            assert!(
                max_abs_diff(&new_mixed, &bf16_out) > limit,
                "the old copy was used"
            );
        }

        // Under autodiff the products stay f32 (and differentiable).
        let train = Device::flex().autodiff();
        let layer = HighwayConfig { d_model: 8 }.init(&train);
        let input = Tensor::<2>::from_data(TensorData::new(vec![0.5f32; 24], [3, 8]), &train);
        let a = layer.forward_in(input.clone(), mixed);
        let b = layer.forward_in(input, exact);
        assert_eq!(max_abs_diff(&a, &b), 0.0);
        assert_eq!(
            packed(&layer),
            [false, false],
            "nothing packed under autodiff"
        );
    }
}
