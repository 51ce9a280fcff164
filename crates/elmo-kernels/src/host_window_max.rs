//! A char convolution and its max over positions on the host (the char CNN of Kim et al. 2016 as
//! bilm-tf's `_build_word_char_embeddings` runs it: valid windows, each filter's max over the
//! positions), for burn's flex CPU backend: each token's windows read from its looked-up chars
//! (a window is a contiguous run of `width · d_char` values), multiplied a few tokens at a time
//! by the weight packed once per call (`host_gemm`'s kernel) into a buffer that stays in L2,
//! and reduced there; tokens shared among rayon's threads.
//!
//! Why: with burn's operations every window (`width` times the chars) and every position's
//! value (180 KiB a token at `original`'s widest convolution) go through memory, and flex
//! reduces over the middle axis one scalar at a time.

use burn::tensor::Tensor;
use rayon::prelude::*;

use crate::Precision;
use crate::host_gemm::{HostInstructions, Isa, PORTABLE_FMA, mul_add};
use crate::host_tensor::HostTensor;
use crate::host_weight::HostWeight;

/// A convolution's max over positions ([`host_window_max`]).
#[derive(Debug, Clone)]
pub struct HostWindowMax {
    /// `[N, F]`: each filter's max over the positions, without the bias.
    pub pooled: Tensor<2>,
    /// `[N, F]` row-major: the position of each max, where asked for: the first one, or the
    /// first NaN (as burn's `max_dim_with_indices`); what [`host_window_max_backward`] reads.
    pub positions: Option<Vec<u32>>,
}

/// Bytes of a task's values before the max: a few tokens' positions times the filters, in L2.
const BUFFER_BYTES: usize = 512 * 1024;

/// The convolution of `width` slots of `chars` with `weight` at the first `n_positions`
/// positions of each token, and each filter's max over them (with its position where
/// `with_positions`), with the widest instruction set up to `instructions`, the products in
/// `bf16` with [`Precision::Mixed`] where this CPU has a unit for them ([`crate::Bf16Unit`]); `None`
/// where `chars` or `weight` is not an `f32` flex tensor (the caller runs burn's operations). Window
/// `p` of a token is its slots `p .. p + width`, flat as the rows of `weight` (slot-major, then
/// the char dimension).
///
/// # Shapes
/// - chars: `[N, S, E]`; weight: `[width · E, F]`
///
/// # Panics
/// When `weight` does not have `width · E` rows, when the windows pass the `S` slots, or when
/// there is no position.
pub fn host_window_max(
    chars: &Tensor<3>,
    weight: &Tensor<2>,
    width: usize,
    n_positions: usize,
    with_positions: bool,
    instructions: HostInstructions,
    precision: Precision,
) -> Option<HostWindowMax> {
    let [n_tokens, n_slots, d_char] = chars.dims();
    let [d_window, n_filters] = weight.dims();
    assert_eq!(d_window, width * d_char, "a weight of width · d_char rows");
    assert!(
        n_positions >= 1 && n_positions + width - 1 <= n_slots,
        "between 1 and {} positions of width {width}, not {n_positions}",
        n_slots + 1 - width.min(n_slots)
    );
    let chars = HostTensor::of(chars)?.contiguous();
    let packed = {
        let weight = HostTensor::of(weight)?;
        HostWeight::pack(
            weight.strided()?,
            d_window,
            n_filters,
            instructions,
            precision,
        )
    };
    let mut pooled = HostTensor::zeros([n_tokens, n_filters]);
    let mut positions = vec![
        0u32;
        if with_positions {
            n_tokens * n_filters
        } else {
            0
        }
    ];
    if n_tokens > 0 && n_filters > 0 {
        let chars = chars.values();
        let per_token = n_positions * n_filters;
        // A few tasks a thread at least.
        let tokens = (BUFFER_BYTES / (4 * per_token))
            .min(n_tokens.div_ceil(4 * rayon::current_num_threads()))
            .max(1);
        let token_values = n_slots * d_char;
        // Tokens `first..` of a task: their windows (one row each, a contiguous run of their
        // chars) times the weight, each token's values reduced over its positions.
        let task = |(windows, values): &mut (Vec<f32>, Vec<f32>),
                    first: usize,
                    pooled: &mut [f32],
                    mut positions: Option<&mut [u32]>| {
            let count = pooled.len() / n_filters;
            let rows = count * n_positions;
            windows.clear();
            for token in chars[first * token_values..]
                .chunks_exact(token_values)
                .take(count)
            {
                for p in 0..n_positions {
                    windows.extend_from_slice(&token[p * d_char..p * d_char + d_window]);
                }
            }
            values.resize(rows * n_filters, 0.0);
            packed.product(false, windows, d_window, rows, values, n_filters);
            for (t, pooled) in pooled.chunks_exact_mut(n_filters).enumerate() {
                let at = (positions.as_deref_mut()).map(|p| &mut p[t * n_filters..][..n_filters]);
                max_over_rows(&values[t * per_token..][..per_token], pooled, at);
            }
        };
        let buffers = || (Vec::new(), Vec::new());
        let pooled = pooled.values_mut().par_chunks_mut(tokens * n_filters);
        match with_positions {
            true => (pooled
                .zip(positions.par_chunks_mut(tokens * n_filters))
                .enumerate())
            .for_each_init(buffers, |buffers, (i, (pooled, positions))| {
                task(buffers, i * tokens, pooled, Some(positions))
            }),
            false => pooled
                .enumerate()
                .for_each_init(buffers, |buffers, (i, pooled)| {
                    task(buffers, i * tokens, pooled, None)
                }),
        }
    }
    Some(HostWindowMax {
        pooled: pooled.into_tensor(),
        positions: with_positions.then_some(positions),
    })
}

/// The gradients of [`host_window_max`] ([`host_window_max_backward`]).
#[derive(Debug, Clone)]
pub struct HostWindowGradients {
    /// `[width · E, F]`: the weight's, where asked for.
    pub weight: Option<Tensor<2>>,
    /// `[N, S, E]`: the chars', where asked for.
    pub chars: Option<Tensor<3>>,
}

/// Backpropagates `grad`, the gradient of [`host_window_max`]'s pooled values, through the
/// windows of its maxima (`positions`, [`HostWindowMax::positions`]), with the widest
/// instruction set up to `instructions`: each filter's gradient goes to the one window its max
/// came from, so the weight's gradient adds one window a token and filter (`Σ_t g_tf · window`)
/// and the chars' one column of the weight, where the dense products would add every window
/// times zero (`N · n_positions` rows where this reads `N`).
/// The gradients in a fixed order (tokens in order for each filter); `None` where a tensor is
/// not an `f32` flex tensor.
///
/// # Shapes
/// - chars: `[N, S, E]`; weight: `[width · E, F]`; positions, grad: `[N, F]`
///
/// # Panics
/// When the shapes disagree, or a position's window passes the slots.
pub fn host_window_max_backward(
    chars: &Tensor<3>,
    weight: &Tensor<2>,
    positions: &[u32],
    grad: &Tensor<2>,
    width: usize,
    (weight_grad, chars_grad): (bool, bool),
    instructions: HostInstructions,
) -> Option<HostWindowGradients> {
    let [n_tokens, n_slots, d_char] = chars.dims();
    let [d_window, n_filters] = weight.dims();
    assert_eq!(d_window, width * d_char, "a weight of width · d_char rows");
    assert_eq!(
        positions.len(),
        n_tokens * n_filters,
        "a position a token and filter"
    );
    assert_eq!(
        grad.dims(),
        [n_tokens, n_filters],
        "a gradient a token and filter"
    );
    // The weight's columns, `[F, width · E]` (a view: copied row-major where they are read).
    let (chars, columns, grad) = (
        HostTensor::of(chars)?.contiguous(),
        HostTensor::of(&weight.clone().transpose())?,
        HostTensor::of(grad)?.contiguous(),
    );
    let last = n_slots - width.min(n_slots);
    assert!(
        positions.iter().all(|&p| p as usize <= last),
        "positions of windows within the slots"
    );
    let pass = SparsePass {
        isa: Isa::at_most(instructions),
        chars: chars.values(),
        grad: grad.values(),
        positions,
        n_filters,
        token_values: n_slots * d_char,
        d_char,
        d_window,
    };
    let weight_grad = weight_grad.then(|| {
        // `[F, width · E]`: filter `f`'s row adds its gradient times its max's window, token
        // by token; blocks of filters shared among threads, each reading the tokens' rows of
        // the gradient and positions in order. Handed back as its transpose (a view).
        let mut transposed = HostTensor::zeros([n_filters, d_window]);
        let block = n_filters.div_ceil(4 * rayon::current_num_threads()).max(1);
        (transposed
            .values_mut()
            .par_chunks_mut(block * d_window)
            .enumerate())
        .for_each(|(b, rows)| pass.filter_sums(b * block, rows));
        transposed.into_tensor::<2>().transpose()
    });
    let chars_grad = chars_grad.then(|| {
        // Token `t`'s chars add, for each filter, its gradient times the filter's weights at the
        // slots of its max's window; the tokens shared among threads.
        let columns = columns.contiguous();
        let mut out = HostTensor::zeros([n_tokens, n_slots, d_char]);
        let tokens = n_tokens.div_ceil(4 * rayon::current_num_threads()).max(1);
        (out.values_mut()
            .par_chunks_mut(tokens * pass.token_values)
            .enumerate())
        .for_each(|(b, values)| pass.token_sums(b * tokens, columns.values(), values));
        out.into_tensor()
    });
    Some(HostWindowGradients {
        weight: weight_grad,
        chars: chars_grad,
    })
}

/// What [`host_window_max_backward`]'s loops read: the chars (`[N, S, E]`), the pooled values'
/// gradient and their windows' positions (`[N, F]`, row-major), for the instruction set
/// detected on this machine.
struct SparsePass<'a> {
    isa: Isa,
    chars: &'a [f32],
    grad: &'a [f32],
    positions: &'a [u32],
    n_filters: usize,
    token_values: usize,
    d_char: usize,
    d_window: usize,
}

impl SparsePass<'_> {
    /// Rows `first..` of the weight's transposed gradient (`rows`: whole rows of `width · E`):
    /// each filter's gradient times its max's window, summed over the tokens in order.
    fn filter_sums(&self, first: usize, rows: &mut [f32]) {
        match self.isa {
            // SAFETY: `isa` was detected on this machine.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { filter_sums_avx512(self, first, rows) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { filter_sums_avx2(self, first, rows) },
            Isa::Portable => filter_sums(self, first, rows, add_scaled),
        }
    }

    /// The chars' gradient of tokens `first..` (`tokens`: whole tokens of `S · E` values):
    /// each filter's gradient times its weights (`columns`: `[F, width · E]`) at its max's
    /// window, filters in order; blocks of filters whose weights stay in L1 while the tokens
    /// pass.
    fn token_sums(&self, first: usize, columns: &[f32], tokens: &mut [f32]) {
        match self.isa {
            // SAFETY: `isa` was detected on this machine.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { token_sums_avx512(self, first, columns, tokens) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { token_sums_avx2(self, first, columns, tokens) },
            Isa::Portable => token_sums(self, first, columns, tokens, add_scaled),
        }
    }
}

/// `y += g · x` in plain code (what the target compiles to by default: fused where it has an
/// FMA, as AArch64 does).
#[inline(always)]
fn add_scaled(y: &mut [f32], g: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = mul_add::<PORTABLE_FMA>(g, x, *y);
    }
}

#[inline(always)]
fn filter_sums(
    pass: &SparsePass,
    first: usize,
    rows: &mut [f32],
    add: impl Fn(&mut [f32], f32, &[f32]),
) {
    let (n_filters, d_window) = (pass.n_filters, pass.d_window);
    let count = rows.len() / d_window;
    let tokens = (pass.grad.chunks_exact(n_filters)).zip(pass.positions.chunks_exact(n_filters));
    for (t, (grad, positions)) in tokens.enumerate() {
        let token = &pass.chars[t * pass.token_values..][..pass.token_values];
        let (grad, positions) = (
            &grad[first..first + count],
            &positions[first..first + count],
        );
        for ((row, &g), &p) in rows.chunks_exact_mut(d_window).zip(grad).zip(positions) {
            let start = p as usize * pass.d_char;
            add(row, g, &token[start..start + d_window]);
        }
    }
}

#[inline(always)]
fn token_sums(
    pass: &SparsePass,
    first: usize,
    columns: &[f32],
    tokens: &mut [f32],
    add: impl Fn(&mut [f32], f32, &[f32]),
) {
    let (n_filters, d_window) = (pass.n_filters, pass.d_window);
    let block = (FILTER_BLOCK_BYTES / (4 * d_window)).max(1);
    for filters in (0..n_filters).step_by(block) {
        let filters = filters..(filters + block).min(n_filters);
        let columns = &columns[filters.start * d_window..filters.end * d_window];
        for (i, token) in tokens.chunks_exact_mut(pass.token_values).enumerate() {
            let at = (first + i) * n_filters;
            let grad = &pass.grad[at + filters.start..at + filters.end];
            let positions = &pass.positions[at + filters.start..at + filters.end];
            for ((column, &g), &p) in columns.chunks_exact(d_window).zip(grad).zip(positions) {
                let start = p as usize * pass.d_char;
                add(&mut token[start..start + d_window], g, column);
            }
        }
    }
}

/// Bytes of the filters' weights that [`token_sums`] applies to a task's tokens before the
/// next block (in L1 with a token's values).
const FILTER_BLOCK_BYTES: usize = 16 * 1024;

/// The loops of [`SparsePass`] compiled for an instruction set, `y += g · x` in its vectors
/// (explicitly: left to itself, the compiler vectorises the loop over the filters instead,
/// with gathers and scatters).
macro_rules! sparse_loops_for {
    ($filters:ident, $tokens:ident, $add:ident, $features:literal, $lanes:literal,
     $set1:ident, $load:ident, $fmadd:ident, $store:ident) => {
        /// `y += g · x`, a vector at a time, the rest one value at a time.
        ///
        /// # Safety
        #[doc = concat!("`", $features, "` present.")]
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $add(y: &mut [f32], g: f32, x: &[f32]) {
            use std::arch::x86_64::*;
            let n = y.len().min(x.len());
            let vectors = n / $lanes * $lanes;
            let scale = $set1(g);
            for i in (0..vectors).step_by($lanes) {
                // SAFETY: `i + lanes <= n`, within both slices.
                unsafe {
                    let sum = $fmadd($load(x.as_ptr().add(i)), scale, $load(y.as_ptr().add(i)));
                    $store(y.as_mut_ptr().add(i), sum);
                }
            }
            for (y, &x) in y[vectors..n].iter_mut().zip(&x[vectors..n]) {
                *y = x.mul_add(g, *y);
            }
        }

        /// # Safety
        #[doc = concat!("`", $features, "` present.")]
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $filters(pass: &SparsePass, first: usize, rows: &mut [f32]) {
            // SAFETY: the features are enabled here.
            filter_sums(pass, first, rows, |y, g, x| unsafe { $add(y, g, x) })
        }

        /// # Safety
        #[doc = concat!("`", $features, "` present.")]
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $tokens(pass: &SparsePass, first: usize, columns: &[f32], tokens: &mut [f32]) {
            // SAFETY: the features are enabled here.
            token_sums(pass, first, columns, tokens, |y, g, x| unsafe {
                $add(y, g, x)
            })
        }
    };
}

sparse_loops_for!(
    filter_sums_avx512,
    token_sums_avx512,
    add_scaled_avx512,
    "avx512f,fma",
    16,
    _mm512_set1_ps,
    _mm512_loadu_ps,
    _mm512_fmadd_ps,
    _mm512_storeu_ps
);
sparse_loops_for!(
    filter_sums_avx2,
    token_sums_avx2,
    add_scaled_avx2,
    "avx2,fma",
    8,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_fmadd_ps,
    _mm256_storeu_ps
);

/// Each column's max over the rows of `values` (`[rows, F]` row-major) into `max`, with the
/// first row of it in `argmax`: a NaN wins and stays (burn's `max_dim` and
/// `max_dim_with_indices` on flex).
fn max_over_rows(values: &[f32], max: &mut [f32], argmax: Option<&mut [u32]>) {
    let n = max.len();
    let mut rows = values.chunks_exact(n);
    max.copy_from_slice(rows.next().expect("one position or more"));
    match argmax {
        None => {
            for row in rows {
                for (m, &v) in max.iter_mut().zip(row) {
                    *m = if takes(v, *m) { v } else { *m };
                }
            }
        }
        Some(argmax) => {
            argmax.fill(0);
            for (p, row) in rows.enumerate() {
                let p = p as u32 + 1;
                for ((m, a), &v) in max.iter_mut().zip(argmax.iter_mut()).zip(row) {
                    let take = takes(v, *m);
                    *m = if take { v } else { *m };
                    *a = if take { p } else { *a };
                }
            }
        }
    }
}

/// Whether `value` replaces the running max `max`: larger, or NaN over a number (without
/// branches, so that the loops above run as vector compares and blends).
#[inline(always)]
fn takes(value: f32, max: f32) -> bool {
    #[allow(clippy::eq_op)]
    let (value_nan, max_number) = (value != value, max == max);
    ((value > max) | value_nan) & max_number
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution, Int, TensorData, Tolerance};

    /// Positions as burn's indices.
    fn positions_of(positions: &[u32]) -> Vec<i64> {
        positions.iter().map(|&p| i64::from(p)).collect()
    }

    /// Whole numbers from -3 to 3 (as `f32`): every window's product with a weight of them is
    /// exact, whatever order a kernel adds in, so the host's positions and burn's can be
    /// compared exactly (with normal values, on rare draws two windows within rounding of each
    /// other made the two kernels pick different ones).
    fn small_integers<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
        Tensor::<D>::random(shape, Distribution::Uniform(-3.0, 4.0), device).floor()
    }

    /// An index tensor's values.
    fn host(indices: Tensor<3, Int>) -> Option<Vec<i64>> {
        indices
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .ok()
    }

    /// burn's convolution of the windows and max over positions, with the positions.
    fn reference(
        chars: &Tensor<3>,
        weight: &Tensor<2>,
        width: usize,
        n_positions: usize,
    ) -> (Tensor<2>, Tensor<3, Int>) {
        let [n_tokens, _, d_char] = chars.dims();
        let windows: Vec<Tensor<3>> = (0..n_positions)
            .map(|p| {
                chars
                    .clone()
                    .narrow(1, p, width)
                    .reshape([n_tokens, 1, width * d_char])
            })
            .collect();
        let windows = Tensor::cat(windows, 1).reshape([n_tokens * n_positions, width * d_char]);
        let n_filters = weight.dims()[1];
        let values = windows
            .matmul(weight.clone())
            .reshape([n_tokens, n_positions, n_filters]);
        let (max, argmax) = values.max_dim_with_indices(1);
        (max.reshape([n_tokens, n_filters]), argmax)
    }

    /// The host's max equals burn's, with its positions (`whole_number_windows_equal_burns`);
    /// ties keep the first position and a NaN wins (burn's `max_dim_with_indices`); not under
    /// autodiff; for every instruction set this CPU has.
    #[test]
    fn window_max_equals_burns() {
        for limit in HostInstructions::EVERY {
            window_max_equals_burns_with(limit);
        }
    }

    /// Whole-number chars and weights (exact in `bf16` too, their sums exact in `f32`) over
    /// several tokens a task and one token over several tasks, fewer positions than the slots
    /// allow, a single position, filters past a panel: the host's maxima and their positions
    /// equal burn's in `precision`, and without positions the same maxima; `false` where the
    /// host max does not run (without the `flex` feature).
    fn whole_number_windows_equal_burns(limit: HostInstructions, precision: Precision) -> bool {
        let device = Device::flex();
        for (n_tokens, n_slots, d_char, width, n_positions, n_filters) in [
            (37, 50, 4, 3, 48, 45),
            (5, 50, 16, 7, 44, 1024),
            (9, 12, 3, 2, 5, 33),
            (4, 6, 2, 6, 1, 7),
        ] {
            let chars = small_integers([n_tokens, n_slots, d_char], &device);
            let weight = small_integers([width * d_char, n_filters], &device);
            let window_max = |positions| {
                host_window_max(
                    &chars,
                    &weight,
                    width,
                    n_positions,
                    positions,
                    limit,
                    precision,
                )
            };
            let got = window_max(true);
            assert_eq!(
                got.is_some(),
                cfg!(feature = "flex"),
                "flex runs the host max"
            );
            let Some(got) = got else {
                return false;
            };
            let (max, argmax) = reference(&chars, &weight, width, n_positions);
            let close = Tolerance::absolute(1e-4);
            got.pooled
                .into_data()
                .assert_approx_eq::<f32>(&max.clone().into_data(), close);
            let got_positions = got.positions.expect("positions asked for");
            assert_eq!(
                Some(positions_of(&got_positions)),
                host(argmax),
                "{limit:?} {precision:?}"
            );
            let without = window_max(false).expect("flex tensors");
            assert!(without.positions.is_none());
            without
                .pooled
                .into_data()
                .assert_approx_eq::<f32>(&max.into_data(), close);
        }
        true
    }

    fn window_max_equals_burns_with(limit: HostInstructions) {
        let device = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        if !whole_number_windows_equal_burns(limit, Precision::F32) {
            return;
        }
        // Equal windows (ties at every position), then a NaN char in token 1's third window.
        let mut values = vec![1.0f32; 2 * 8 * 2];
        values[8 * 2 + 2 * 2] = f32::NAN;
        let chars = Tensor::<3>::from_data(TensorData::new(values, [2, 8, 2]), &device);
        let weight = Tensor::<2>::from_data(TensorData::new(vec![1.0f32, -1.0], [2, 1]), &device);
        let got = host_window_max(&chars, &weight, 1, 8, true, limit, Precision::F32)
            .expect("flex tensors");
        let (_, want) = reference(&chars, &weight, 1, 8);
        let got_positions = positions_of(&got.positions.expect("positions"));
        assert_eq!(Some(got_positions.clone()), host(want), "as burn's");
        assert_eq!(
            got_positions,
            [0, 2],
            "the first of equal values; the first NaN"
        );
        let pooled = got.pooled.into_data().try_to_vec::<f32>().expect("f32");
        assert!(pooled[0] == 0.0 && pooled[1].is_nan(), "{pooled:?}");
        let without = host_window_max(&chars, &weight, 1, 8, false, limit, Precision::F32)
            .expect("flex tensors");
        let pooled = without.pooled.into_data().try_to_vec::<f32>().expect("f32");
        assert!(
            pooled[0] == 0.0 && pooled[1].is_nan(),
            "without positions: {pooled:?}"
        );
        let autodiff = Device::autodiff(device.clone());
        let chars = Tensor::<3>::random([2, 8, 2], normal, &autodiff);
        let weight = Tensor::<2>::random([2, 3], normal, &autodiff);
        assert!(host_window_max(&chars, &weight, 1, 8, false, limit, Precision::F32).is_none());
    }

    /// With [`Precision::Mixed`] the windows' products run in `bf16` where this CPU has a unit
    /// for them within the limit, else in `f32`: on whole numbers the maxima and their positions
    /// equal burn's either way (`whole_number_windows_equal_burns`); a value that
    /// `bf16` rounds (1 + 2⁻⁹ to 1) comes out rounded exactly where there is a unit.
    #[test]
    fn mixed_window_max_runs_in_bf16_where_the_cpu_has_a_unit() {
        use crate::Bf16Unit;
        let device = Device::flex();
        for limit in HostInstructions::EVERY {
            let mixed = Precision::Mixed;
            if !whole_number_windows_equal_burns(limit, mixed) {
                return;
            }
            let value = 1.0 + 2f32.powi(-9);
            let chars = Tensor::<3>::from_data(TensorData::new(vec![value; 4], [1, 4, 1]), &device);
            let weight = Tensor::<2>::from_data(TensorData::new(vec![1.0f32], [1, 1]), &device);
            let got = host_window_max(&chars, &weight, 1, 4, false, limit, mixed).expect("flex");
            let pooled = got.pooled.into_data().try_to_vec::<f32>().expect("f32");
            let want = match Bf16Unit::at_most(limit) {
                Some(_) => 1.0,
                None => value,
            };
            assert_eq!(pooled, [want], "{limit:?}");
        }
    }

    /// The sparse backward pass equals autodiff's through burn's windows, product and max:
    /// the weight's and the chars' gradients, for several widths and fewer positions than the
    /// slots allow, windows shorter than a vector and of several vectors and a tail (the
    /// vector loops), for every instruction set this CPU has.
    #[test]
    fn window_max_gradients_equal_autodiffs() {
        for limit in HostInstructions::EVERY {
            window_max_gradients_equal_autodiffs_with(limit);
        }
    }

    fn window_max_gradients_equal_autodiffs_with(limit: HostInstructions) {
        let device = Device::flex();
        let autodiff = Device::autodiff(device.clone());
        let normal = Distribution::Normal(0.0, 1.0);
        for (n_tokens, n_slots, d_char, width, n_positions, n_filters) in [
            (7, 12, 3, 3, 10, 40),
            (5, 20, 4, 1, 9, 33),
            (3, 9, 2, 5, 5, 17),
            (6, 14, 16, 3, 11, 20),
            (4, 16, 7, 5, 12, 9),
        ] {
            let chars = small_integers([n_tokens, n_slots, d_char], &device);
            let weight = small_integers([width * d_char, n_filters], &device);
            let grad = Tensor::<2>::random([n_tokens, n_filters], normal, &device);
            let forward = host_window_max(
                &chars,
                &weight,
                width,
                n_positions,
                true,
                limit,
                Precision::F32,
            );
            let Some(forward) = forward else {
                return;
            };
            let positions = forward.positions.expect("positions asked for");
            let both = (true, true);
            let got =
                host_window_max_backward(&chars, &weight, &positions, &grad, width, both, limit)
                    .expect("flex tensors");
            let tracked_chars = Tensor::<3>::from_data(chars.into_data(), &autodiff).require_grad();
            let tracked_weight =
                Tensor::<2>::from_data(weight.into_data(), &autodiff).require_grad();
            let (max, _) = reference(&tracked_chars, &tracked_weight, width, n_positions);
            let loss = (max * Tensor::<2>::from_data(grad.into_data(), &autodiff)).sum();
            let grads = loss.backward();
            let close = Tolerance::absolute(1e-4);
            let want_weight = tracked_weight.grad(&grads).expect("a weight gradient");
            let want_chars = tracked_chars.grad(&grads).expect("a chars gradient");
            (got.weight.expect("asked for").into_data())
                .assert_approx_eq::<f32>(&want_weight.into_data(), close);
            (got.chars.expect("asked for").into_data())
                .assert_approx_eq::<f32>(&want_chars.into_data(), close);
        }
    }
}
