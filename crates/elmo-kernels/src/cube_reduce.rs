//! Reductions of a matrix on a GPU with a strategy that fits their shape: the softmax's maximum
//! and sum over a vocabulary (one cube of threads per row), and column sums over many rows (the
//! bias gradients, in slices of rows first).
//!
//! burn built without its `autotune` feature (this workspace: the feature benchmarks every
//! kernel shape at first use, minutes on a GPU) runs every reduction with one thread per output
//! value. Profiled on an H200, the full softmax's row maximum
//! and sum of a chunk of 419 rows × 10,002 words took 0.47 and 0.39 ms each, 419 threads each
//! walking a row alone on 2 of the GPU's 132 multiprocessors: 23% of a `ptb-small.json` 512 × 35
//! training step. On other devices (and with the fused kernels off) burn's own operations run.

use burn::tensor::Tensor;

use crate::KernelSettings;
use crate::split_product::slices_over_rows;

/// What a row reduction computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowReduction {
    /// The largest value of each row.
    Max,
    /// The sum of each row.
    Sum,
}

/// Each row's maximum or sum: where `kernels` runs the fused kernels, one cube per row, whose
/// threads read the row together and combine their values in shared memory; otherwise burn's
/// `max_dim` / `sum_dim`.
///
/// # Shapes
/// - matrix: `[N, K]`; output: `[N, 1]`
pub fn reduce_rows(
    matrix: Tensor<2>,
    reduction: RowReduction,
    kernels: KernelSettings,
) -> Tensor<2> {
    #[cfg(feature = "cubecl")]
    if kernels.fused_for(&matrix) && matrix.dims()[1] > 0 {
        use burn_cubecl::CubeBackend;
        use burn_cubecl::kernel::reduce::{KernelReduceStrategy, reduce_dim};
        use cubek::reduce::ReduceStrategy;
        use cubek::reduce::components::instructions::ReduceOperationConfig;
        use cubek::reduce::launch::{RoutineStrategy, VectorizationStrategy};
        use cubek::reduce::routines::BlueprintStrategy;
        use cubek::reduce::routines::cube::CubeStrategy;

        let config = match reduction {
            RowReduction::Max => ReduceOperationConfig::Max,
            RowReduction::Sum => ReduceOperationConfig::Sum,
        };
        let strategy = ReduceStrategy {
            routine: RoutineStrategy::Cube(BlueprintStrategy::Inferred(CubeStrategy {
                use_planes: false,
            })),
            vectorization: VectorizationStrategy {
                parallel_output_vectorization: false,
            },
            autotune_level: Default::default(),
        };
        let primitive =
            crate::cube_tensor::cube_primitive(&matrix).expect("checked by `fused_for`");
        // A device that refuses the strategy keeps burn's operation below.
        if let Ok(reduced) = reduce_dim(
            primitive,
            None,
            1,
            KernelReduceStrategy::Specific(strategy),
            config,
        ) {
            return Tensor::from_primitive::<CubeBackend>(reduced);
        }
    }
    #[cfg(not(feature = "cubecl"))]
    let _ = kernels;
    match reduction {
        RowReduction::Max => matrix.max_dim(1),
        RowReduction::Sum => matrix.sum_dim(1),
    }
}

/// The sum of each column over many rows. Where `kernels` splits products on a CubeCL device,
/// the rows are summed in S slices first (`[S, R/S, N]` summed over its middle axis, S times the threads
/// of one pass), then the S partial sums: one thread per column would walk every row.
///
/// # Shapes
/// - matrix: `[R, N]`; output: `[N]`
pub fn sum_columns(matrix: Tensor<2>, kernels: KernelSettings) -> Tensor<1> {
    let [rows, n] = matrix.dims();
    let n_slices = slices_over_rows(kernels.split_for(&matrix), rows, n);
    match n_slices {
        1 => matrix.sum_dim(0).reshape([n]),
        _ => matrix
            .reshape([n_slices, rows / n_slices, n])
            .sum_dim(1)
            .sum_dim(0)
            .reshape([n]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, Tolerance};

    use elmo_test_support::flex_and_wgpu;

    /// Row maxima and sums, and column sums (split into slices at 4,096 rows), equal a host
    /// computation, on flex and (where there is one) wgpu, with rows wider than a plane and not
    /// a multiple of its width.
    #[test]
    fn reductions_equal_a_host_computation() {
        let devices = flex_and_wgpu("reductions_equal_a_host_computation");
        let on = KernelSettings::default();
        for device in devices {
            for [rows, width] in [[5, 1001], [3, 7], [4096, 96]] {
                let matrix =
                    Tensor::<2>::random([rows, width], Distribution::Normal(0.0, 1.0), &device);
                let values = matrix.to_data().try_to_vec::<f32>().expect("f32 values");
                let row = |r: usize| &values[r * width..(r + 1) * width];
                let max: Vec<f32> = (0..rows)
                    .map(|r| row(r).iter().copied().fold(f32::NEG_INFINITY, f32::max))
                    .collect();
                let sum: Vec<f32> = (0..rows).map(|r| row(r).iter().sum()).collect();
                let columns: Vec<f32> = (0..width)
                    .map(|c| (0..rows).map(|r| values[r * width + c]).sum())
                    .collect();
                let check = |got: Vec<f32>, expected: &[f32], what: &str| {
                    assert_eq!(got.len(), expected.len(), "{what} on {device:?}");
                    for (g, e) in got.iter().zip(expected) {
                        assert!(
                            (g - e).abs() <= 1e-3 * (1.0 + e.abs()),
                            "{what} on {device:?}: {g} vs {e}"
                        );
                    }
                };
                let values_of =
                    |t: Tensor<2>| t.into_data().try_to_vec::<f32>().expect("f32 values");
                check(
                    values_of(reduce_rows(matrix.clone(), RowReduction::Max, on)),
                    &max,
                    "max",
                );
                check(
                    values_of(reduce_rows(matrix.clone(), RowReduction::Sum, on)),
                    &sum,
                    "sum",
                );
                let summed = sum_columns(matrix.clone(), on).unsqueeze_dim::<2>(0);
                check(values_of(summed), &columns, "column sums");
                // burn's own operations give the same.
                reduce_rows(matrix.clone(), RowReduction::Max, on)
                    .into_data()
                    .assert_approx_eq::<f32>(
                        &matrix.max_dim(1).into_data(),
                        Tolerance::absolute(0.0),
                    );
            }
        }
    }
}
