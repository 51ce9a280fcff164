//! Rows gathered and added back by index (an embedding lookup and its gradient), in the form
//! that runs in parallel on a GPU: burn's `select_assign` gives a CubeCL device one thread per
//! column, each walking all the indices in turn, where `scatter` gives one thread per element.
//!
//! Measured on an H200 through wgpu: the char embedding's
//! gradient (`ptb-large.json`, 64 × 35 tokens × 50 chars, 16 columns) took 10-16 ms in one
//! cube, the softmax's target rows (4,480 rows of 256) 1.5 ms. Where the fused kernels run
//! ([`KernelSettings::fused_for`]) these use `gather` / `scatter` with `Add`, which burn runs with
//! atomic float additions where the device has them: the order of the additions into one row
//! then varies between runs (last-bit differences, as with PyTorch's CUDA `index_add_`). On
//! the CPU backends the deterministic `select` / `select_assign` stay. Where the host knows
//! the indices (the token encoder's positions sharing a token), [`sum_row_groups`] adds the
//! rows in a fixed order instead, one unit per output value walking its own rows, so a
//! training step gives the same gradients run after run.

use burn::tensor::{
    Int, Tensor, TensorData, module::embedding as select_embedding, ops::IndexingUpdateOp,
};

use crate::KernelSettings;

/// `target` with the rows of `values` added at the rows `indices` (repeated indices add up).
///
/// # Shapes
/// - target: `[n_rows, d]`; indices: `[n]` (each `< n_rows`); values: `[n, d]`
/// - output: `[n_rows, d]`
pub fn add_rows(
    target: Tensor<2>,
    indices: Tensor<1, Int>,
    values: Tensor<2>,
    kernels: KernelSettings,
) -> Tensor<2> {
    let [n, d] = values.dims();
    if n == 0 {
        return target;
    }
    if !kernels.fused_for(&values) {
        return target.select_assign(0, indices, values, IndexingUpdateOp::Add);
    }
    let indices = indices.reshape([n, 1]).expand([n, d]);
    target.scatter(0, indices, values, IndexingUpdateOp::Add)
}

/// `target` with `values` added at the positions `indices` (repeated indices add up).
///
/// # Shapes
/// - target: `[n_rows]`; indices: `[n]`; values: `[n]`; output: `[n_rows]`
pub fn add_elements(
    target: Tensor<1>,
    indices: Tensor<1, Int>,
    values: Tensor<1>,
    kernels: KernelSettings,
) -> Tensor<1> {
    let ([n_rows], [n]) = (target.dims(), values.dims());
    add_rows(
        target.reshape([n_rows, 1]),
        indices,
        values.reshape([n, 1]),
        kernels,
    )
    .reshape([n_rows])
}

/// The sum of the rows of `values` by group, row `i` into output row `group_of[i]` (as
/// [`add_rows`] into zeros, for indices known on the host): where `kernels` runs the fused
/// kernels, the rows are grouped on the host (offsets and members, each group in ascending
/// order) and one unit per output value adds its group's rows in that order (the same result
/// at every run); burn's `select_assign` elsewhere.
///
/// # Shapes
/// - values: `[n, d]`; group_of: `n` values below `n_groups`; output: `[n_groups, d]`
///
/// # Panics
/// If `group_of` has not `n` values or one is `n_groups` or more.
pub fn sum_row_groups(
    values: Tensor<2>,
    group_of: &[usize],
    n_groups: usize,
    kernels: KernelSettings,
) -> Tensor<2> {
    let [n, d] = values.dims();
    assert_eq!(n, group_of.len(), "rows of values and of their groups");
    if let Some(&group) = group_of.iter().find(|&&g| g >= n_groups) {
        panic!("row group {group} of {n_groups}");
    }
    let device = values.device();
    let upload = |values: Vec<i64>| {
        let n = values.len();
        Tensor::<1, Int>::from_data(TensorData::new(values, [n]), &device)
    };
    #[cfg(feature = "cubecl")]
    if kernels.fused_for(&values) && n > 0 && d > 0 && n_groups > 0 {
        use crate::cube_tensor::{ElementwiseOutput, int_kernel_input, kernel_input};
        // Group g's members are `members[offsets[g]..offsets[g + 1]]`, in ascending order.
        let mut offsets = vec![0i64; n_groups + 1];
        for &group in group_of {
            offsets[group + 1] += 1;
        }
        for g in 0..n_groups {
            offsets[g + 1] += offsets[g];
        }
        let mut next: Vec<i64> = offsets[..n_groups].to_vec();
        let mut members = vec![0i64; n];
        for (row, &group) in group_of.iter().enumerate() {
            members[next[group] as usize] = row as i64;
            next[group] += 1;
        }
        let out = ElementwiseOutput::new([n_groups, d], &device);
        let (offsets, index_type) = int_kernel_input(&upload(offsets));
        let (members, _) = int_kernel_input(&upload(members));
        kernels::sum_row_groups_kernel::launch(
            &out.client,
            out.count.clone(),
            out.dim,
            kernel_input(&values).into_tensor_arg(),
            offsets.into_tensor_arg(),
            members.into_tensor_arg(),
            out.primitive.into_tensor_arg(),
            [out.dtype, index_type],
        );
        return out.tensor;
    }
    #[cfg(not(feature = "cubecl"))]
    let _ = kernels;
    let groups = upload(group_of.iter().map(|&g| g as i64).collect());
    Tensor::zeros([n_groups, d], &device).select_assign(0, groups, values, IndexingUpdateOp::Add)
}

/// The kernel (CubeCL's `Tensor` is not burn's, hence a module of its own).
#[cfg(feature = "cubecl")]
mod kernels {
    use burn::cubecl;
    use burn::cubecl::prelude::*;

    /// `out[g, j] = Σ values[members[k], j]` over `k` in `offsets[g]..offsets[g + 1]`, in that
    /// order: one unit per output value.
    #[cube(launch)]
    pub(super) fn sum_row_groups_kernel<F: Float, I: Int>(
        values: &Tensor<F>,
        offsets: &Tensor<I>,
        members: &Tensor<I>,
        out: &mut Tensor<F>,
        #[define(F, I)] _dtypes: [ElemType; 2],
    ) {
        let position = ABSOLUTE_POS;
        if position >= out.len() {
            terminate!();
        }
        let d = out.shape(1);
        let group = position / d;
        let column = position % d;
        let start = usize::cast_from(offsets[group]);
        let end = usize::cast_from(offsets[group + 1]);
        let mut total = F::new(0.0);
        for k in start..end {
            total += values[usize::cast_from(members[k]) * d + column];
        }
        out[position] = total;
    }
}

/// The rows of `table` at `ids` (an embedding lookup), differentiable; its gradient is
/// [`add_rows`]'s form of a scatter-add on a CubeCL device.
///
/// # Shapes
/// - table: `[n_rows, d]`; ids: `[batch, n]`; output: `[batch, n, d]`
pub fn embedding(table: Tensor<2>, ids: Tensor<2, Int>, kernels: KernelSettings) -> Tensor<3> {
    let [batch, n] = ids.dims();
    if batch * n == 0 || !kernels.fused_for(&table) {
        return select_embedding(table, ids);
    }
    let d = table.dims()[1];
    let indices = ids.reshape([batch * n, 1]).expand([batch * n, d]);
    table.gather(0, indices).reshape([batch, n, d])
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData, Tolerance};

    use elmo_test_support::flex_and_wgpu;

    const ON: KernelSettings = KernelSettings::ALL;

    /// Rows 0..n_rows of a small table, ids with repeats (and one row never picked).
    fn case(device: &Device) -> (Tensor<2>, Tensor<2, Int>, Tensor<3>) {
        let table = Tensor::<2>::from_data(
            TensorData::new((0..20).map(|v| v as f32 * 0.25 - 1.0).collect(), [5, 4]),
            device,
        );
        let ids =
            Tensor::<2, Int>::from_data(TensorData::new(vec![3i64, 0, 3, 1, 4, 3], [2, 3]), device);
        let upstream = Tensor::<3>::from_data(
            TensorData::new(
                (0..24).map(|v| (v as f32 * 0.37).sin()).collect(),
                [2, 3, 4],
            ),
            device,
        );
        (table, ids, upstream)
    }

    /// The lookup and its gradient on `device`, as host data.
    fn lookup_and_gradient(device: &Device) -> (TensorData, TensorData, TensorData) {
        let (table, ids, upstream) = case(device);
        let autodiff = device.clone().autodiff();
        let table = Tensor::<2>::from_data(table.into_data(), &autodiff).require_grad();
        let ids = Tensor::<2, Int>::from_data(ids.into_data(), &autodiff);
        let upstream = Tensor::<3>::from_data(upstream.into_data(), &autodiff);
        let out = embedding(table.clone(), ids.clone(), ON);
        let grads = (out.clone() * upstream.clone()).sum().backward();
        let grad = table.grad(&grads).expect("the table gets a gradient");
        let added = add_rows(
            Tensor::zeros([5, 4], &autodiff),
            ids.clone().reshape([6]),
            upstream.clone().reshape([6, 4]),
            ON,
        );
        let elements = add_elements(
            Tensor::zeros([5], &autodiff),
            ids.reshape([6]),
            upstream.narrow(2, 0, 1).reshape([6]),
            ON,
        );
        (out.into_data(), grad.into_data(), {
            let mut both = added.into_data().try_to_vec::<f32>().expect("f32");
            both.extend(elements.into_data().try_to_vec::<f32>().expect("f32"));
            TensorData::new(both, [25])
        })
    }

    #[test]
    fn lookup_and_scatter_add_match_a_host_reference() {
        let (table, ids, upstream) = case(&Device::flex());
        let table = table.into_data().try_to_vec::<f32>().expect("f32");
        let ids: Vec<i64> = ids
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .expect("i64");
        let upstream = upstream.into_data().try_to_vec::<f32>().expect("f32");
        let mut rows = Vec::new();
        let mut added = vec![0.0f32; 25];
        for (i, &id) in ids.iter().enumerate() {
            let id = id as usize;
            rows.extend_from_slice(&table[id * 4..id * 4 + 4]);
            for j in 0..4 {
                added[id * 4 + j] += upstream[i * 4 + j];
            }
            added[20 + id] += upstream[i * 4];
        }
        let expected_rows = TensorData::new(rows, [2, 3, 4]);
        let expected_grad = TensorData::new(added[..20].to_vec(), [5, 4]);
        let expected_added = TensorData::new(added, [25]);
        let devices = flex_and_wgpu("lookup_and_scatter_add_match_a_host_reference");
        for device in devices {
            let (rows, grad, added) = lookup_and_gradient(&device);
            rows.assert_approx_eq::<f32>(&expected_rows, Tolerance::absolute(1e-6));
            grad.assert_approx_eq::<f32>(&expected_grad, Tolerance::absolute(1e-5));
            added.assert_approx_eq::<f32>(&expected_added, Tolerance::absolute(1e-5));
            // Nothing to look up or add: an empty lookup, the target unchanged.
            let table = Tensor::<2>::ones([5, 4], &device);
            let none = Tensor::<1, Int>::zeros([0], &device);
            assert_eq!(
                embedding(table.clone(), Tensor::<2, Int>::zeros([1, 0], &device), ON).dims(),
                [1, 0, 4]
            );
            let kept = add_rows(
                table.clone(),
                none.clone(),
                Tensor::zeros([0, 4], &device),
                ON,
            );
            let kept_elements = add_elements(
                Tensor::ones([5], &device),
                none,
                Tensor::zeros([0], &device),
                ON,
            );
            assert_eq!(kept.sum().into_scalar::<f32>(), 20.0);
            assert_eq!(kept_elements.sum().into_scalar::<f32>(), 5.0);
        }
    }

    /// Grouped rows sum to the host's sums (repeats, a group nobody adds into, an empty input),
    /// and on wgpu, where the kernel runs, to the same bits at every run: many rows (300, of
    /// values whose sums depend on their order) into few groups.
    #[test]
    fn grouped_rows_sum_in_a_fixed_order() {
        for device in flex_and_wgpu("grouped_rows_sum_in_a_fixed_order") {
            let (n, d, n_groups) = (300, 7, 4);
            // Group 2 gets no row.
            let group_of: Vec<usize> = (0..n).map(|i| [0, 1, 3, 0, 3][i % 5]).collect();
            let values: Vec<f32> = (0..n * d)
                .map(|v| (v as f32 * 0.731).sin() * 10f32.powi((v % 7) as i32 - 3))
                .collect();
            let mut expected = vec![0f64; n_groups * d];
            for (row, &group) in group_of.iter().enumerate() {
                for column in 0..d {
                    expected[group * d + column] += values[row * d + column] as f64;
                }
            }
            let matrix = Tensor::<2>::from_data(TensorData::new(values, [n, d]), &device);
            let sums = |matrix: &Tensor<2>| sum_row_groups(matrix.clone(), &group_of, n_groups, ON);
            let first = sums(&matrix).into_data();
            let expected: Vec<f32> = expected.into_iter().map(|v| v as f32).collect();
            first.assert_approx_eq::<f32>(
                &TensorData::new(expected, [n_groups, d]),
                Tolerance::absolute(1e-3),
            );
            for _ in 0..5 {
                assert_eq!(
                    sums(&matrix).into_data(),
                    first,
                    "another order of additions"
                );
            }
            let none = sum_row_groups(Tensor::zeros([0, d], &device), &[], 3, ON);
            assert_eq!(none.dims(), [3, d]);
            assert_eq!(none.abs().sum().into_scalar::<f32>(), 0.0);
        }
    }
}
