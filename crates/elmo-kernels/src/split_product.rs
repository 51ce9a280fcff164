//! Matrix products with a long inner dimension split into independent slices that are summed
//! afterwards (split-K), for the small per-step products of the LSTM recurrence and the
//! softmax's `∂/∂z · W` on a GPU (the char CNN's weight gradients use the same rule,
//! `char_cnn.rs`), and the LSTM's weight gradients, split over the batch's rows
//! (`transposed_product`).
//!
//! burn's CubeCL matmul (without its `autotune` feature) gives each cube a 64 × 128 block of the
//! output and walks the whole inner dimension K in it, so a step's `[64, 256]` output runs on
//! two cubes whatever K is. Profiled on an H200 through wgpu,
//! a cube's time grew with K at 0.45-0.9 µs per unit whatever the grid: `dz_t · Wᵀ`
//! (`[64, 4800]·[4800, 256]`, `ptb-large.json`) took 2.1 ms and the projection `[64, 1200]·[1200,
//! 256]` 0.95 ms, on 2 of the GPU's 132 multiprocessors: together 58% of a training step's GPU
//! time. Split into S slices of K, the product is one batched matmul of `2·S` cubes and a sum
//! over the slices, in a fixed order: inside the fused LSTM kernels that read the partial
//! products, one reduction kernel elsewhere.

use std::sync::Arc;

use burn::tensor::{DType, Tensor};

use crate::host_product::{HostPacked, grouped_product, pack_weight};
use crate::{KernelSettings, ProductMode, contiguous, half_product, to_half};

/// The least inner dimension of one slice.
const MIN_SLICE: usize = 128;
/// The most slices of one product.
const MAX_SLICES: usize = 32;

/// The slices that `k` is split into: the most slices (at most 32) that divide `k` into equal
/// slices of at least 128; 1 (no split) when `k` is below 256 or has no such divisor.
pub fn slices_for(k: usize) -> usize {
    slices_at_most(k, MAX_SLICES)
}

/// The most slices, at most `most` (and 32), that divide `k` into equal slices of at least 128;
/// 1 when there is no such divisor.
fn slices_at_most(k: usize, most: usize) -> usize {
    (2..=most.min(MAX_SLICES).min(k / MIN_SLICE))
        .rev()
        .find(|s| k.is_multiple_of(*s))
        .unwrap_or(1)
}

/// The output blocks of burn's CubeCL matmul (64 × 128 values per cube) that keep a GPU's
/// multiprocessors busy (an H100 has 132): [`slices_for_grid`] splits a product whose output
/// has fewer until it has about this many.
const BUSY_CUBES: usize = 256;

/// The slices of K for the G products `[B, K]·[K, N]` of a group run as one batched product,
/// chosen from their grid (inference, where B ranges from a few rows to thousands): 1 when
/// their output blocks already fill the device or `split` is off, else the fewest slices that
/// bring the blocks to 256, `BUSY_CUBES` (dividing K into equal slices of at least 128, at most
/// 32; the most there are when none does).
pub fn slices_for_grid(split: bool, n_groups: usize, rows: usize, k: usize, n: usize) -> usize {
    let blocks = n_groups * rows.div_ceil(64) * n.div_ceil(128);
    if !split || blocks >= BUSY_CUBES {
        return 1;
    }
    let wanted = BUSY_CUBES.div_ceil(blocks.max(1));
    (2..=MAX_SLICES.min(k / MIN_SLICE))
        .find(|s| *s >= wanted && k.is_multiple_of(*s))
        .unwrap_or_else(|| slices_for(k))
}

/// The most values of the partial results of a split over rows ([`slices_over_rows`]): 64 MiB
/// of `f32`.
const MAX_PARTIAL_VALUES: usize = 1 << 24;

/// The slices that `rows` rows are split into for a reduction over them to `width` values per
/// slice ([`transposed_product`], `cube_reduce::sum_columns`): when `split` (the caller's
/// [`KernelSettings::split_for`](crate::KernelSettings::split_for)), the most slices (at most 32) that divide the rows into equal slices of at
/// least 128 and keep the partial results within 64 MiB; 1 (whole) otherwise.
pub fn slices_over_rows(split: bool, rows: usize, width: usize) -> usize {
    match split {
        true => slices_at_most(rows, MAX_PARTIAL_VALUES / width.max(1)),
        false => 1,
    }
}

/// `lhsᵀ · rhs` over many rows: a weight's gradient, whose inner dimension is every row of a
/// batch (`T·B`, 17,920 at `ptb-small.json` 512 × 35) and whose output is a few cubes of
/// burn's matmul, each walking all the rows; also the LSTM's input gradient `∂z · W_xᵀ` as
/// `(∂zᵀ)ᵀ · W_xᵀ`, whose inner dimension is the gates (16,384 at `original`). Where `split`
/// (the caller runs on a CubeCL device with the fused kernels) the rows are split into
/// [`slices_over_rows`] slices: one batched product of `[S, M, N]` partial products, then
/// their sum.
///
/// `mode` ([`KernelSettings::product_mode`]): with its `half` (mixed precision) the factors are
/// multiplied in that 16-bit type and the partial products summed in `f32`; with a vendor BLAS
/// the product goes to it whole (cuBLAS splits K itself).
///
/// # Shapes
/// - lhs: `[R, M]`; rhs: `[R, N]`; output: `[M, N]`
pub fn transposed_product(
    lhs: Tensor<2>,
    rhs: Tensor<2>,
    split: bool,
    mode: ProductMode,
) -> Tensor<2> {
    let [rows, m] = lhs.dims();
    let n = rhs.dims()[1];
    let n_slices = slices_over_rows(split && !mode.vendor_blas, rows, m * n);
    if n_slices == 1 {
        return half_product(lhs.transpose(), rhs, mode);
    }
    let slice = rows / n_slices;
    half_product(
        lhs.reshape([n_slices, slice, m]).swap_dims(1, 2),
        rhs.reshape([n_slices, slice, n]),
        mode,
    )
    .sum_dim(0)
    .reshape([m, n])
}

/// The slices of an inner dimension `k`: [`slices_for`] it when `split` (the caller's
/// [`KernelSettings::split_for`](crate::KernelSettings::split_for)); 1 (whole) otherwise.
pub fn slices_when(split: bool, k: usize) -> usize {
    match split {
        true => slices_for(k),
        false => 1,
    }
}

/// How the left factor `[G·B, K]` of a group's products (G weights, one per block of B rows:
/// the two directions of a biLM layer, `lstm_backward`'s `LstmGroup`; G = 1 for one weight) is
/// laid out when K is split into S slices: `[G·S, B, K / S]`, group-major, slice `s` of group
/// `g` holding columns `s·K/S .. (s+1)·K/S` of the group's rows. The partial products are
/// `[G·S, B, N]` in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitLayout {
    /// G: the weights (blocks of rows).
    pub n_groups: usize,
    /// S: the slices of K per weight (1: whole).
    pub n_slices: usize,
}

impl SplitLayout {
    /// The split layout `[G·S, B, K / S]` of a `[G·B, K]` matrix.
    pub fn shape(&self, [rows, k]: [usize; 2]) -> [usize; 3] {
        [
            self.n_groups * self.n_slices,
            rows / self.n_groups,
            k / self.n_slices,
        ]
    }

    /// `x` `[G·B, K]` rearranged into this layout, `[G·S, B, K / S]` (a copy when split or
    /// grouped).
    pub fn arrange(&self, x: Tensor<2>) -> Tensor<3> {
        let [planes, batch, width] = self.shape(x.dims());
        x.reshape([self.n_groups, batch, self.n_slices, width])
            .swap_dims(1, 2)
            .reshape([planes, batch, width])
    }

    /// The inverse of [`Self::arrange`]: `[G·S, B, K / S]` back to `[G·B, K]`.
    pub fn gather(&self, x: Tensor<3>) -> Tensor<2> {
        let [_, batch, width] = x.dims();
        x.reshape([self.n_groups, self.n_slices, batch, width])
            .swap_dims(1, 2)
            .reshape([self.n_groups * batch, self.n_slices * width])
    }
}

/// Right-hand factors `[K, N]`, one per group of rows, prepared once for many products `x · W`
/// (one per time step).
#[derive(Clone, Debug)]
pub struct SplitWeight {
    factors: Factors,
    /// Whether the products may run through a vendor BLAS ([`ProductMode::vendor_blas`]).
    vendor_blas: bool,
}

/// The factors of a [`SplitWeight`].
#[derive(Clone, Debug)]
enum Factors {
    /// `[K, N]`: one weight, the products not split.
    Whole(Tensor<2>),
    /// `[G·S, K / S, N]`: the slices of K of each of G weights, group-major, contiguous (S = 1
    /// for several weights not split).
    Sliced {
        /// The slices.
        slices: Tensor<3>,
        /// G.
        n_groups: usize,
    },
    /// `[K, N]` per group, packed on the host for burn's flex backend
    /// ([`SplitWeight::on_host`]).
    Host(Arc<HostFactors>),
}

/// The weights of [`Factors::Host`]: packed, and as tensors for a left factor that the host
/// kernel cannot read.
#[derive(Debug)]
struct HostFactors {
    packed: Vec<HostPacked>,
    weights: Vec<Tensor<2>>,
}

impl SplitWeight {
    /// `weight` `[K, N]` in `n_slices` slices of K (`n_slices` divides K; 1 keeps it whole).
    pub fn new(weight: Tensor<2>, n_slices: usize) -> Self {
        Self::grouped(vec![weight], n_slices)
    }

    /// One weight `[K, N]` per group (all of one shape), each in `n_slices` slices of K
    /// (`n_slices` divides K; one weight and 1 slice keeps it whole).
    ///
    /// # Panics
    /// Without weights, with weights of different shapes, or when `n_slices` does not divide K.
    pub fn grouped(mut weights: Vec<Tensor<2>>, n_slices: usize) -> Self {
        let n_groups = weights.len();
        assert!(n_groups >= 1, "a split weight needs at least one weight");
        let [k, n] = weights[0].dims();
        assert!(
            weights.iter().all(|w| w.dims() == [k, n]),
            "the weights of a group differ in shape"
        );
        assert!(
            n_slices >= 1 && k.is_multiple_of(n_slices),
            "{n_slices} slices do not divide an inner dimension of {k}"
        );
        let shape = [n_groups * n_slices, k / n_slices, n];
        let factors = match (n_groups, n_slices) {
            (1, 1) => Factors::Whole(weights.remove(0)),
            // Contiguous once here: a transposed weight reshapes to a strided view, which the
            // matmul would otherwise repack at every product.
            (1, _) => Factors::Sliced {
                slices: contiguous(weights.remove(0).reshape(shape)),
                n_groups,
            },
            _ => Factors::Sliced {
                slices: Tensor::stack::<3>(weights, 0).reshape(shape),
                n_groups,
            },
        };
        Self {
            factors,
            vendor_blas: false,
        }
    }

    /// `weight` in the slices [`slices_when`] gives its inner dimension.
    pub fn for_products(weight: Tensor<2>, split: bool) -> Self {
        Self::for_group(vec![weight], split)
    }

    /// [`Self::grouped`] in the slices [`slices_when`] gives the weights' inner dimension.
    pub fn for_group(weights: Vec<Tensor<2>>, split: bool) -> Self {
        let n_slices = slices_when(split, weights.first().map_or(0, |w| w.dims()[0]));
        Self::grouped(weights, n_slices)
    }

    /// The layout of the products' left factors and partial products.
    pub fn layout(&self) -> SplitLayout {
        match &self.factors {
            Factors::Whole(_) => SplitLayout {
                n_groups: 1,
                n_slices: 1,
            },
            Factors::Sliced { slices, n_groups } => SplitLayout {
                n_groups: *n_groups,
                n_slices: slices.dims()[0] / n_groups,
            },
            Factors::Host(host) => SplitLayout {
                n_groups: host.packed.len(),
                n_slices: 1,
            },
        }
    }

    /// The slices of K (1 when whole).
    pub fn n_slices(&self) -> usize {
        self.layout().n_slices
    }

    /// `lhs · W` (each group's rows times its weight). Split, `lhs` is first rearranged into
    /// the split layout (on a GPU, copies: the fused LSTM kernels write their outputs in that
    /// layout instead, for [`split_left_partials`](Self::split_left_partials)). Weights in a
    /// 16-bit type ([`Self::prepared`]): the product in it, the result in `f32`.
    ///
    /// # Shapes
    /// - lhs: `[G·B, K]`; output: `[G·B, N]`
    pub fn left_product(&self, lhs: Tensor<2>) -> Tensor<2> {
        match &self.factors {
            Factors::Whole(whole) => {
                half_product(lhs.clone(), whole.clone(), self.mode_against(&lhs))
            }
            Factors::Sliced { .. } => {
                let SplitLayout { n_groups, n_slices } = self.layout();
                let partials = self.left_partials(lhs);
                let [_, batch, n] = partials.dims();
                let grouped = partials.reshape([n_groups, n_slices, batch, n]);
                let summed = match n_slices {
                    1 => grouped,
                    _ => grouped.sum_dim(1),
                };
                summed.reshape([n_groups * batch, n])
            }
            Factors::Host(host) => host.left_product(lhs),
        }
    }

    /// The partial products of `lhs · W` for `lhs` in the split layout ([`SplitLayout`];
    /// row-major `[1, B, K]` when whole): one batched matmul, `[G·S, B, N]`, whose sum over each
    /// group's S slices is the product. The fused LSTM kernels add them up as they read them.
    ///
    /// # Shapes
    /// - lhs: `[G·S, B, K / S]`; output: `[G·S, B, N]`
    ///
    /// Weights in a 16-bit type ([`Self::prepared`]): `lhs` is cast to it and the partial
    /// products back to `f32`.
    pub fn split_left_partials(&self, lhs: Tensor<3>) -> Tensor<3> {
        let [n_slices, batch, k_slice] = lhs.dims();
        let mode = self.mode_against(&lhs);
        match &self.factors {
            Factors::Whole(whole) => half_product(
                lhs.reshape([batch, n_slices * k_slice]),
                whole.clone(),
                mode,
            )
            .unsqueeze_dim(0),
            Factors::Sliced { slices, .. } => half_product(lhs, slices.clone(), mode),
            Factors::Host(host) => {
                let n = host.packed[0].n();
                let lhs = lhs.reshape([n_slices * batch, k_slice]);
                host.left_product(lhs).reshape([n_slices, batch, n])
            }
        }
    }

    /// The element type of these weights, in which their products' left factors are multiplied
    /// ([`Self::prepared`]): a kernel that writes a left factor writes it in this type, so that
    /// the product casts nothing.
    pub fn factor_dtype(&self) -> DType {
        match &self.factors {
            Factors::Whole(whole) => whole.dtype(),
            Factors::Sliced { slices, .. } => slices.dtype(),
            Factors::Host(_) => DType::F32,
        }
    }

    /// How products of `lhs` and these weights run ([`Self::prepared`]): in the weights' 16-bit
    /// type where they are in one (`lhs`, in `f32` or in that type, cast to it unless it is in
    /// it already; the result in `f32` either way), through a vendor BLAS where these weights
    /// allow it.
    fn mode_against<const D: usize>(&self, lhs: &Tensor<D>) -> ProductMode {
        let weight = self.factor_dtype();
        debug_assert!(
            lhs.dtype() == weight || lhs.dtype() == DType::F32,
            "a left factor in {:?} against weights in {weight:?}",
            lhs.dtype()
        );
        ProductMode {
            half: matches!(weight, DType::F16 | DType::BF16).then(|| weight.into()),
            vendor_blas: self.vendor_blas,
            // On the host these weights are packed once ([`Self::on_host`]), not per product.
            host: None,
            host_bf16: false,
        }
    }

    /// [`Self::split_left_partials`], where a whole (unsplit) product runs as
    /// [`crate::product`] runs a large one when `kernels.shaped_step_products` (inference: the
    /// kernel of its shape at 256 rows and more; a vendor BLAS only as these weights allow,
    /// [`KernelSettings::step_product_mode`]).
    ///
    /// # Shapes
    /// As [`Self::split_left_partials`].
    pub fn split_left_partials_in(&self, lhs: Tensor<3>, kernels: KernelSettings) -> Tensor<3> {
        match &self.factors {
            Factors::Whole(whole) if kernels.shaped_step_products => {
                let [n_slices, batch, k_slice] = lhs.dims();
                crate::product(
                    lhs.reshape([batch, n_slices * k_slice]),
                    whole.clone(),
                    KernelSettings {
                        vendor_blas: kernels.vendor_blas && self.vendor_blas,
                        ..kernels
                    },
                )
                .unsqueeze_dim(0)
            }
            _ => self.split_left_partials(lhs),
        }
    }

    /// These weights for the products of `mode` ([`KernelSettings::product_mode`]): in its
    /// 16-bit type where it has one ([`crate::Precision::Mixed`], the products' results in
    /// `f32`), through a vendor BLAS where it allows one.
    pub fn prepared(self, mode: ProductMode) -> Self {
        let factors = match self.factors {
            Factors::Whole(whole) => Factors::Whole(to_half(whole, mode.half)),
            Factors::Sliced { slices, n_groups } => Factors::Sliced {
                slices: to_half(slices, mode.half),
                n_groups,
            },
            // On a CPU, where 16-bit products do not run (`Precision::half_for`).
            host @ Factors::Host(_) => host,
        };
        Self {
            factors,
            vendor_blas: mode.vendor_blas,
        }
    }

    /// These weights packed for the host kernel (`host_product.rs`, the widest instruction set
    /// up to `mode.host`; rounded to `bf16` where `mode.host_bf16` and this CPU has a unit for
    /// it), where `mode.host` is `Some` and they are whole (not split) `f32` tensors of burn's
    /// flex backend outside autodiff (this crate's `flex` feature): each product then runs on
    /// rayon's threads with the weights packed once here, where flex's matmul packs them again
    /// at every product (a full copy of them per step: 32 MiB for `original`'s `W_h`).
    /// Unchanged otherwise.
    pub fn on_host(self, mode: ProductMode) -> Self {
        let Some(limit) = mode.host else {
            return self;
        };
        let weights: Vec<Tensor<2>> = match &self.factors {
            Factors::Whole(whole) => vec![whole.clone()],
            Factors::Sliced { slices, n_groups } if slices.dims()[0] == *n_groups => {
                let [_, k, n] = slices.dims();
                (0..*n_groups)
                    .map(|g| slices.clone().narrow(0, g, 1).reshape([k, n]))
                    .collect()
            }
            _ => return self,
        };
        let mut packed = Vec::with_capacity(weights.len());
        for weight in &weights {
            match pack_weight(weight.clone(), limit, mode.host_bf16) {
                Some(weight) => packed.push(weight),
                None => return self,
            }
        }
        Self {
            factors: Factors::Host(Arc::new(HostFactors { packed, weights })),
            ..self
        }
    }

    /// Each group's weight packed for the host kernel, where [`Self::on_host`] packed them.
    pub(crate) fn host_packed(&self) -> Option<&[HostPacked]> {
        match &self.factors {
            Factors::Host(host) => Some(&host.packed),
            _ => None,
        }
    }

    /// [`split_left_partials`](Self::split_left_partials) for a row-major `lhs` `[G·B, K]`
    /// (rearranged into the split layout first: a copy when split or grouped).
    pub fn left_partials(&self, lhs: Tensor<2>) -> Tensor<3> {
        self.split_left_partials(self.layout().arrange(lhs))
    }
}

impl HostFactors {
    /// `lhs · W`, each group's rows times its weight: through the host kernel where `lhs` is a
    /// flex tensor it reads in place, else burn's matmul.
    ///
    /// # Shapes
    /// - lhs: `[G·B, K]`; output: `[G·B, N]`
    fn left_product(&self, lhs: Tensor<2>) -> Tensor<2> {
        if let Some(out) = grouped_product(&self.packed, &lhs) {
            return out;
        }
        let batch = lhs.dims()[0] / self.weights.len();
        let parts = (self.weights.iter().enumerate())
            .map(|(g, w)| lhs.clone().narrow(0, g * batch, batch).matmul(w.clone()))
            .collect();
        Tensor::cat(parts, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Distribution, Tolerance};

    use elmo_test_support::flex_and_wgpu;

    #[test]
    fn slices_divide_k_into_slices_of_at_least_128() {
        // ptb-large (4C = 4800, C = 1200), ptb-small (1792, 448), small (4096, 1024), original.
        let cases = [
            (4800, 32),
            (1200, 8),
            (1792, 14),
            (448, 2),
            (4096, 32),
            (1024, 8),
            (16384, 32),
            (256, 2),
            (255, 1),
            (130, 1),
            (0, 1),
        ];
        for (k, expected) in cases {
            assert_eq!(slices_for(k), expected, "k = {k}");
        }
        // A prime above 256 has no divisor: kept whole.
        assert_eq!(slices_for(257), 1);
    }

    #[test]
    fn small_grids_are_split_until_they_fill_the_device() {
        // `original` (C = 4096, P = 512), both directions: the state product's 256 blocks at 64
        // rows fill the device, the projection's 8 are split into 32 slices of 128.
        assert_eq!(slices_for_grid(true, 2, 64, 512, 16384), 1);
        assert_eq!(slices_for_grid(true, 2, 64, 4096, 512), 32);
        assert_eq!(slices_for_grid(true, 2, 256, 4096, 512), 8);
        assert_eq!(slices_for_grid(true, 2, 1024, 4096, 512), 2);
        // `small` (C = 1024, P = 128) at 64 rows: 2 blocks want 128 slices; K allows 8.
        assert_eq!(slices_for_grid(true, 2, 64, 1024, 128), 8);
        // Off, or K too short to split.
        assert_eq!(slices_for_grid(false, 2, 64, 4096, 512), 1);
        assert_eq!(slices_for_grid(true, 1, 8, 200, 16), 1);
    }

    #[test]
    fn split_products_equal_the_whole_product() {
        let devices = flex_and_wgpu("split_products_equal_the_whole_product");
        // Sums of 600 products of N(0, 1) values reach ~80 in another order of additions: 1e-4
        // was within their rounding (a run failed by 1.1e-4); a lost or repeated slice is ~10.
        for device in devices {
            let lhs = Tensor::<2>::random([5, 600], Distribution::Normal(0.0, 1.0), &device);
            let weight = Tensor::<2>::random([600, 7], Distribution::Normal(0.0, 1.0), &device);
            let expected = lhs.clone().matmul(weight.clone()).into_data();
            for n_slices in [1, 2, 4, 5] {
                let split = SplitWeight::new(weight.clone(), n_slices);
                split
                    .left_product(lhs.clone())
                    .into_data()
                    .assert_approx_eq::<f32>(&expected, Tolerance::absolute(1e-3));
            }
            // A transposed (strided) weight and a row of a larger tensor, as in the LSTM loop.
            let transposed = weight.clone().transpose().transpose();
            let rows = Tensor::cat(vec![lhs.clone(), lhs.clone()], 0).narrow(0, 5, 5);
            SplitWeight::new(transposed, 4)
                .left_product(rows)
                .into_data()
                .assert_approx_eq::<f32>(&expected, Tolerance::absolute(1e-3));
        }
    }

    /// A whole step product through the kernel of its shape (`shaped_step_products`) equals
    /// burn's, on wgpu where that kernel runs and on a CPU where `product` keeps burn's.
    #[test]
    fn a_shaped_step_product_equals_the_plain_one() {
        for device in flex_and_wgpu("a_shaped_step_product_equals_the_plain_one") {
            let normal = Distribution::Normal(0.0, 1.0);
            let state = Tensor::<3>::random([1, 260, 300], normal, &device);
            let weight = SplitWeight::new(Tensor::<2>::random([300, 270], normal, &device), 1);
            let expected = weight.split_left_partials(state.clone()).into_data();
            let shaped = KernelSettings {
                shaped_step_products: true,
                ..KernelSettings::ALL
            };
            weight
                .split_left_partials_in(state, shaped)
                .into_data()
                .assert_approx_eq::<f32>(&expected, Tolerance::absolute(1e-3));
        }
    }

    #[test]
    fn row_slices_divide_the_rows_and_bound_the_partial_results() {
        // LSTM weight gradients at ptb-small.json 512 × 35 (17,920 rows), ptb-large.json 64 × 35
        // (2,240 rows), a state weight of ptb-large ([1200, 4800]: 2 slices of 5.8M values),
        // too few rows, a prime number of rows, and not split.
        let cases = [
            (true, 17_920, 448 * 256, 32),
            (true, 2_240, 256 * 4_800, 10),
            (true, 2_240, 1_200 * 4_800, 2),
            (true, 255, 10, 1),
            (true, 1_031, 10, 1),
            (false, 17_920, 10, 1),
        ];
        for (split, rows, width, expected) in cases {
            assert_eq!(
                slices_over_rows(split, rows, width),
                expected,
                "{rows} rows of {width}"
            );
        }
    }

    #[test]
    fn transposed_products_equal_the_whole_product() {
        let devices = flex_and_wgpu("transposed_products_equal_the_whole_product");
        for device in devices {
            let lhs = Tensor::<2>::random([1_536, 9], Distribution::Normal(0.0, 1.0), &device);
            let rhs = Tensor::<2>::random([1_536, 5], Distribution::Normal(0.0, 1.0), &device);
            let expected = lhs.clone().transpose().matmul(rhs.clone()).into_data();
            assert_eq!(slices_over_rows(true, 1_536, 45), 12);
            for split in [false, true] {
                transposed_product(lhs.clone(), rhs.clone(), split, ProductMode::F32)
                    .into_data()
                    .assert_approx_eq::<f32>(&expected, Tolerance::absolute(1e-3));
                // In f16 (wgpu only; none on a CPU): sums of 1,536 products of ~1, each
                // factor rounded to 11 bits.
                let half = crate::Precision::Mixed.half_for(&lhs);
                if half.is_some() {
                    let mode = ProductMode {
                        half,
                        vendor_blas: false,
                        host: None,
                        host_bf16: false,
                    };
                    let mixed = transposed_product(lhs.clone(), rhs.clone(), split, mode);
                    assert_eq!(mixed.dtype(), burn::tensor::DType::F32);
                    mixed
                        .into_data()
                        .assert_approx_eq::<f32>(&expected, Tolerance::absolute(0.1));
                }
            }
        }
    }
}
