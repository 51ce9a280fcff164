//! A batched row-major product `[.., M, K]·[.., K, N]` of strided tensors as one call of a
//! column-major BLAS (`cublasGemmStridedBatchedEx`, BLAS's `gemm` conventions): which operand is
//! read transposed, the leading dimensions and the batch strides, from the tensors' shapes and
//! strides, without a copy where their layout allows. The row-major `C = A·B` is the
//! column-major `Cᵀ = Bᵀ·Aᵀ`, so the BLAS's first factor is our right one.

/// The shape and strides (in elements) of one operand or of the output.
#[derive(Debug, Clone, Copy)]
pub struct StridedLayout<'a> {
    /// The dimensions, the matrix in the last two.
    pub shape: &'a [usize],
    /// The stride of each dimension.
    pub strides: &'a [usize],
}

/// One `gemmStridedBatched` call in BLAS's column-major terms: `C_b = op(A_b)·op(B_b)` for each
/// batch `b`, `op(A)` `m × k`, `op(B)` `k × n`, `C` `m × n`, where A is the product's right
/// factor, B its left one and C its output, all read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmPlan {
    /// Whether A is read transposed (`CUBLAS_OP_T`).
    pub transpose_a: bool,
    /// Whether B is read transposed.
    pub transpose_b: bool,
    /// BLAS's `m`: the product's N.
    pub m: i32,
    /// BLAS's `n`: the product's M.
    pub n: i32,
    /// BLAS's `k`: the product's K.
    pub k: i32,
    /// A's leading dimension.
    pub lda: i32,
    /// B's leading dimension.
    pub ldb: i32,
    /// C's leading dimension.
    pub ldc: i32,
    /// Elements from one batch's A to the next (0: one A for every batch).
    pub stride_a: i64,
    /// Elements from one batch's B to the next (0: one B for every batch).
    pub stride_b: i64,
    /// Elements from one batch's C to the next.
    pub stride_c: i64,
    /// The batches.
    pub batch: i32,
}

/// The call that computes `out = lhs · rhs` in place, or `None` where a layout is not one BLAS
/// reads (a matrix contiguous in neither dimension, batch dimensions that do not flatten to one
/// stride, an output that is not row-major), a dimension is empty or a number exceeds BLAS's
/// 32-bit integers. The batch dimensions of `lhs` and `rhs` are `out`'s, or all 1 (one matrix
/// for every batch).
pub fn gemm_plan(lhs: StridedLayout, rhs: StridedLayout, out: StridedLayout) -> Option<GemmPlan> {
    let rank = out.shape.len();
    if rank < 2 || lhs.shape.len() != rank || rhs.shape.len() != rank {
        return None;
    }
    let [m, k] = [lhs.shape[rank - 2], lhs.shape[rank - 1]];
    let n = rhs.shape[rank - 1];
    if rhs.shape[rank - 2] != k || out.shape[rank - 2..] != [m, n] || m * n * k == 0 {
        return None;
    }
    let batch_shape = &out.shape[..rank - 2];
    let batch: usize = batch_shape.iter().product();
    // Our right factor [K, N] is BLAS's A (op(A) is N × K), our left one [M, K] its B.
    let (transpose_a, lda) = leading_dimension(k, n, matrix_strides(rhs))?;
    let (transpose_b, ldb) = leading_dimension(m, k, matrix_strides(lhs))?;
    let (transpose_c, ldc) = leading_dimension(m, n, matrix_strides(out))?;
    if transpose_c {
        return None;
    }
    let stride_c = batch_stride(out, batch_shape)?;
    let stride_a = batch_stride(rhs, batch_shape)?;
    let stride_b = batch_stride(lhs, batch_shape)?;
    let int = |x: usize| i32::try_from(x).ok();
    let long = |x: usize| i64::try_from(x).ok();
    Some(GemmPlan {
        transpose_a,
        transpose_b,
        m: int(n)?,
        n: int(m)?,
        k: int(k)?,
        lda: int(lda)?,
        ldb: int(ldb)?,
        ldc: int(ldc)?,
        stride_a: long(stride_a)?,
        stride_b: long(stride_b)?,
        stride_c: long(stride_c)?,
        batch: int(batch)?,
    })
}

/// The strides of a layout's matrix (its last two dimensions).
fn matrix_strides(layout: StridedLayout) -> [usize; 2] {
    let rank = layout.strides.len();
    [layout.strides[rank - 2], layout.strides[rank - 1]]
}

/// How BLAS reads a row-major `[rows, cols]` matrix with strides `[row, col]` as the
/// column-major `[cols, rows]` it stands for: in place (`false`, leading dimension the row
/// stride) where its rows are contiguous, transposed (`true`, leading dimension the column
/// stride: it is the column-major `[rows, cols]`) where its columns are; `None` otherwise. A
/// dimension of 1 has no stride to speak of, and its leading dimension is the least BLAS takes.
fn leading_dimension(rows: usize, cols: usize, [row, col]: [usize; 2]) -> Option<(bool, usize)> {
    if cols == 1 || col == 1 {
        let ld = if rows == 1 { cols } else { row };
        if ld >= cols {
            return Some((false, ld));
        }
    }
    if rows == 1 || row == 1 {
        let ld = if cols == 1 { rows } else { col };
        if ld >= rows {
            return Some((true, ld));
        }
    }
    None
}

/// The one stride from a layout's batch to the next over the flattened `batch_shape`: 0 when
/// the layout has a single matrix (its batch dimensions all 1), the last batch dimension's
/// stride when its batch dimensions are `batch_shape` and flatten to it; `None` otherwise.
fn batch_stride(layout: StridedLayout, batch_shape: &[usize]) -> Option<usize> {
    let dims = batch_shape.len();
    let shape = &layout.shape[..dims];
    if shape.iter().all(|&d| d == 1) {
        return Some(0);
    }
    if shape != batch_shape {
        return None;
    }
    // Dimensions of 1 are skipped: they step nowhere.
    let steps: Vec<(usize, usize)> = (0..dims)
        .filter(|&i| shape[i] > 1)
        .map(|i| (shape[i], layout.strides[i]))
        .collect();
    let flattens = steps
        .windows(2)
        .all(|pair| pair[0].1 == pair[1].1 * pair[1].0);
    flattens.then(|| steps.last().map_or(0, |&(_, stride)| stride))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A strided tensor on the host: its values at the offsets that shape and strides give.
    struct Strided {
        shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
        storage: Vec<f32>,
    }

    impl Strided {
        /// A tensor of `shape` laid out with `order` (a permutation of its dimensions, the last
        /// the fastest), `pad` unused values after each step of the second-fastest dimension
        /// and an `offset`, holding deterministic values.
        fn new(shape: &[usize], order: &[usize], pad: usize, offset: usize, seed: u32) -> Self {
            let mut strides = vec![0; shape.len()];
            let mut step = 1;
            for (position, &dim) in order.iter().rev().enumerate() {
                strides[dim] = step;
                step *= shape[dim];
                if position == 0 {
                    step += pad;
                }
            }
            let len = offset + step;
            let storage = (0..len)
                .map(|i| {
                    ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 997) as f32 / 97.0
                        - 5.0
                })
                .collect();
            Self {
                shape: shape.to_vec(),
                strides,
                offset,
                storage,
            }
        }

        fn layout(&self) -> StridedLayout<'_> {
            StridedLayout {
                shape: &self.shape,
                strides: &self.strides,
            }
        }

        /// The value at `index` (batch indices broadcast where this tensor's batch is 1).
        fn at(&self, index: &[usize]) -> f32 {
            let offset: usize = index
                .iter()
                .zip(&self.shape)
                .zip(&self.strides)
                .map(|((&i, &d), &s)| if d == 1 { 0 } else { i * s })
                .sum();
            self.storage[self.offset + offset]
        }
    }

    /// `lhs · rhs` by the plan, read as a column-major BLAS reads it, on the host.
    fn run_plan(plan: &GemmPlan, lhs: &Strided, rhs: &Strided, out: &mut Strided) {
        let (a, b) = (rhs, lhs);
        for batch in 0..plan.batch as usize {
            for i in 0..plan.m as usize {
                for j in 0..plan.n as usize {
                    let mut sum = 0.0;
                    for l in 0..plan.k as usize {
                        let a_at = match plan.transpose_a {
                            false => i + l * plan.lda as usize,
                            true => l + i * plan.lda as usize,
                        };
                        let b_at = match plan.transpose_b {
                            false => l + j * plan.ldb as usize,
                            true => j + l * plan.ldb as usize,
                        };
                        sum += a.storage[a.offset + batch * plan.stride_a as usize + a_at]
                            * b.storage[b.offset + batch * plan.stride_b as usize + b_at];
                    }
                    let c_at =
                        out.offset + batch * plan.stride_c as usize + i + j * plan.ldc as usize;
                    out.storage[c_at] = sum;
                }
            }
        }
    }

    /// Every index of `shape`, row-major.
    fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
        let mut all = vec![vec![]];
        for &d in shape {
            all = all
                .into_iter()
                .flat_map(|prefix| {
                    (0..d).map(move |i| {
                        let mut index = prefix.clone();
                        index.push(i);
                        index
                    })
                })
                .collect();
        }
        all
    }

    /// The plan's product equals the product of the strided tensors, element by element.
    fn check(lhs: Strided, rhs: Strided, mut out: Strided) {
        let plan = gemm_plan(lhs.layout(), rhs.layout(), out.layout()).expect("a plan");
        run_plan(&plan, &lhs, &rhs, &mut out);
        let rank = out.shape.len();
        let k = lhs.shape[rank - 1];
        for index in indices(&out.shape) {
            let expected: f32 = (0..k)
                .map(|l| {
                    let mut left = index.clone();
                    left[rank - 1] = l;
                    let mut right = index.clone();
                    right[rank - 2] = l;
                    lhs.at(&left) * rhs.at(&right)
                })
                .sum();
            let got = out.at(&index);
            assert!(
                (got - expected).abs() <= 1e-3 * expected.abs().max(1.0),
                "{index:?}: {got} against {expected} ({plan:?})"
            );
        }
    }

    #[test]
    fn plans_compute_the_product_of_every_layout_blas_reads() {
        let (m, k, n) = (5, 7, 3);
        // Row-major and transposed factors, padded rows, offsets, a padded output.
        for (lhs_order, rhs_order) in [
            ([0, 1], [0, 1]),
            ([1, 0], [0, 1]),
            ([0, 1], [1, 0]),
            ([1, 0], [1, 0]),
        ] {
            for (pad, offset) in [(0, 0), (3, 2)] {
                check(
                    Strided::new(&[m, k], &lhs_order, pad, offset, 1),
                    Strided::new(&[k, n], &rhs_order, pad, offset, 2),
                    Strided::new(&[m, n], &[0, 1], pad, offset, 3),
                );
            }
        }
        // Batches: both batched, transposed within the batch, and one right factor for all.
        check(
            Strided::new(&[4, m, k], &[0, 2, 1], 0, 0, 4),
            Strided::new(&[4, k, n], &[0, 1, 2], 0, 1, 5),
            Strided::new(&[4, m, n], &[0, 1, 2], 2, 0, 6),
        );
        check(
            Strided::new(&[2, 3, m, k], &[0, 1, 2, 3], 0, 0, 7),
            Strided::new(&[1, 1, k, n], &[0, 1, 3, 2], 0, 0, 8),
            Strided::new(&[2, 3, m, n], &[0, 1, 2, 3], 0, 0, 9),
        );
        // Dimensions of 1: a row vector times a column, a single column out.
        check(
            Strided::new(&[1, k], &[1, 0], 0, 0, 10),
            Strided::new(&[k, 1], &[1, 0], 0, 0, 11),
            Strided::new(&[1, 1], &[0, 1], 0, 0, 12),
        );
        check(
            Strided::new(&[m, 1], &[0, 1], 0, 0, 13),
            Strided::new(&[1, n], &[0, 1], 4, 0, 14),
            Strided::new(&[m, n], &[0, 1], 0, 0, 15),
        );
    }

    #[test]
    fn layouts_blas_cannot_read_have_no_plan() {
        let plan = |lhs: &Strided, rhs: &Strided, out: &Strided| {
            gemm_plan(lhs.layout(), rhs.layout(), out.layout())
        };
        let (m, k, n) = (4, 6, 5);
        let lhs = Strided::new(&[m, k], &[0, 1], 0, 0, 1);
        let rhs = Strided::new(&[k, n], &[0, 1], 0, 0, 2);
        let out = Strided::new(&[m, n], &[0, 1], 0, 0, 3);
        assert!(plan(&lhs, &rhs, &out).is_some());
        // A transposed output, a matrix contiguous in neither dimension, mismatched shapes.
        assert_eq!(
            plan(&lhs, &rhs, &Strided::new(&[m, n], &[1, 0], 0, 0, 3)),
            None
        );
        let mut every_other = Strided::new(&[m, k], &[0, 1], 0, 0, 1);
        every_other.strides = vec![2 * k, 2];
        assert_eq!(plan(&every_other, &rhs, &out), None);
        assert_eq!(plan(&rhs, &rhs, &out), None);
        // Batch dimensions that do not flatten, or differ from the output's.
        let mut batched = Strided::new(&[2, 3, m, k], &[0, 1, 2, 3], 0, 0, 1);
        batched.strides[0] += 1;
        let batched_rhs = Strided::new(&[2, 3, k, n], &[0, 1, 2, 3], 0, 0, 2);
        let batched_out = Strided::new(&[2, 3, m, n], &[0, 1, 2, 3], 0, 0, 3);
        assert_eq!(plan(&batched, &batched_rhs, &batched_out), None);
        let other_batch = Strided::new(&[3, 2, m, k], &[0, 1, 2, 3], 0, 0, 1);
        assert_eq!(plan(&other_batch, &batched_rhs, &batched_out), None);
        // An empty dimension.
        let empty = Strided::new(&[0, k], &[0, 1], 0, 0, 1);
        assert_eq!(
            plan(&empty, &rhs, &Strided::new(&[0, n], &[0, 1], 0, 0, 3)),
            None
        );
    }
}
