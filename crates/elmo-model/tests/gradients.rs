//! Gradient checks: every trainable parameter gets a gradient, a frozen biLM gets none, and the
//! analytic gradients of the LSTMP and of a character convolution agree with central finite
//! differences.

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Gradients;
use burn::tensor::{Device, Distribution, Tensor};
use common::*;
use elmo_model::char_cnn::CharConvolution;
use elmo_model::{ElmoConfig, LstmWithProjectionConfig};
use elmo_test_support::{autodiff_one_at_a_time, scaled_difference};

/// Records, for every float parameter, whether it received a non-zero gradient.
struct GradientReport<'a> {
    grads: &'a Gradients,
    path: Vec<String>,
    with_gradient: Vec<String>,
    without_gradient: Vec<String>,
}

impl ModuleVisitor for GradientReport<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let name = self.path.join(".");
        match param.val().grad(self.grads) {
            Some(g) if g.clone().abs().sum().into_scalar::<f32>() > 0.0 => {
                self.with_gradient.push(name)
            }
            _ => self.without_gradient.push(name),
        }
    }
}

fn report<M: Module>(module: &M, grads: &Gradients) -> (Vec<String>, Vec<String>) {
    let mut r = GradientReport {
        grads,
        path: Vec::new(),
        with_gradient: Vec::new(),
        without_gradient: Vec::new(),
    };
    module.visit(&mut r);
    (r.with_gradient, r.without_gradient)
}

fn elmo_on(device: &Device, bilm_requires_grad: bool) -> elmo_model::Elmo {
    ElmoConfig {
        bilm_requires_grad,
        dropout: 0.0,
        do_layer_norm: true,
        ..ElmoConfig::default()
    }
    .from_pretrained(
        fixture("tiny/options.json"),
        fixture("tiny/weights.hdf5"),
        device,
    )
    .expect("load")
}

/// Gradients of a random projection of ELMo's output on the `main` batch.
fn elmo_gradients(bilm_requires_grad: bool) -> (elmo_model::Elmo, Gradients) {
    let device = Device::flex().autodiff();
    let elmo = elmo_on(&device, bilm_requires_grad);
    let out = elmo.forward_sentences(&tiny_sentences("main"), &device);
    let weights = out.representations[0]
        .random_like(Distribution::Normal(0.0, 1.0))
        .detach();
    let grads = (out.representations[0].clone() * weights).sum().backward();
    (elmo, grads)
}

#[test]
fn frozen_bilm_gets_no_gradient_and_the_mix_does() {
    let _one = autodiff_one_at_a_time();
    let (elmo, grads) = elmo_gradients(false);
    let (bilm_with, bilm_without) = report(&elmo.bilm, &grads);
    assert!(
        bilm_with.is_empty(),
        "frozen biLM parameters got gradient: {bilm_with:?}"
    );
    assert!(!bilm_without.is_empty());
    let (mix_with, mix_without) = report(&elmo.scalar_mixes, &grads);
    assert!(
        mix_without.is_empty(),
        "mix parameters without gradient: {mix_without:?}"
    );
    assert_eq!(mix_with.len(), 2, "weights and gamma");
}

#[test]
fn trainable_bilm_every_parameter_gets_gradient() {
    let _one = autodiff_one_at_a_time();
    let (elmo, grads) = elmo_gradients(true);
    let (with, without) = report(&elmo, &grads);
    assert!(
        without.is_empty(),
        "parameters without gradient: {without:?}"
    );
    // char embedding, 3 convs x 2, 2 highways x 4, projection x 2, 4 LSTMs x 4, mix x 2.
    assert_eq!(with.len(), 1 + 6 + 8 + 2 + 16 + 2, "{with:?}");
}

fn lstm_loss(
    layer: &elmo_model::LstmWithProjection,
    x: &Tensor<3>,
    w: &Tensor<3>,
    go_forward: bool,
) -> Tensor<1> {
    let out = layer.forward(x.clone(), &[4, 2, 0], go_forward, None);
    (out.outputs * w.clone()).sum() + out.final_state.memory.sum().mul_scalar(0.5)
}

#[test]
fn lstm_gradients_match_finite_differences() {
    let _one = autodiff_one_at_a_time();
    let device = Device::flex().autodiff();
    let plain = Device::flex();
    for go_forward in [true, false] {
        device.seed(7);
        let layer = LstmWithProjectionConfig {
            d_input: 3,
            d_cell: 5,
            d_projection: 2,
            cell_clip: None,
            projection_clip: None,
        }
        .init(&device);
        let x = Tensor::<3>::random([3, 4, 3], Distribution::Normal(0.0, 1.0), &device);
        let w = Tensor::<3>::random([3, 4, 2], Distribution::Normal(0.0, 1.0), &device);
        let grads = lstm_loss(&layer, &x, &w, go_forward).backward();
        let analytic = layer
            .input_weight
            .val()
            .grad(&grads)
            .expect("grad")
            .into_data()
            .try_into_vec_as::<f32>()
            .expect("f32");

        // Central differences on a plain (no autodiff) copy.
        let plain_layer = layer.valid().to_device(&plain);
        let (x, w) = (x.detach().to_device(&plain), w.detach().to_device(&plain));
        let base = plain_layer.input_weight.val();
        let eps = 1e-2f32;
        for index in [0usize, 7, 19, 33, 59] {
            let (row, col) = (index / 20, index % 20);
            let bump = |delta: f32| {
                let mut l = plain_layer.clone();
                let one = Tensor::<2>::zeros([3, 20], &plain)
                    .slice_assign([row..row + 1, col..col + 1], Tensor::ones([1, 1], &plain));
                l.input_weight = Param::from_tensor(base.clone() + one.mul_scalar(delta));
                lstm_loss(&l, &x, &w, go_forward).into_scalar::<f32>()
            };
            let numeric = (bump(eps) - bump(-eps)) / (2.0 * eps);
            let a = analytic[index];
            assert!(
                (a - numeric).abs() <= 2e-3 + 2e-2 * numeric.abs(),
                "go_forward={go_forward} dW[{row},{col}]: analytic {a} vs numeric {numeric}"
            );
        }
    }
}

/// `Σ w ⊙ conv(chars)`, over all positions or (with `extent`) the first ones and the padding window.
fn convolution_loss(
    conv: &CharConvolution,
    chars: &Tensor<3>,
    padding_char: &Tensor<1>,
    extent: Option<usize>,
    w: &Tensor<2>,
) -> Tensor<1> {
    let out = match extent {
        Some(extent) => conv.forward_with_extent(chars.clone(), extent, Some(padding_char.clone())),
        None => conv.forward(chars.clone()),
    };
    (out * w.clone()).sum()
}

/// The gradient with respect to the characters (the windows are gathered by slot, the gradient
/// scattered back and added where windows overlap) and to the padding character, for a window
/// of one slot and of three, over all positions and over the first ones plus the padding window.
#[test]
fn char_convolution_gradients_match_finite_differences() {
    let _one = autodiff_one_at_a_time();
    let device = Device::flex().autodiff();
    let plain = Device::flex();
    let (n_tokens, n_slots, d_char, n_filters) = (2, 9, 4, 5);
    for width in [1, 3] {
        for extent in [None, Some(5)] {
            device.seed(11);
            let conv = CharConvolution {
                weight: Param::from_tensor(Tensor::random(
                    [width * d_char, n_filters],
                    Distribution::Normal(0.0, 1.0),
                    &device,
                )),
                bias: Param::from_tensor(Tensor::random(
                    [n_filters],
                    Distribution::Normal(0.0, 1.0),
                    &device,
                )),
                width,
                kernels: elmo_model::KernelSettings::default(),
            };
            let chars = Tensor::<3>::random(
                [n_tokens, n_slots, d_char],
                Distribution::Normal(0.0, 1.0),
                &device,
            )
            .require_grad();
            let padding_char =
                Tensor::<1>::random([d_char], Distribution::Normal(0.0, 1.0), &device)
                    .require_grad();
            let w = Tensor::<2>::random(
                [n_tokens, n_filters],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let grads = convolution_loss(&conv, &chars, &padding_char, extent, &w).backward();
            let analytic = |x: &Tensor<3>| -> Vec<f32> {
                x.grad(&grads)
                    .expect("grad")
                    .into_data()
                    .try_into_vec_as()
                    .expect("f32")
            };
            let analytic_chars = analytic(&chars);
            // Without an extent the padding character is not read: no gradient, as numerically.
            let analytic_padding: Vec<f32> =
                padding_char.grad(&grads).map_or(vec![0.0; d_char], |g| {
                    g.into_data().try_into_vec_as().expect("f32")
                });

            // Central differences on plain (no autodiff) copies.
            let conv = conv.valid().to_device(&plain);
            let chars = chars.detach().to_device(&plain);
            let padding_char = padding_char.detach().to_device(&plain);
            let w = w.detach().to_device(&plain);
            // Small: a max over positions has kinks, and a wider step crosses one (1e-2 does here).
            let eps = 1e-3f32;
            let numeric = |bumped: &dyn Fn(f32) -> (Tensor<3>, Tensor<1>)| {
                let loss = |delta: f32| {
                    let (c, p) = bumped(delta);
                    convolution_loss(&conv, &c, &p, extent, &w).into_scalar::<f32>()
                };
                (loss(eps) - loss(-eps)) / (2.0 * eps)
            };
            let check = |what: String, a: f32, numeric: f32| {
                assert!(
                    (a - numeric).abs() <= 5e-3 + 1e-2 * numeric.abs(),
                    "width {width}, extent {extent:?}, {what}: analytic {a} vs numeric {numeric}"
                );
            };
            let one_hot = |n: usize, index: usize| {
                let mut values = vec![0.0f32; n];
                values[index] = 1.0;
                values
            };
            let n = n_tokens * n_slots * d_char;
            assert_eq!(analytic_chars.len(), n);
            for (index, &analytic) in analytic_chars.iter().enumerate() {
                let hot = Tensor::<3>::from_data(
                    burn::tensor::TensorData::new(one_hot(n, index), [n_tokens, n_slots, d_char]),
                    &plain,
                );
                let numeric = numeric(&|delta| {
                    (
                        chars.clone() + hot.clone().mul_scalar(delta),
                        padding_char.clone(),
                    )
                });
                check(format!("chars[{index}]"), analytic, numeric);
            }
            for (index, &analytic) in analytic_padding.iter().enumerate() {
                let hot = Tensor::<1>::from_data(
                    burn::tensor::TensorData::new(one_hot(d_char, index), [d_char]),
                    &plain,
                );
                let numeric = numeric(&|delta| {
                    (
                        chars.clone(),
                        padding_char.clone() + hot.clone().mul_scalar(delta),
                    )
                });
                check(format!("padding[{index}]"), analytic, numeric);
            }
        }
    }
}

/// On wgpu the convolution's product runs over slices of the windows (so that its weight
/// gradient is split along them): the output and every gradient equal flex's whole product.
/// 8 tokens of 50 slots: 400 windows at width 1 (2 slices), 392 at width 2 (2 slices), 384 at
/// width 3 (3 slices).
#[test]
fn char_convolution_on_wgpu_equals_flex() {
    let _one = autodiff_one_at_a_time();
    let Some(wgpu) = elmo_test_support::wgpu_device_or_skip("char_convolution_on_wgpu_equals_flex")
    else {
        return;
    };
    let (n_tokens, n_slots, d_char, n_filters) = (8, 50, 4, 5);
    let plain = Device::flex();
    for width in [1, 2, 3] {
        plain.seed(5);
        let weight = Tensor::<2>::random(
            [width * d_char, n_filters],
            Distribution::Normal(0.0, 1.0),
            &plain,
        );
        let bias = Tensor::<1>::random([n_filters], Distribution::Normal(0.0, 1.0), &plain);
        let chars = Tensor::<3>::random(
            [n_tokens, n_slots, d_char],
            Distribution::Normal(0.0, 1.0),
            &plain,
        );
        let w = Tensor::<2>::random(
            [n_tokens, n_filters],
            Distribution::Normal(0.0, 1.0),
            &plain,
        );
        let run = |device: &Device| -> Vec<Vec<f32>> {
            let device = device.clone().autodiff();
            let conv = CharConvolution {
                weight: Param::from_tensor(
                    Tensor::from_data(weight.to_data(), &device).require_grad(),
                ),
                bias: Param::from_tensor(Tensor::from_data(bias.to_data(), &device).require_grad()),
                width,
                kernels: elmo_model::KernelSettings::default(),
            };
            let chars = Tensor::<3>::from_data(chars.to_data(), &device).require_grad();
            let w = Tensor::<2>::from_data(w.to_data(), &device);
            let padding = Tensor::<1>::zeros([d_char], &device);
            let loss =
                convolution_loss(&conv, &chars, &padding, None, &w.clone().to_device(&device));
            let grads = loss.clone().backward();
            let values =
                |t: Tensor<2>| -> Vec<f32> { t.into_data().try_into_vec_as().expect("f32") };
            vec![
                values(loss.reshape([1, 1])),
                values(conv.weight.val().grad(&grads).expect("weight gradient")),
                values(
                    conv.bias
                        .val()
                        .grad(&grads)
                        .expect("bias gradient")
                        .reshape([1, n_filters]),
                ),
                values(
                    chars
                        .grad(&grads)
                        .expect("chars gradient")
                        .reshape([n_tokens, n_slots * d_char]),
                ),
            ]
        };
        let (expected, got) = (run(&plain), run(&wgpu));
        for (name, (a, b)) in ["loss", "weight", "bias", "chars"]
            .iter()
            .zip(expected.iter().zip(&got))
        {
            let (error, scale) = scaled_difference(a, b);
            assert!(
                error <= 1e-5 * scale,
                "width {width}, {name}: error {error}, scale {scale}"
            );
        }
    }
}
