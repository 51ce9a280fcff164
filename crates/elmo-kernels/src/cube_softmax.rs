//! A chunk of the training softmax's rows on a CubeCL device in one kernel: each row's loss and
//! the gradients of bilm-tf's (sampled) softmax cross-entropy, as [`crate::host_softmax_rows`]
//! computes them on flex (`tf.nn.sampled_softmax_loss` with `remove_accidental_hits`; the full
//! softmax is the case of every word a candidate).
//!
//! Why: with burn's operations a chunk is the bias's add, the row maximum, `− max`, `exp`, the
//! row sum and `× scale / sum`, four elementwise passes and two reductions over the `[R, N]`
//! logits (`[5,120, 8,192]` at `original` 128 × 20, 42M values each): six reads and four writes
//! of them. Here one cube a row reads its logits three times (a row is 32 KiB at `original`) and
//! writes the gradient once.

use burn::tensor::{DType, Tensor};

use crate::SoftmaxRows;

/// The kernel (CubeCL's `Tensor` is not burn's, hence a module of its own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    use crate::shared_tree::{shared_max, shared_sum};

    /// One cube per row. Its units find the row's maximum of `logits + bias` (and of its true
    /// logit: burn's `max_pair`, a NaN true logit kept), add up `exp(z − max)`, then write the
    /// gradient `exp(z − max) · scale / sum`; unit 0 writes the
    /// row's loss `ln(sum) + max − y` and the true logit's gradient `scale · (p_true − 1)`.
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn softmax_rows_kernel(
        logits: &Tensor<f32>,
        bias: &Tensor<f32>,
        true_logits: &Tensor<f32>,
        outside: &Tensor<f32>,
        scales: &Tensor<f32>,
        gradient: &mut Tensor<f32>,
        nll: &mut Tensor<f32>,
        true_gradient: &mut Tensor<f32>,
        #[comptime] units: usize,
    ) {
        let row = CUBE_POS;
        let n = logits.shape(1);
        let from = row * logits.stride(0);
        let to = row * gradient.stride(0);
        let mut shared = Shared::<[f32]>::new_slice(units);
        let mut local_max = f32::min_value();
        let mut j = UNIT_POS as usize;
        while j < n {
            let z = logits[from + j] + bias[j];
            if z > local_max {
                local_max = z;
            }
            j += units;
        }
        shared[UNIT_POS as usize] = local_max;
        let y = true_logits[row];
        let mut max = shared_max(&mut shared);
        if y > max {
            max = y;
        }
        if y.is_nan() {
            max = y;
        }
        sync_cube();
        let mut local_sum = 0.0f32;
        let mut k = UNIT_POS as usize;
        while k < n {
            local_sum += (logits[from + k] + bias[k] - max).exp();
            k += units;
        }
        shared[UNIT_POS as usize] = local_sum;
        let true_exp = (y - max).exp() * outside[row];
        let sum = shared_sum(&mut shared) + true_exp;
        let scale = scales[row];
        let per_sum = scale / sum;
        // `exp` again rather than a written value read back: the gradient is written once.
        let mut m = UNIT_POS as usize;
        while m < n {
            gradient[to + m] = (logits[from + m] + bias[m] - max).exp() * per_sum;
            m += units;
        }
        if UNIT_POS == 0 {
            nll[row] = sum.ln() + max - y;
            true_gradient[row] = true_exp * per_sum - scale;
        }
    }
}

/// Units of a row's cube (a power of two, as its trees need).
#[cfg(feature = "cubecl")]
const UNITS: usize = 256;

/// [`crate::host_softmax_rows`] on a CubeCL device: the rows' losses and gradients from their
/// candidates' logits without the bias, the bias, each row's true logit, whether the true class
/// is outside the candidates (1) or among them (0), and each row's weight in the summed loss,
/// in one kernel; `None` off a CubeCL device, under autodiff, or for tensors not in `f32` (the
/// caller runs burn's operations). The gradient is a fresh `[R, N]` tensor.
///
/// # Shapes
/// - logits: `[R, N]`; bias: `[1, N]`
/// - true_logits, outside, scales: `[R, 1]`
///
/// # Panics
/// When the shapes disagree.
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn cube_softmax_rows(
    logits: &Tensor<2>,
    bias: &Tensor<2>,
    true_logits: &Tensor<2>,
    outside: &Tensor<2>,
    scales: &Tensor<2>,
) -> Option<SoftmaxRows> {
    let [rows, n] =
        crate::host_softmax::softmax_shapes(logits, [bias, true_logits, outside, scales]);
    let all = [logits, bias, true_logits, outside, scales];
    if all.iter().any(|t| t.dtype() != DType::F32) {
        return None;
    }
    #[cfg(not(feature = "cubecl"))]
    return None;
    #[cfg(feature = "cubecl")]
    {
        use crate::cube_tensor::{
            ElementwiseOutput, cube_primitive, kernel_input, kernel_rows_input,
        };
        use burn::cubecl::prelude::{CubeCount, CubeDim};

        if all.iter().any(|t| cube_primitive(*t).is_none()) || rows == 0 {
            return None;
        }
        let device = logits.device();
        let gradient = ElementwiseOutput::new([rows, n], &device);
        let nll = ElementwiseOutput::new([rows], &device);
        let true_gradient = ElementwiseOutput::new([rows, 1], &device);
        kernels::softmax_rows_kernel::launch(
            &gradient.client,
            CubeCount::new_1d(rows as u32),
            CubeDim::new_1d(UNITS as u32),
            kernel_rows_input(logits).into_tensor_arg(),
            kernel_input(bias).into_tensor_arg(),
            kernel_input(true_logits).into_tensor_arg(),
            kernel_input(outside).into_tensor_arg(),
            kernel_input(scales).into_tensor_arg(),
            gradient.primitive.into_tensor_arg(),
            nll.primitive.into_tensor_arg(),
            true_gradient.primitive.into_tensor_arg(),
            UNITS,
        );
        Some(SoftmaxRows {
            gradient: gradient.tensor,
            nll: nll.tensor,
            true_gradient: true_gradient.tensor,
        })
    }
}

#[cfg(all(test, feature = "cubecl"))]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, TensorData};

    /// burn's operations, as `softmax.rs` runs them off flex.
    fn composed(
        logits: Tensor<2>,
        bias: &Tensor<2>,
        y: &Tensor<2>,
        outside: &Tensor<2>,
        scale: &Tensor<2>,
    ) -> [Tensor<2>; 3] {
        let logits = logits + bias.clone();
        let max = logits.clone().max_dim(1).max_pair(y.clone());
        let exp = (logits - max.clone()).exp();
        let true_exp = (y.clone() - max.clone()).exp() * outside.clone();
        let sum = exp.clone().sum_dim(1) + true_exp.clone();
        let nll = sum.clone().log() + max - y.clone();
        let per_sum = scale.clone() / sum;
        [
            exp * per_sum.clone(),
            nll,
            true_exp * per_sum - scale.clone(),
        ]
    }

    /// The kernel against burn's operations on wgpu: rows longer and shorter than a cube's
    /// units, a true logit above every candidate's, one among the candidates (outside 0), and a
    /// NaN true logit, which stays NaN in its row's loss.
    #[test]
    fn the_softmax_rows_kernel_equals_burns_operations_on_wgpu() {
        let Some(device) = elmo_test_support::wgpu_device_or_skip(
            "the_softmax_rows_kernel_equals_burns_operations_on_wgpu",
        ) else {
            return;
        };
        for n in [3, 700] {
            let rows = 5;
            let logits = Tensor::<2>::random([rows, n], Distribution::Normal(0.0, 3.0), &device);
            let bias = Tensor::<2>::random([1, n], Distribution::Normal(0.0, 1.0), &device);
            let column = |values: Vec<f32>| {
                Tensor::<2>::from_data(TensorData::new(values, [rows, 1]), &device)
            };
            let y = column(vec![0.5, 40.0, -2.0, 1.0, f32::NAN]);
            let outside = column(vec![1.0, 1.0, 0.0, 1.0, 1.0]);
            let scale = column(vec![1.0, 0.5, 2.0, 0.25, 1.0]);
            let got = cube_softmax_rows(&logits, &bias, &y, &outside, &scale)
                .expect("the kernel runs on wgpu");
            let [gradient, nll, dy] = composed(logits, &bias, &y, &outside, &scale);
            let values = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().expect("f32");
            let nll_got = got.nll.into_data().try_to_vec::<f32>().expect("f32");
            let (nll, dy_want) = (values(nll), values(dy));
            assert!(nll[4].is_nan() && nll_got[4].is_nan(), "a NaN true logit");
            let close = |a: f32, b: f32| (a - b).abs() <= 1e-5 * a.abs().max(1.0);
            for r in 0..4 {
                assert!(
                    close(nll[r], nll_got[r]),
                    "row {r}: {} / {}",
                    nll[r],
                    nll_got[r]
                );
            }
            let dy_got = values(got.true_gradient);
            for r in 0..4 {
                assert!(
                    close(dy_want[r], dy_got[r]),
                    "row {r}: {dy_want:?} / {dy_got:?}"
                );
            }
            let (want, have) = (values(gradient), values(got.gradient));
            for (i, (a, b)) in want.iter().zip(&have).enumerate().take(4 * n) {
                assert!(close(*a, *b), "value {i} (n = {n}): {a} / {b}");
            }
        }
    }
}
