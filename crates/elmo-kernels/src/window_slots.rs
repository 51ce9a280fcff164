//! The gradient of tokens' char slots from the gradient of the convolution windows that read
//! them: the adjoint of cutting each token's slots into windows (`col2im`), for the char CNN of
//! Peters et al. 2018 §3.4 (Kim et al. 2016) differentiated by hand. The training step then sums
//! the char embedding's gradient by char id over the slots a token's windows read, not over the
//! slots of every window of every convolution (at `original`'s widths 1-7 and 7 positions,
//! 13 slots against 196 a token).

use burn::tensor::Tensor;

use crate::KernelSettings;

/// Each char slot's gradient from `grad_windows`, the gradient of the `n_positions` windows of
/// `width` slots of each of `n_tokens` tokens (window `p` reads slots `p..p + width`): slot `s`
/// gets the sum, in ascending `k`, of slot `k` of window `s − k` over the windows that read it,
/// and slots that no window reads get 0. One unit per output value where `kernels` runs the
/// fused kernels; burn's operations elsewhere (the same sums, in the same order).
///
/// # Shapes
/// - grad_windows: `[n_tokens · n_positions, width · E]`; output: `[n_tokens, n_slots, E]`
///
/// # Panics
/// If `grad_windows` has not `n_tokens` whole tokens of windows of `width` slots, or the windows
/// pass `n_slots` (`n_positions + width − 1 > n_slots`).
pub fn window_slot_gradients(
    grad_windows: Tensor<2>,
    n_tokens: usize,
    width: usize,
    n_slots: usize,
    kernels: KernelSettings,
) -> Tensor<3> {
    let [n_windows, flat_width] = grad_windows.dims();
    assert!(
        n_tokens > 0 && width > 0 && n_windows % n_tokens == 0 && flat_width % width == 0,
        "{n_windows} windows of {flat_width} values: not {n_tokens} tokens' windows of width {width}"
    );
    let n_positions = n_windows / n_tokens;
    let d = flat_width / width;
    assert!(
        n_positions + width <= n_slots + 1,
        "{n_positions} windows of width {width} pass {n_slots} slots"
    );
    #[cfg(feature = "cubecl")]
    if kernels.fused_for(&grad_windows) && d > 0 && n_positions > 0 {
        use crate::cube_tensor::{ElementwiseOutput, kernel_rows_input};
        let device = grad_windows.device();
        let out = ElementwiseOutput::of([n_tokens, n_slots, d], &device, grad_windows.dtype());
        kernels::window_slot_sums_kernel::launch(
            &out.client,
            out.count.clone(),
            out.dim,
            kernel_rows_input(&grad_windows).into_tensor_arg(),
            out.primitive.into_tensor_arg(),
            out.dtype,
        );
        return out.tensor;
    }
    #[cfg(not(feature = "cubecl"))]
    let _ = kernels;
    let device = grad_windows.device();
    let windows = grad_windows.reshape([n_tokens, n_positions, width, d]);
    let mut slots = Tensor::<3>::zeros([n_tokens, n_slots, d], (&device, windows.dtype()));
    for k in 0..width {
        let part = windows
            .clone()
            .narrow(2, k, 1)
            .reshape([n_tokens, n_positions, d]);
        let range = [0..n_tokens, k..k + n_positions, 0..d];
        let sum = slots.clone().slice(range.clone()) + part;
        slots = slots.slice_assign(range, sum);
    }
    slots
}

/// The kernel (CubeCL's `Tensor` is not burn's, hence a module of its own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    /// `out[t, s, e] = Σ_k windows[t · P + s − k, k · E + e]` over `k` in `0..width` (ascending)
    /// with `0 ≤ s − k < P`: one unit per output value. `windows` is read at its row stride
    /// (rows may be padded).
    #[cube(launch)]
    pub(super) fn window_slot_sums_kernel<F: Float>(
        windows: &Tensor<F>,
        out: &mut Tensor<F>,
        #[define(F)] _dtype: ElemType,
    ) {
        let position = ABSOLUTE_POS;
        if position >= out.len() {
            terminate!();
        }
        let d = out.shape(2);
        let n_slots = out.shape(1);
        let column = position % d;
        let slot = (position / d) % n_slots;
        let token = position / (d * n_slots);
        let n_positions = windows.shape(0) / out.shape(0);
        let width = windows.shape(1) / d;
        let row_stride = windows.stride(0);
        let mut total = F::new(0.0);
        for k in 0..width {
            if k <= slot {
                let window = slot - k;
                if window < n_positions {
                    total += windows[(token * n_positions + window) * row_stride + k * d + column];
                }
            }
        }
        out[position] = total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData, Tolerance};

    use elmo_test_support::flex_and_wgpu;

    /// The sums by hand: every window slot added to the token slot it read.
    fn reference(
        values: &[f32],
        n_tokens: usize,
        width: usize,
        d: usize,
        n_slots: usize,
    ) -> Vec<f32> {
        let n_positions = values.len() / (n_tokens * width * d);
        let mut out = vec![0.0f32; n_tokens * n_slots * d];
        for t in 0..n_tokens {
            for p in 0..n_positions {
                for k in 0..width {
                    for e in 0..d {
                        let v = values[((t * n_positions + p) * width + k) * d + e];
                        out[(t * n_slots + p + k) * d + e] += v;
                    }
                }
            }
        }
        out
    }

    /// 3 tokens, windows of width 3 at 4 positions over 7 slots (the last slot read by none),
    /// 2 values a slot: fused kernels and burn's operations against the sums by hand.
    #[test]
    fn each_slot_gets_the_windows_that_read_it() {
        let (n_tokens, width, d, n_positions, n_slots) = (3, 3, 2, 4, 7);
        let values: Vec<f32> = (0..n_tokens * n_positions * width * d)
            .map(|v| (v as f32 * 0.61).sin())
            .collect();
        let expected = TensorData::new(
            reference(&values, n_tokens, width, d, n_slots),
            [n_tokens, n_slots, d],
        );
        let check = |device: &Device, kernels: KernelSettings| {
            let grad = Tensor::<2>::from_data(
                TensorData::new(values.clone(), [n_tokens * n_positions, width * d]),
                device,
            );
            let slots = window_slot_gradients(grad, n_tokens, width, n_slots, kernels);
            slots
                .into_data()
                .assert_approx_eq::<f32>(&expected, Tolerance::absolute(1e-6));
        };
        for device in flex_and_wgpu("each_slot_gets_the_windows_that_read_it") {
            check(&device, KernelSettings::COMPOSED);
            check(&device, KernelSettings::ALL);
        }
    }

    #[test]
    #[should_panic(expected = "pass 5 slots")]
    fn windows_past_the_slots_are_refused() {
        let grad = Tensor::<2>::zeros([2 * 4, 3], &Device::flex());
        let _ = window_slot_gradients(grad, 2, 3, 5, KernelSettings::COMPOSED);
    }
}
