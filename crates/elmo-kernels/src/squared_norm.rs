//! The global gradient norm (`tf.clip_by_global_norm`'s `global_norm`) fused: on a GPU one CubeCL
//! kernel per parameter, each writing its blocks' sums of squares into one shared buffer that the
//! host adds up after a single read (which the caller may join with its other reads of the step:
//! [`SquaredNorm::Partials`]); on burn's flex CPU backend one pass over each gradient's values in
//! place, on rayon's threads.
//!
//! Why: with burn's operations a parameter's share is four kernels (square, a zero-filled output,
//! the sum, the running total's add), ~150 a training step for the biLM's ~37 parameter tensors,
//! each a launch whatever its size; on a CPU the square is a fresh copy of every gradient.
//! Elsewhere, or with the kernels off, elmo-train's `global_norm` keeps the composed operations.
//!
//! The sum is deterministic: every block adds its elements in a fixed order and a fixed tree, and
//! the host adds the blocks' sums in order, in `f64`.

use burn::tensor::Tensor;

use crate::KernelSettings;
use crate::host_tensor::HostTensor;

/// The kernel (CubeCL's `Tensor` is not burn's, hence a module of its own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    use crate::shared_tree::shared_sum;

    /// Each cube strides over `input` (unit `u` of the launch reads elements `u`, `u + n_units`,
    /// …), adds the squares in shared memory as a tree, and writes its sum to
    /// `partials[offset + cube]`.
    #[cube(launch)]
    pub(super) fn squared_sum_kernel<F: Float>(
        input: &Tensor<F>,
        partials: &mut Tensor<F>,
        offset: u32,
        #[comptime] units_per_cube: usize,
        #[define(F)] _dtype: ElemType,
    ) {
        let mut shared = Shared::<[F]>::new_slice(units_per_cube);
        let n_units = CUBE_COUNT * units_per_cube;
        let mut sum = F::new(0.0);
        let mut position = ABSOLUTE_POS;
        while position < input.len() {
            let value = input[position];
            sum += value * value;
            position += n_units;
        }
        shared[UNIT_POS as usize] = sum;
        let total = shared_sum(&mut shared);
        if UNIT_POS == 0 {
            partials[offset as usize + CUBE_POS] = total;
        }
    }
}

/// Units per cube (a power of two, as the tree needs).
#[cfg(feature = "cubecl")]
const UNITS_PER_CUBE: usize = 256;
/// Elements each unit adds at least before another cube is launched for a tensor.
#[cfg(feature = "cubecl")]
const ELEMENTS_PER_UNIT: usize = 64;
/// The most cubes one tensor gets (a 6.4M-element softmax gradient: 256 × 256 units, ~98 each).
#[cfg(feature = "cubecl")]
const MAX_CUBES: usize = 256;

/// How many cubes sum a tensor of `n` elements.
#[cfg(feature = "cubecl")]
fn cubes_for(n: usize) -> usize {
    n.div_ceil(UNITS_PER_CUBE * ELEMENTS_PER_UNIT)
        .clamp(1, MAX_CUBES)
}

/// `Σ_i ‖gradients_i‖²` as [`fused_squared_norm`] leaves it.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "one a training step, moved to its read"
)]
pub enum SquaredNorm {
    /// Added up already (the host pass).
    Summed(f64),
    /// The cubes' partial sums, still on the device: [`SquaredNorm::total`] of their values
    /// once read.
    Partials(Tensor<1>),
}

impl SquaredNorm {
    /// The sum of the partial sums `values` as read from [`SquaredNorm::Partials`], in their
    /// order, in `f64`.
    pub fn total(values: &[f32]) -> f64 {
        values.iter().map(|&s| f64::from(s)).sum()
    }

    /// The total, reading the partial sums where they are on the device (one read).
    ///
    /// # Panics
    /// When the device fails to return them.
    pub fn read(self) -> f64 {
        match self {
            Self::Summed(total) => total,
            Self::Partials(partials) => Self::total(
                &partials
                    .into_data()
                    .try_to_vec::<f32>()
                    .expect("the partial sums are f32, as the tensor was made"),
            ),
        }
    }
}

/// `Σ_i ‖gradients_i‖²` with one kernel per tensor on a GPU ([`KernelSettings::fused_for`]),
/// queued and not read ([`SquaredNorm::Partials`]), one pass over each tensor's values on flex
/// ([`KernelSettings::host_for`]); `None` elsewhere or with nothing to sum.
pub fn fused_squared_norm(gradients: &[Tensor<1>], kernels: KernelSettings) -> Option<SquaredNorm> {
    let first = gradients.first()?;
    if kernels.host_for(first) {
        return host_squared_norm(gradients).map(SquaredNorm::Summed);
    }
    if !kernels.fused_for(first) {
        return None;
    }
    #[cfg(not(feature = "cubecl"))]
    unreachable!("`fused_for` is false without the `cubecl` feature");
    #[cfg(feature = "cubecl")]
    {
        use crate::cube_tensor::{kernel_in_place, kernel_input};
        use burn::cubecl::prelude::{CubeCount, CubeDim};
        use burn::tensor::Device;

        let device: Device = first.device();
        let cubes: Vec<usize> = gradients.iter().map(|g| cubes_for(g.dims()[0])).collect();
        let partials = Tensor::<1>::empty([cubes.iter().sum::<usize>()], &device);
        let output = kernel_in_place(&partials);
        let client = output.client.clone();
        let dtype = burn::backend::cubecl::dtype_to_storage_type(output.dtype);
        let mut offset = 0;
        for (gradient, &n_cubes) in gradients.iter().zip(&cubes) {
            kernels::squared_sum_kernel::launch(
                &client,
                CubeCount::new_1d(n_cubes as u32),
                CubeDim::new_1d(UNITS_PER_CUBE as u32),
                kernel_input(gradient).into_tensor_arg(),
                output.clone().into_tensor_arg(),
                offset as u32,
                UNITS_PER_CUBE,
                dtype,
            );
            offset += n_cubes;
        }
        Some(SquaredNorm::Partials(partials))
    }
}

/// Values whose squares one block of the host pass adds in `f32` (then in `f64`).
const HOST_BLOCK: usize = 1024;

/// [`fused_squared_norm`] on the host: each tensor's values in blocks (in 16 lanes, in `f32`),
/// the blocks' sums added in `f64` in their order.
fn host_squared_norm(gradients: &[Tensor<1>]) -> Option<f64> {
    use rayon::prelude::*;
    let mut total = 0.0f64;
    for gradient in gradients {
        let values = HostTensor::of(gradient)?.contiguous();
        let blocks: Vec<f64> = (values.values().par_chunks(HOST_BLOCK))
            .map(|block| {
                let mut lanes = [0.0f32; 16];
                let mut chunks = block.chunks_exact(16);
                for chunk in &mut chunks {
                    for (lane, &v) in lanes.iter_mut().zip(chunk) {
                        *lane += v * v;
                    }
                }
                let rest: f32 = chunks.remainder().iter().map(|v| v * v).sum();
                lanes.iter().map(|&l| f64::from(l)).sum::<f64>() + f64::from(rest)
            })
            .collect();
        total += blocks.iter().sum::<f64>();
    }
    Some(total)
}

#[cfg(all(test, feature = "cubecl"))]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    /// The fused sum of squares against a float64 host sum, over tensors from one element to
    /// several cubes' worth (each unit adding many elements), summed into one buffer.
    #[test]
    fn fused_squared_norm_equals_a_host_sum_on_wgpu() {
        let Some(device) =
            elmo_test_support::wgpu_device_or_skip("fused_squared_norm_equals_a_host_sum_on_wgpu")
        else {
            return;
        };
        let sizes = [1, 5, 3000, 70_000, 300_001];
        let mut expected = 0.0f64;
        let gradients: Vec<Tensor<1>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let values: Vec<f32> = (0..n)
                    .map(|i| (k as f32 + 1.0) * (i as f32 * 0.37 + k as f32).sin())
                    .collect();
                expected += values
                    .iter()
                    .map(|&v| f64::from(v) * f64::from(v))
                    .sum::<f64>();
                Tensor::from_data(TensorData::new(values, [n]), &device)
            })
            .collect();
        assert!(cubes_for(300_001) > 1, "the test spans several cubes");
        let fused = fused_squared_norm(&gradients, KernelSettings::default())
            .expect("the fused kernel runs on wgpu");
        assert!(
            matches!(fused, SquaredNorm::Partials(_)),
            "queued, not read"
        );
        let fused = fused.read();
        let relative = (fused - expected).abs() / expected;
        assert!(relative < 1e-6, "{fused} vs {expected}: {relative}");
    }
}

#[cfg(all(test, feature = "flex"))]
mod host_tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    /// The host pass against a float64 sum, over tensors from one value to many blocks, one of
    /// them a view at an offset into a larger tensor; the composed operations decline none.
    #[test]
    fn host_squared_norm_equals_a_float64_sum_on_flex() {
        let device = Device::flex();
        let mut expected = 0.0f64;
        let mut gradients = Vec::new();
        for (k, n) in [1, 17, 3000, 300_001].into_iter().enumerate() {
            let values: Vec<f32> = (0..n + 5)
                .map(|i| ((i * 7 + k) % 13) as f32 * 0.25 - 1.5)
                .collect();
            expected += values[5..]
                .iter()
                .map(|&v| f64::from(v).powi(2))
                .sum::<f64>();
            let tensor = Tensor::<1>::from_data(TensorData::new(values, [n + 5]), &device);
            gradients.push(tensor.narrow(0, 5, n));
        }
        let got = fused_squared_norm(&gradients, KernelSettings::default())
            .expect("the host pass runs on flex");
        let SquaredNorm::Summed(got) = got else {
            panic!("the host pass adds up: {got:?}");
        };
        assert!(
            (got - expected).abs() <= 1e-6 * expected,
            "{got} against {expected}"
        );
        assert!(fused_squared_norm(&gradients, KernelSettings::COMPOSED).is_none());
    }
}
