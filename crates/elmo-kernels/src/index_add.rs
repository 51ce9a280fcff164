//! Rows gathered and added back by index (an embedding lookup and the sums of its gradient), in
//! the form that runs in parallel on a GPU and adds in a fixed order.
//!
//! burn's scatter with `Add` runs on a CubeCL device either with atomic float additions (CUDA:
//! the order of the additions into one row varies between runs, last-bit differences as with
//! PyTorch's CUDA `index_add_`) or, where the device has no float atomics (WGSL), one unit per
//! column walking every row: measured on an H200 through wgpu, the char embedding's gradient
//! (`ptb-large.json`, 64 × 35 tokens × 50 chars, 16 columns) took 10-16 ms, the softmax's
//! target rows (4,480 rows of 256) 1.5 ms. Every index a training step adds by is known on the
//! host, so [`sum_row_groups`] groups the rows there and one unit per output value adds its
//! group's rows in ascending order, a large group first in blocks: the same bits at every run,
//! and every output value in parallel. The CPU backends keep burn's `select_assign`.

use burn::tensor::{
    Int, Tensor, TensorData, module::embedding as select_embedding, ops::IndexingUpdateOp,
};

use crate::KernelSettings;

/// Most rows one unit adds on a CubeCL device: a larger group is summed in blocks of this many
/// rows first, then the blocks' sums by group (again in blocks where a group has more): the
/// char embedding's padding char gathers ~250,000 positions a step at `ptb-large`, which one
/// unit would walk serially.
#[cfg_attr(not(feature = "cubecl"), allow(dead_code))]
const ROWS_PER_UNIT: usize = 64;

/// The sum of the rows of `values` by group, row `i` into output row `group_of[i]`: a
/// scatter-add into zeros whose indices are known on the host. Where `kernels` runs the fused
/// kernels, the rows are grouped on the host (offsets and members, each group in ascending
/// order, in blocks of at most 64, `ROWS_PER_UNIT`) and one unit per output value adds its
/// group's rows in that order (the same result at every run); burn's `select_assign`
/// elsewhere.
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
    #[cfg(feature = "cubecl")]
    if kernels.fused_for(&values) && n > 0 && d > 0 && n_groups > 0 {
        let mut values = values;
        let mut grouping = Grouping::of(group_of, n_groups);
        // Blocks of the largest groups first, until every group is small enough for one unit.
        while grouping.largest() > ROWS_PER_UNIT {
            let (blocks, group_of_block) = grouping.blocks(ROWS_PER_UNIT);
            values = blocks.sums(values);
            grouping = Grouping::of(&group_of_block, n_groups);
        }
        return grouping.sums(values);
    }
    #[cfg(not(feature = "cubecl"))]
    let _ = kernels;
    let groups: Vec<i64> = group_of.iter().map(|&g| g as i64).collect();
    let groups = Tensor::<1, Int>::from_data(TensorData::new(groups, [n]), &device);
    Tensor::zeros([n_groups, d], &device).select_assign(0, groups, values, IndexingUpdateOp::Add)
}

/// [`sum_row_groups`] of single values.
///
/// # Shapes
/// - values: `[n]`; group_of: `n` values below `n_groups`; output: `[n_groups]`
pub fn sum_groups(
    values: Tensor<1>,
    group_of: &[usize],
    n_groups: usize,
    kernels: KernelSettings,
) -> Tensor<1> {
    let [n] = values.dims();
    sum_row_groups(values.reshape([n, 1]), group_of, n_groups, kernels).reshape([n_groups])
}

/// Rows grouped on the host: group `g`'s members (rows of the values) are
/// `members[offsets[g]..offsets[g + 1]]`, in ascending order.
#[cfg(feature = "cubecl")]
struct Grouping {
    offsets: Vec<i64>,
    members: Vec<i64>,
}

#[cfg(feature = "cubecl")]
impl Grouping {
    /// Row `i` in group `group_of[i]` (each below `n_groups`).
    fn of(group_of: &[usize], n_groups: usize) -> Self {
        let mut offsets = vec![0i64; n_groups + 1];
        for &group in group_of {
            offsets[group + 1] += 1;
        }
        for g in 0..n_groups {
            offsets[g + 1] += offsets[g];
        }
        let mut next: Vec<i64> = offsets[..n_groups].to_vec();
        let mut members = vec![0i64; group_of.len()];
        for (row, &group) in group_of.iter().enumerate() {
            members[next[group] as usize] = row as i64;
            next[group] += 1;
        }
        Self { offsets, members }
    }

    /// The members of the largest group.
    fn largest(&self) -> usize {
        (self.offsets.windows(2))
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0)
    }

    /// Each group's members cut into blocks of at most `size`, in order: the blocks as groups
    /// of the same rows (the members kept, not copied), and the group of each block.
    fn blocks(self, size: usize) -> (Self, Vec<usize>) {
        let mut offsets = vec![0i64];
        let mut group_of_block = Vec::new();
        for (group, w) in self.offsets.windows(2).enumerate() {
            let (start, end) = (w[0] as usize, w[1] as usize);
            for block in self.members[start..end].chunks(size) {
                offsets.push(offsets[offsets.len() - 1] + block.len() as i64);
                group_of_block.push(group);
            }
        }
        let members = self.members;
        (Self { offsets, members }, group_of_block)
    }

    /// Each group's sum of the rows of `values`, one unit per output value.
    ///
    /// # Shapes
    /// - values: `[n, d]` (`n` above every member); output: `[n_groups, d]`
    fn sums(&self, values: Tensor<2>) -> Tensor<2> {
        use crate::cube_tensor::{ElementwiseOutput, int_kernel_input, kernel_input};
        let device = values.device();
        let upload = |values: &[i64]| {
            let n = values.len();
            Tensor::<1, Int>::from_data(TensorData::new(values.to_vec(), [n]), &device)
        };
        let n_groups = self.offsets.len() - 1;
        let out = ElementwiseOutput::new([n_groups, values.dims()[1]], &device);
        let (offsets, index_type) = int_kernel_input(&upload(&self.offsets));
        let (members, _) = int_kernel_input(&upload(&self.members));
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
        out.tensor
    }
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

/// The rows of `table` at `ids` (an embedding lookup), differentiable: on a CubeCL device a
/// `gather`, whose gradient under autodiff is burn's scatter-add (atomic where the device adds
/// floats atomically). A caller that knows the ids on the host and wants the same gradient
/// at every run looks up outside autodiff and sums the rows' gradients with
/// [`sum_row_groups`], as the training step does.
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

    /// The ids of a lookup, read back.
    fn ids_on_host(ids: Tensor<2, Int>) -> Vec<usize> {
        let ids = ids.into_data().convert::<i64>().try_to_vec::<i64>();
        ids.expect("i64").into_iter().map(|i| i as usize).collect()
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
        let flat_ids: Vec<usize> = ids_on_host(ids);
        let added = sum_row_groups(upstream.clone().reshape([6, 4]), &flat_ids, 5, ON);
        let elements = sum_groups(upstream.narrow(2, 0, 1).reshape([6]), &flat_ids, 5, ON);
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
            // Nothing to look up or add: an empty lookup, zeros.
            let table = Tensor::<2>::ones([5, 4], &device);
            assert_eq!(
                embedding(table, Tensor::<2, Int>::zeros([1, 0], &device), ON).dims(),
                [1, 0, 4]
            );
            let none = sum_groups(Tensor::zeros([0], &device), &[], 5, ON);
            assert_eq!(none.dims(), [5]);
            assert_eq!(none.abs().sum().into_scalar::<f32>(), 0.0);
        }
    }

    /// Grouped rows sum to the host's sums (repeats, a group nobody adds into, one group of
    /// more than `ROWS_PER_UNIT²` rows, summed in blocks of blocks, an empty input), and on
    /// wgpu, where the kernel runs, to the same bits at every run: many rows (6,000, of values
    /// whose sums depend on their order) into few groups.
    #[test]
    fn grouped_rows_sum_in_a_fixed_order() {
        for device in flex_and_wgpu("grouped_rows_sum_in_a_fixed_order") {
            let (n, d, n_groups) = (6_000, 7, 4);
            // Group 0 gets 4,800 rows, group 2 none.
            let group_of: Vec<usize> = (0..n)
                .map(|i| [0, 1, 0, 0, 0, 3, 0, 0, 0, 0][i % 10])
                .collect();
            assert!(group_of.iter().filter(|&&g| g == 0).count() > ROWS_PER_UNIT.pow(2));
            let values: Vec<f32> = (0..n * d)
                .map(|v| (v as f32 * 0.731).sin() * 10f32.powi((v % 7) as i32 - 3))
                .collect();
            // The sums, and the sums of magnitudes that bound an f32 sum's rounding.
            let (mut expected, mut magnitude) =
                (vec![0f64; n_groups * d], vec![0f64; n_groups * d]);
            for (row, &group) in group_of.iter().enumerate() {
                for column in 0..d {
                    expected[group * d + column] += values[row * d + column] as f64;
                    magnitude[group * d + column] += values[row * d + column].abs() as f64;
                }
            }
            let matrix = Tensor::<2>::from_data(TensorData::new(values, [n, d]), &device);
            let sums = |matrix: &Tensor<2>| sum_row_groups(matrix.clone(), &group_of, n_groups, ON);
            let first = sums(&matrix).into_data();
            let got = first.try_to_vec::<f32>().expect("f32");
            for (k, &value) in got.iter().enumerate() {
                let error = (value as f64 - expected[k]).abs();
                assert!(
                    error <= 1e-6 * magnitude[k],
                    "group {} column {}: {value} for {}",
                    k / d,
                    k % d,
                    expected[k]
                );
            }
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
