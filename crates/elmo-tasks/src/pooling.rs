//! Pieces shared by the classification heads: masked max + mean pooling over time and the
//! cross-entropy of logits against label ids.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};
use elmo_model::bilm::mask_from_lengths;

/// `[max over real positions; mean over real positions]`.
///
/// # Shapes
/// - states: `[B, T, D]`; `lengths`: `B` values in `1..=T`
/// - output: `[B, 2D]`
pub fn max_mean_pool(states: Tensor<3>, lengths: &[usize]) -> Tensor<2> {
    let device = states.device();
    let [batch, n_steps, d] = states.dims();
    let mask = mask_from_lengths(lengths, n_steps, &device).unsqueeze_dim::<3>(2);
    let padded = mask.clone().bool_not().expand([batch, n_steps, d]);
    let max = states
        .clone()
        .mask_fill(padded, -1e9)
        .max_dim(1)
        .reshape([batch, d]);
    let counts: Vec<f32> = lengths.iter().map(|&l| l.max(1) as f32).collect();
    let counts = Tensor::<2>::from_data(TensorData::new(counts, [batch, 1]), &device);
    let mean = (states * mask.float()).sum_dim(1).reshape([batch, d]) / counts;
    Tensor::cat(vec![max, mean], 1)
}

/// Mean cross-entropy of `logits` `[B, C]` against `labels` (`B` ids).
pub fn cross_entropy(logits: Tensor<2>, labels: &[usize]) -> Tensor<1> {
    let device = logits.device();
    let batch = labels.len();
    let ids: Vec<i64> = labels.iter().map(|&l| l as i64).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, 1]), &device);
    log_softmax(logits, 1)
        .gather(1, ids)
        .sum()
        .neg()
        .div_scalar(batch.max(1) as f64)
}

/// The arg-max class of every row of `[B, C]` logits.
pub fn argmax_rows(logits: Tensor<2>) -> Vec<usize> {
    logits
        .argmax(1)
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap_or_default()
        .into_iter()
        .map(|i| i as usize)
        .collect()
}
