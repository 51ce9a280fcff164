//! The training fast path of the token encoder's dense layers (its highways and projection:
//! Peters et al. 2018 §3.4, bilm-tf's gate form as in `elmo_model::highway`): a forward pass
//! outside autodiff over each distinct token's convolutions, and their backward pass by hand.
//!
//! Why by hand: under autodiff burn's matmul runs their products (and on a CubeCL device cannot
//! be told otherwise), where by hand they run as the LSTM's and the softmax's do
//! ([`product`], [`transposed_product`]: cuBLAS on CUDA, the kernel of their shape on wgpu,
//! 16-bit operands with `Precision::Mixed`, weight gradients split over the rows where products
//! are split), over all of a batch's distinct tokens at once (U rows: ~2,400 at `original` 128 ×
//! 20), not in the convolutions' chunks: ~15% of a training step's FLOPs at `original`. Autodiff
//! keeps the convolutions' products, fed the gradient of their output; the char lookup and the
//! windows are made outside it ([`CharLookup`]) and the char embedding's gradient summed here by
//! char id in a fixed order (autodiff's scatter-adds add atomically on CUDA).

use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Gradients, Tensor};
use elmo_kernels::{KernelSettings, product, sum_columns, sum_row_groups, transposed_product};
use elmo_model::bilm::ConvolvedTokens;
use elmo_model::char_cnn::{DenseRecord, PADDING_CHAR_ID};
use elmo_model::char_lookup::CharLookup;
use elmo_model::highway::HighwayRecord;
use elmo_model::{BiLm, CharCnnEncoder, CharIdBatch};

use crate::language_model::register_if_trained;
use crate::optimizer::move_gradients;

/// A token encoder's pass over a batch with its dense layers recorded
/// ([`Self::forward`]), consumed by [`Self::backward`].
pub(crate) struct EncoderPass {
    /// The distinct tokens' convolutions (tracked by autodiff where the encoder trains).
    convolved: ConvolvedTokens,
    /// The dense layers' pass over them, outside autodiff.
    record: DenseRecord,
}

impl EncoderPass {
    /// Encodes `batch` with `bilm`'s token encoder, the dense layers outside autodiff.
    ///
    /// # Shapes
    /// - the token embeddings ([`Self::embedded`]): `[B, T, P]`, without autodiff
    pub(crate) fn forward(bilm: &BiLm, batch: &CharIdBatch, device: &Device) -> Self {
        let convolved = bilm.convolve_tokens(batch, device);
        let plain = bilm.token_encoder.valid();
        let record = plain.dense_recorded(convolved.convolutions.clone().inner());
        Self { convolved, record }
    }

    /// Every position's token embedding.
    ///
    /// # Shapes
    /// - output: `[B, T, P]`
    pub(crate) fn embedded(&self) -> Tensor<3> {
        self.convolved.place(self.record.token_embedding.clone())
    }

    /// Backpropagates `grad_embedded` (the gradient of [`Self::embedded`]) into the gradients
    /// of `encoder`'s trained parameters, added to `grads`: the dense layers' by hand, then
    /// the convolutions' through autodiff and the char embedding's from its lookups' leaves.
    ///
    /// # Shapes
    /// - grad_embedded: `[B, T, P]`
    pub(crate) fn backward(
        self,
        encoder: &CharCnnEncoder,
        grad_embedded: Tensor<3>,
        kernels: KernelSettings,
        grads: &mut GradientsParams,
    ) {
        let Self { convolved, record } = self;
        let convolutions_tracked = convolved.convolutions.is_tracked();
        if !convolutions_tracked && !dense_trains(encoder) {
            return;
        }
        let [batch, n_steps, d_output] = grad_embedded.dims();
        let n_distinct = record.token_embedding.dims()[0];
        // Positions sharing a token add their gradients into its row, in a fixed order (the
        // same gradients at every run, where atomic additions would vary in the last bits).
        let grad = sum_row_groups(
            grad_embedded.reshape([batch * n_steps, d_output]),
            &convolved.rows,
            n_distinct,
            kernels,
        );
        // Outside autodiff (a vendor BLAS refuses tracked tensors and the products would fall
        // back to burn's kernel silently).
        assert!(
            !grad.device().is_autodiff(),
            "the encoder's backward products run under autodiff"
        );
        let mode = kernels.product_mode(&grad);
        let split = kernels.split_for(&grad);
        let weight = |param: &Param<Tensor<2>>| param.val().inner();
        let projection = &encoder.projection;
        register_if_trained(
            grads,
            &projection.weight,
            transposed_product(record.highway, grad.clone(), split, mode),
        );
        if let Some(bias) = &projection.bias {
            register_if_trained(grads, bias, sum_columns(grad.clone(), kernels));
        }
        let mut grad = product(grad, weight(&projection.weight).transpose(), kernels);
        for (layer, pass) in encoder.highways.iter().zip(record.highways).rev() {
            let HighwayRecord {
                input,
                gate,
                transform,
                ..
            } = pass;
            // y = x + g·(relu(t) − x): ∂g = ∂y·(relu(t) − x), ∂t = ∂y·g where t > 0.
            let one_minus_gate = gate.clone().neg() + 1.0;
            let grad_gate = grad.clone() * (relu(transform.clone()) - input.clone());
            let grad_carry = grad_gate * gate.clone() * one_minus_gate.clone();
            let grad_transform =
                (grad.clone() * gate.clone()).mask_fill(transform.lower_equal_elem(0.0), 0.0);
            for (linear, grad_out) in [
                (&layer.carry, &grad_carry),
                (&layer.transform, &grad_transform),
            ] {
                register_if_trained(
                    grads,
                    &linear.weight,
                    transposed_product(input.clone(), grad_out.clone(), split, mode),
                );
                if let Some(bias) = &linear.bias {
                    register_if_trained(grads, bias, sum_columns(grad_out.clone(), kernels));
                }
            }
            grad = grad * one_minus_gate
                + product(grad_carry, weight(&layer.carry.weight).transpose(), kernels)
                + product(
                    grad_transform,
                    weight(&layer.transform.weight).transpose(),
                    kernels,
                );
        }
        if convolutions_tracked {
            let surrogate = (convolved.convolutions * grad).sum();
            let backward = surrogate.backward();
            if let Some(grad) = char_table_gradient(&convolved.char_lookups, &backward, encoder) {
                register_if_trained(grads, &encoder.char_embedding, grad);
            }
            let encoder_grads = GradientsParams::from_grads(backward, encoder);
            move_gradients(encoder, encoder_grads, grads);
        }
    }
}

/// The char embedding's gradient from the gradients in `backward` of its lookups' leaves
/// ([`CharLookup`]): every window slot's into its char's row, the padding char's into its row,
/// in a fixed order; `None` where no leaf has a gradient.
///
/// # Shapes
/// - output: `[n_characters, E]`
fn char_table_gradient(
    lookups: &[CharLookup],
    backward: &Gradients,
    encoder: &CharCnnEncoder,
) -> Option<Tensor<2>> {
    let (mut rows, mut group_of) = (Vec::new(), Vec::new());
    let d_char = encoder.char_embedding.dims()[1];
    for lookup in lookups {
        for leaves in &lookup.windows {
            if let Some(grad) = leaves.windows.grad(backward) {
                rows.push(grad.reshape([leaves.ids.len(), d_char]));
                group_of.extend_from_slice(&leaves.ids);
            }
        }
        if let Some(grad) = (lookup.padding_char.as_ref()).and_then(|p| p.grad(backward)) {
            rows.push(grad.reshape([1, d_char]));
            group_of.push(usize::from(PADDING_CHAR_ID));
        }
    }
    let n_characters = encoder.char_embedding.dims()[0];
    (!rows.is_empty()).then(|| {
        sum_row_groups(
            Tensor::cat(rows, 0),
            &group_of,
            n_characters,
            encoder.kernels,
        )
    })
}

/// Whether any of `encoder`'s highway or projection parameters trains.
fn dense_trains(encoder: &CharCnnEncoder) -> bool {
    let linears = (encoder.highways.iter())
        .flat_map(|h| [&h.carry, &h.transform])
        .chain([&encoder.projection]);
    linears
        .flat_map(|l| {
            let bias = l.bias.as_ref().map(|b| b.val().is_require_grad());
            [Some(l.weight.val().is_require_grad()), bias]
        })
        .any(|trains| trains == Some(true))
}
