//! A training step's gradient scale decided on the device: the factor that
//! `tf.clip_by_global_norm` (bilm-tf's `clip_by_global_norm_summary`) and mixed precision's
//! unscaling multiply the gradients by, and whether the update runs at all (a finite loss, and
//! with a loss scale gradients that did not overflow), from the gradient norm's partial sums
//! ([`crate::SquaredNorm::Partials`]) and the loss, in one CubeCL kernel.
//!
//! Why: decided on the host, the update waits for the step's read of its loss and norm, and the
//! GPU has no work from that read until the host has queued the update's kernels. Decided here,
//! [`crate::fused_adagrad_step`] reads the scale and the update is queued before the read.

use burn::tensor::Tensor;

/// How a step's gradients are scaled before its update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradientScaling {
    /// The global norm the gradients are clipped to (unchanged when below it).
    pub max_norm: Option<f64>,
    /// The loss scale the gradients are divided by (1 in `f32` training).
    pub loss_scale: f64,
    /// Whether gradients whose norm is not finite skip the update (mixed precision's overflow);
    /// otherwise they are applied unscaled, as the host's clipping leaves them.
    pub skip_overflow: bool,
}

/// The kernel (CubeCL's `Tensor` is not burn's, hence a module of its own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    use crate::shared_tree::{shared_max, shared_sum};

    /// One cube. Its units find the partial sums' largest value and count the non-finite ones,
    /// then add the sums divided by the largest (no `f32` overflow of a sum of finite values);
    /// unit 0 writes `[factor, apply]` (apply 1 or 0).
    #[cube(launch)]
    #[allow(
        clippy::if_same_then_else,
        clippy::collapsible_if,
        reason = "conditions one at a time, as the kernel's expansion takes them"
    )]
    pub(super) fn gradient_scale_kernel(
        partials: &Tensor<f32>,
        loss: &Tensor<f32>,
        scale: &mut Tensor<f32>,
        max_norm: f32,
        loss_scale: f32,
        #[comptime] has_max_norm: bool,
        #[comptime] skip_overflow: bool,
        #[comptime] units: usize,
    ) {
        let mut largest = Shared::<[f32]>::new_slice(units);
        let mut bad = Shared::<[f32]>::new_slice(units);
        let mut local_largest = 0.0f32;
        let mut local_bad = 0.0f32;
        let mut position = UNIT_POS as usize;
        while position < partials.len() {
            let value = partials[position];
            if value.is_nan() {
                local_bad += 1.0f32;
            } else if value.is_inf() {
                local_bad += 1.0f32;
            } else if value > local_largest {
                local_largest = value;
            }
            position += units;
        }
        largest[UNIT_POS as usize] = local_largest;
        bad[UNIT_POS as usize] = local_bad;
        let top = shared_max(&mut largest);
        let n_bad = shared_sum(&mut bad);
        sync_cube();
        // The sums over the largest, in the same shared memory.
        let mut local_sum = 0.0f32;
        if top > 0.0f32 {
            let mut index = UNIT_POS as usize;
            while index < partials.len() {
                local_sum += partials[index] / top;
                index += units;
            }
        }
        largest[UNIT_POS as usize] = local_sum;
        let relative_sum = shared_sum(&mut largest);
        if UNIT_POS == 0 {
            let unscale = loss_scale;
            let norm = top.sqrt() * relative_sum.sqrt() / unscale;
            let mut finite = n_bad == 0.0f32;
            if norm.is_inf() {
                finite = false;
            }
            let mut factor = 1.0f32;
            if finite {
                let mut clip = 1.0f32;
                if has_max_norm {
                    let max = max_norm;
                    if norm > max {
                        clip = max / norm;
                    }
                }
                factor = clip / unscale;
            }
            let value = loss[0];
            let mut apply = 1.0f32;
            if value.is_nan() {
                apply = 0.0f32;
            }
            if value.is_inf() {
                apply = 0.0f32;
            }
            if skip_overflow {
                if !finite {
                    apply = 0.0f32;
                }
            }
            scale[0] = factor;
            scale[1] = apply;
        }
    }
}

/// Units of the kernel's one cube (a power of two, as its trees need).
#[cfg(feature = "cubecl")]
const UNITS: usize = 256;

/// `[factor, apply]` on the device for gradients whose squared norm's partial sums are
/// `partials` (of the loss-scaled gradients) and whose step's joint loss is `loss`: the factor
/// is `clip / loss_scale` where the norm `√Σ partials / loss_scale` is finite (`clip` =
/// `max_norm / norm` above `max_norm`, 1 otherwise), and 1 where it is not; apply is 1 when
/// the loss is finite and, with `skip_overflow`, the norm is too, 0 otherwise. `None` off a
/// CubeCL device (where the norm is summed on the host and the host decides).
///
/// # Shapes
/// - partials: `[n]`; loss: `[1]`; output: `[2]`
#[cfg_attr(not(feature = "cubecl"), allow(unused_variables))]
pub fn device_gradient_scale(
    partials: &Tensor<1>,
    loss: &Tensor<1>,
    scaling: GradientScaling,
) -> Option<Tensor<1>> {
    #[cfg(not(feature = "cubecl"))]
    return None;
    #[cfg(feature = "cubecl")]
    {
        use crate::cube_tensor::{ElementwiseOutput, cube_primitive, kernel_input};
        use burn::cubecl::prelude::{CubeCount, CubeDim};
        use burn::tensor::DType;

        cube_primitive(partials)?;
        cube_primitive(loss)?;
        let in_f32 = |tensor: &Tensor<1>| match tensor.dtype() {
            DType::F32 => tensor.clone(),
            _ => tensor.clone().cast(DType::F32),
        };
        let (partials, loss) = (in_f32(partials), in_f32(loss));
        let output = ElementwiseOutput::new([2], &partials.device());
        kernels::gradient_scale_kernel::launch(
            &output.client,
            CubeCount::new_1d(1),
            CubeDim::new_1d(UNITS as u32),
            kernel_input(&partials).into_tensor_arg(),
            kernel_input(&loss).into_tensor_arg(),
            output.primitive.into_tensor_arg(),
            scaling.max_norm.unwrap_or(0.0) as f32,
            scaling.loss_scale as f32,
            scaling.max_norm.is_some(),
            scaling.skip_overflow,
            UNITS,
        );
        Some(output.tensor)
    }
}

#[cfg(all(test, feature = "cubecl"))]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    /// The host's decision ([`crate::SquaredNorm::total`] in `f64`, then elmo-train's
    /// clipping and skip) for the same values.
    fn host_scale(partials: &[f32], loss: f32, scaling: GradientScaling) -> [f32; 2] {
        let norm = crate::SquaredNorm::total(partials).sqrt() / scaling.loss_scale;
        let factor = match norm.is_finite() {
            true => match scaling.max_norm {
                Some(max) if norm > max => max / norm / scaling.loss_scale,
                _ => 1.0 / scaling.loss_scale,
            },
            false => 1.0,
        };
        let apply = loss.is_finite() && (norm.is_finite() || !scaling.skip_overflow);
        [factor as f32, f32::from(u8::from(apply))]
    }

    /// Clipped, below the clip, without one, loss-scaled, a non-finite loss, overflowing
    /// partial sums with and without the skip, partial sums whose `f32` sum overflows while
    /// each is finite, and more partial sums than the cube's units: the host's decision.
    #[test]
    fn the_device_scale_is_the_host_decision_on_wgpu() {
        let Some(device) =
            elmo_test_support::wgpu_device_or_skip("the_device_scale_is_the_host_decision_on_wgpu")
        else {
            return;
        };
        let many: Vec<f32> = (0..1000).map(|i| (i % 17) as f32 * 0.5).collect();
        let clip = |max_norm| GradientScaling {
            max_norm,
            loss_scale: 1.0,
            skip_overflow: false,
        };
        let mixed = GradientScaling {
            max_norm: Some(10.0),
            loss_scale: 1024.0,
            skip_overflow: true,
        };
        let huge = vec![3.0e38f32; 4];
        let cases: Vec<(Vec<f32>, f32, GradientScaling)> = vec![
            (vec![400.0, 500.0], 2.0, clip(Some(10.0))),
            (vec![4.0, 5.0], 2.0, clip(Some(10.0))),
            (vec![400.0, 500.0], 2.0, clip(None)),
            (vec![0.0, 0.0], 2.0, clip(Some(10.0))),
            (vec![4.0e8, 5.0e8], 2.0, mixed),
            (vec![4.0, 5.0], f32::NAN, clip(Some(10.0))),
            (vec![4.0, 5.0], f32::INFINITY, mixed),
            (vec![4.0, f32::INFINITY], 2.0, mixed),
            (vec![f32::NAN, 5.0], 2.0, mixed),
            (vec![4.0, f32::INFINITY], 2.0, clip(Some(10.0))),
            (huge.clone(), 2.0, clip(Some(10.0))),
            (huge, 2.0, mixed),
            (many.clone(), 2.0, clip(Some(10.0))),
            (many, 2.0, clip(Some(100.0))),
        ];
        for (partials, loss, scaling) in cases {
            let expected = host_scale(&partials, loss, scaling);
            let n = partials.len();
            let partials_tensor =
                Tensor::<1>::from_data(TensorData::new(partials.clone(), [n]), &device);
            let loss_tensor = Tensor::<1>::from_data(TensorData::new(vec![loss], [1]), &device);
            let got = device_gradient_scale(&partials_tensor, &loss_tensor, scaling)
                .expect("the kernel runs on wgpu")
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            let close = (got[0] - expected[0]).abs() <= 1e-6 * expected[0].abs();
            assert!(
                close && got[1] == expected[1],
                "{partials:?} loss {loss} {scaling:?}: {got:?} vs {expected:?}"
            );
        }
    }
}
