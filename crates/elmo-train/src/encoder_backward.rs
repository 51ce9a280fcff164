//! The training fast path of the token encoder (Peters et al. 2018 §3.4: char embedding,
//! convolutions, max over positions, activation, highways in bilm-tf's gate form as in
//! `elmo_model::highway`, projection): a forward pass outside autodiff over each distinct token
//! of a batch, and its backward pass by hand.
//!
//! Why by hand: under autodiff burn's matmul runs the products (and on a CubeCL device cannot be
//! told otherwise), where by hand they run as the LSTM's and the softmax's do ([`product`],
//! [`transposed_product`]: cuBLAS on CUDA, the kernel of their shape on wgpu, 16-bit operands
//! with `f32` accumulation with `Precision::Mixed`, weight gradients split over the rows where
//! products are split); the dense layers over all of a batch's distinct tokens at once (U rows:
//! ~2,400 at `original` 128 × 20; ~15% of a training step's FLOPs there), the convolutions
//! over the chunks they ran in ([`elmo_model::convolution_record::ConvolutionRecord`]). Every
//! gradient added by index (positions sharing a token, the char embedding's rows by char id) is
//! summed in a fixed order, where autodiff's scatter-adds add atomically on CUDA.

use std::ops::Range;

use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::activation::relu;
use burn::tensor::{Device, IndexingUpdateOp, Tensor};
use elmo_kernels::{
    HostWindowGradients, KernelSettings, host_window_max_backward, product, sum_columns,
    sum_row_groups, to_half, transposed_product, window_slot_gradients,
};
use elmo_model::bilm::ConvolvedTokens;
use elmo_model::char_cnn::{DenseRecord, PADDING_CHAR_ID};
use elmo_model::convolution_record::{ConvolvedChunk, PaddingWindow, RecordedWindows};
use elmo_model::highway::HighwayRecord;
use elmo_model::options::CnnActivation;
use elmo_model::{BiLm, CharCnnEncoder, DistinctTokens};

use crate::language_model::register_if_trained;

/// A token encoder's pass over a batch with its dense layers recorded
/// ([`Self::forward`]), consumed by [`Self::backward`].
pub(crate) struct EncoderPass {
    /// The distinct tokens' convolutions (tracked by autodiff where the encoder trains).
    convolved: ConvolvedTokens,
    /// The dense layers' pass over them, outside autodiff.
    record: DenseRecord,
}

impl EncoderPass {
    /// Encodes a batch's distinct tokens with `bilm`'s token encoder, the dense layers outside
    /// autodiff.
    ///
    /// # Shapes
    /// - the token embeddings ([`Self::embedded`]): `[B, T, P]`, without autodiff
    pub(crate) fn forward(bilm: &BiLm, tokens: &DistinctTokens, device: &Device) -> Self {
        let convolved = bilm.convolve_tokens(tokens, device);
        let plain = bilm.token_encoder.valid();
        let record = plain.dense_recorded(convolved.convolutions.clone().inner());
        Self { convolved, record }
    }

    /// Whether [`Self::backward`] has a gradient to compute: `encoder` has a parameter that
    /// trains.
    pub(crate) fn trains(&self, encoder: &CharCnnEncoder) -> bool {
        !self.convolved.chunks.is_empty() || dense_trains(encoder)
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
        if !self.trains(encoder) {
            return;
        }
        let Self { convolved, record } = self;
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
        convolutions_backward(encoder, convolved.chunks, grad, kernels, grads);
    }
}

/// Backpropagates `grad` (the gradient of the distinct tokens' convolutions, `[U, n_filters]`)
/// through the recorded `chunks` into the gradients of the convolutions' weights and biases and
/// of the char embedding, where they train, added to `grads`. A filter's max passes its
/// gradient to the window it came from (or the all-padding window); each window's gradient goes
/// to the token slots it read ([`window_slot_gradients`]), summed over a piece's convolutions,
/// and the slots' gradients to their chars' rows, summed by char id in a fixed order.
fn convolutions_backward(
    encoder: &CharCnnEncoder,
    chunks: Vec<ConvolvedChunk>,
    grad: Tensor<2>,
    kernels: KernelSettings,
    grads: &mut GradientsParams,
) {
    let n_convolutions = encoder.convolutions.len();
    let mut weights: Vec<Option<Tensor<2>>> = vec![None; n_convolutions];
    let mut biases: Vec<Option<Tensor<1>>> = vec![None; n_convolutions];
    let table_trains = encoder.char_embedding.val().is_require_grad();
    let (mut rows, mut group_of) = (Vec::new(), Vec::new());
    let [_, n_filters] = grad.dims();
    let mode = kernels.product_mode(&grad);
    let split = kernels.split_for(&grad);
    let d_char = encoder.char_embedding.dims()[1];
    for mut chunk in chunks {
        let mut chunk_grad = grad.clone().narrow(0, chunk.start, chunk.n_kept);
        if chunk.n_rows > chunk.n_kept {
            // The rows that completed the chunk were dropped: no gradient.
            let dropped = Tensor::zeros([chunk.n_rows - chunk.n_kept, n_filters], &grad.device());
            chunk_grad = Tensor::cat(vec![chunk_grad, dropped], 0);
        }
        // The slots any window of the chunk read: each piece's slots' gradient is
        // `[tokens, n_slots, E]`, summed over the piece's convolutions.
        let n_slots = (chunk.convolutions.iter())
            .map(|record| {
                let width = encoder.convolutions[record.convolution].width;
                chunk.slots_read(record, width)
            })
            .max()
            .unwrap_or(0);
        let mut piece_slots: Vec<(Range<usize>, Tensor<3>)> = Vec::new();
        for record in std::mem::take(&mut chunk.convolutions) {
            let conv = &encoder.convolutions[record.convolution];
            let grad_out = chunk_grad
                .clone()
                .slice([record.rows.clone(), record.columns.clone()]);
            let grad_pooled = match encoder.activation {
                CnnActivation::Relu => grad_out.mask_fill(record.output.lower_equal_elem(0.0), 0.0),
                CnnActivation::Tanh => grad_out * (record.output.powi_scalar(2).neg() + 1.0),
            };
            add_to(
                &mut biases[record.convolution],
                sum_columns(grad_pooled.clone(), kernels),
            );
            // The max's gradient: to the all-padding window where it won, else to the window
            // of the max (one value a window and filter: no index is added to twice).
            let (grad_pooled, padding) = match record.padding {
                Some(PaddingWindow { window, wins }) => {
                    let to_padding = grad_pooled.clone().mask_fill(wins.clone().bool_not(), 0.0);
                    let grad_value = sum_columns(to_padding, kernels).unsqueeze_dim::<2>(0);
                    (grad_pooled.mask_fill(wins, 0.0), Some((window, grad_value)))
                }
                None => (grad_pooled, None),
            };
            let trains_weight = conv.weight.val().is_require_grad();
            let weight = conv.weight.val().inner();
            let (grad_weight, grad_slots) = match record.windows {
                // On flex: one window a token and filter (the max's), read from the chars; the
                // slots' gradient comes back as `[tokens, all slots, E]`.
                RecordedWindows::Chars { chars, positions } => {
                    let HostWindowGradients { weight, chars } = host_window_max_backward(
                        &chars,
                        &weight,
                        &positions,
                        &grad_pooled,
                        conv.width,
                        (trains_weight, table_trains),
                        kernels.host_instructions,
                    )
                    .expect("flex tensors (RecordedWindows::Chars)");
                    (weight, chars)
                }
                RecordedWindows::Flat { windows, argmax } => {
                    // In the products' type (16 bits with mixed precision), which both its
                    // products read; assigned, not added: each value has one index (no atomics
                    // on a GPU).
                    let grad_pooled = to_half(grad_pooled, mode.half);
                    let [n_tokens, _, filters] = argmax.dims();
                    let n_positions = windows.dims()[0] / n_tokens;
                    let shape = [n_tokens, n_positions, filters];
                    let grad_convolved =
                        Tensor::zeros(shape, (&grad.device(), grad_pooled.dtype()))
                            .scatter(
                                1,
                                argmax,
                                grad_pooled.reshape([n_tokens, 1, filters]),
                                IndexingUpdateOp::Assign,
                            )
                            .reshape([n_tokens * n_positions, filters]);
                    let grad_weight = trains_weight
                        .then(|| transposed_product(windows, grad_convolved.clone(), split, mode));
                    let grad_slots = table_trains.then(|| {
                        let grad_windows =
                            product(grad_convolved, weight.clone().transpose(), kernels);
                        window_slot_gradients(grad_windows, n_tokens, conv.width, n_slots, kernels)
                    });
                    (grad_weight, grad_slots)
                }
            };
            if let Some(mut grad_weight) = grad_weight {
                if let Some((window, grad_value)) = &padding {
                    grad_weight =
                        grad_weight + window.clone().transpose().matmul(grad_value.clone());
                }
                add_to(&mut weights[record.convolution], grad_weight);
            }
            if let Some(slots) = grad_slots {
                match piece_slots
                    .iter_mut()
                    .find(|(piece, _)| *piece == record.rows)
                {
                    Some((_, sum)) => *sum = sum.clone() + slots,
                    None => piece_slots.push((record.rows.clone(), slots)),
                }
            }
            if let (true, Some((window, grad_value))) = (table_trains, padding) {
                let width = window.dims()[1] / d_char;
                rows.push(
                    grad_value
                        .matmul(weight.transpose())
                        .reshape([width, d_char]),
                );
                group_of.extend(std::iter::repeat_n(usize::from(PADDING_CHAR_ID), width));
            }
        }
        for (piece, slots) in piece_slots {
            let [n_tokens, n_slots, _] = slots.dims();
            rows.push(slots.reshape([n_tokens * n_slots, d_char]));
            group_of.extend(chunk.slot_char_ids(piece, n_slots));
        }
    }
    for (conv, (weight, bias)) in encoder
        .convolutions
        .iter()
        .zip(weights.into_iter().zip(biases))
    {
        if let Some(weight) = weight {
            register_if_trained(grads, &conv.weight, weight);
        }
        if let Some(bias) = bias {
            register_if_trained(grads, &conv.bias, bias);
        }
    }
    if !rows.is_empty() {
        let n_characters = encoder.char_embedding.dims()[0];
        let table = sum_row_groups(Tensor::cat(rows, 0), &group_of, n_characters, kernels);
        register_if_trained(grads, &encoder.char_embedding, table);
    }
}

/// `sum` plus `value` (`value` where there is no sum yet).
fn add_to<const D: usize>(sum: &mut Option<Tensor<D>>, value: Tensor<D>) {
    *sum = Some(match sum.take() {
        Some(sum) => sum + value,
        None => value,
    });
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
