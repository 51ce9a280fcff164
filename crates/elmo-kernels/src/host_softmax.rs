//! The loss and the logits' gradient of a chunk of softmax rows on the host, for burn's flex CPU
//! backend: elmo-train's `Softmax::nll_with_gradients` (the full softmax, and the sampled one of
//! `tf.nn.sampled_softmax_loss` with its true logit beside the candidates) as one pass over each
//! row of logits, rows shared among rayon's threads, the gradient written over the logits.
//!
//! Why: with burn's operations a chunk is six passes over its `[rows, candidates]` logits (the
//! bias, the maximum, the shift, flex's scalar `exp`, the sum, the scaling), each into a fresh
//! buffer.

use burn::tensor::Tensor;
use rayon::prelude::*;

use crate::host_lstm::exp;
use crate::host_tensor::HostTensor;

/// `[R, N]` of a chunk's logits, checked against its `[1, N]` bias and its `[R, 1]` true
/// logits, masks and scales (in that order).
///
/// # Panics
/// When the shapes disagree.
pub(crate) fn softmax_shapes(logits: &Tensor<2>, others: [&Tensor<2>; 4]) -> [usize; 2] {
    let [rows, n] = logits.dims();
    let [bias, rest @ ..] = others;
    assert!(
        bias.dims() == [1, n] && rest.iter().all(|t| t.dims() == [rows, 1]),
        "a [1, {n}] bias and [{rows}, 1] true logits, masks and scales"
    );
    [rows, n]
}

/// A chunk's loss and gradients ([`host_softmax_rows`]).
#[derive(Debug, Clone)]
pub struct SoftmaxRows {
    /// `[R, N]`: `scale · softmax` of each row's logits (over the candidates and, where it is
    /// outside them, the true logit): the gradient of `Σ scale · nll` with respect to them.
    pub gradient: Tensor<2>,
    /// `[R]`: each row's negative log-likelihood of its true logit.
    pub nll: Tensor<1>,
    /// `[R, 1]`: the gradient with respect to the true logit, `scale · (p_true − 1)`.
    pub true_gradient: Tensor<2>,
}

/// Rows' losses and gradients from their candidates' logits without the bias, the bias, each
/// row's true logit, whether the true class is outside the candidates (1) or among them (0:
/// its logit is one of them), and each row's weight in the summed loss; `None` where a tensor
/// is not an `f32` flex tensor outside autodiff (the caller runs burn's operations). The
/// logits' buffer becomes the gradient's where the caller held its only reference.
///
/// # Shapes
/// - logits: `[R, N]`; bias: `[1, N]`
/// - true_logits, outside, scales: `[R, 1]`
///
/// # Panics
/// When the shapes disagree.
pub fn host_softmax_rows(
    logits: Tensor<2>,
    bias: &Tensor<2>,
    true_logits: &Tensor<2>,
    outside: &Tensor<2>,
    scales: &Tensor<2>,
) -> Option<SoftmaxRows> {
    let [rows, n] = softmax_shapes(&logits, [bias, true_logits, outside, scales]);
    let read = |t: &Tensor<2>| HostTensor::of(t).map(HostTensor::contiguous);
    let (bias, true_logits, outside, scales) = (
        read(bias)?,
        read(true_logits)?,
        read(outside)?,
        read(scales)?,
    );
    let mut logits = HostTensor::take(logits)?.contiguous();
    let mut nll = HostTensor::zeros([rows]);
    let mut true_gradient = HostTensor::zeros([rows, 1]);
    if n > 0 {
        let bias = bias.values();
        let (y, outside, scales) = (true_logits.values(), outside.values(), scales.values());
        (logits.values_mut().par_chunks_mut(n))
            .zip(nll.values_mut().par_iter_mut())
            .zip(true_gradient.values_mut().par_iter_mut())
            .enumerate()
            .for_each(|(row, ((logits, nll), dy))| {
                let (y, scale) = (y[row], scales[row]);
                // Each row's maximum over 16 lanes (a NaN logit turns the sum NaN below).
                let mut maxima = [f32::NEG_INFINITY; 16];
                for (chunk, bias) in logits.chunks_mut(16).zip(bias.chunks(16)) {
                    for ((z, &b), max) in chunk.iter_mut().zip(bias).zip(&mut maxima) {
                        *z += b;
                        *max = max.max(*z);
                    }
                }
                let max = maxima.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                // burn's `max_pair`: a NaN true logit stays NaN in the loss.
                let max = if y > max || y.is_nan() { y } else { max };
                let mut lanes = [0.0f32; 16];
                for chunk in logits.chunks_mut(16) {
                    for (z, lane) in chunk.iter_mut().zip(&mut lanes) {
                        *z = exp(*z - max);
                        *lane += *z;
                    }
                }
                let sum: f32 = lanes.iter().sum();
                let true_exp = exp(y - max) * outside[row];
                let sum = sum + true_exp;
                *nll = sum.ln() + max - y;
                let per_sum = scale / sum;
                *dy = true_exp * per_sum - scale;
                logits.iter_mut().for_each(|z| *z *= per_sum);
            });
    }
    Some(SoftmaxRows {
        gradient: logits.into_tensor(),
        nll: nll.into_tensor(),
        true_gradient: true_gradient.into_tensor(),
    })
}
