//! The output softmax shared (tied) by the forward and backward LMs: full softmax, and the sampled
//! softmax of Jean et al. (2015) with TensorFlow's log-uniform candidate sampler, as bilm-tf
//! trains with `tf.nn.sampled_softmax_loss`.

use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Device, Int, Tensor, TensorData};
use elmo_kernels::{
    KernelSettings, RowReduction, SplitWeight, cube_softmax_rows, host_softmax_rows, product,
    reduce_rows, sum_columns, sum_groups, sum_row_groups, to_half,
};
use rand::Rng;

/// Configuration of a [`Softmax`].
#[derive(Debug, Clone)]
pub struct SoftmaxConfig {
    /// Vocabulary size (`V`).
    pub n_vocab: usize,
    /// Input width (`P`).
    pub d_input: usize,
}

impl SoftmaxConfig {
    /// bilm-tf's initialisation: weight ~ N(0, 1/√P), bias 0.
    pub fn init(&self, device: &Device) -> Softmax {
        let std = 1.0 / (self.d_input as f64).sqrt();
        Softmax {
            weight: Initializer::Normal { mean: 0.0, std }
                .init([self.n_vocab, self.d_input], device),
            bias: Initializer::Zeros.init([self.n_vocab], device),
            kernels: KernelSettings::default(),
        }
    }
}

/// `log p(w | h) = log_softmax(h · Wᵀ + b)_w`.
#[derive(Module, Debug)]
pub struct Softmax {
    /// `[V, P]` (bilm-tf's `softmax/W`).
    pub weight: Param<Tensor<2>>,
    /// `[V]`.
    pub bias: Param<Tensor<1>>,
    /// Which custom kernels the hand-written gradients run on a CubeCL device.
    #[module(skip)]
    pub kernels: KernelSettings,
}

/// Uploads vocabulary ids.
fn ids_tensor(ids: &[u32], device: &Device) -> Tensor<1, Int> {
    let values: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
    Tensor::from_data(TensorData::new(values, [ids.len()]), device)
}

/// Most logits materialised at once by the full softmax (bounds memory for large vocabularies).
const FULL_SOFTMAX_CHUNK: usize = 1 << 24;

/// Most logits in one chunk of [`Softmax::nll_with_gradients`] on a CPU: small enough to stay
/// allocated from step to step instead of coming fresh (zeroed) from the kernel each time.
const HAND_SOFTMAX_CHUNK: usize = 1 << 22;

/// The rows of each chunk of [`Softmax::nll_with_gradients`] over `n` rows of `n_candidates`
/// logits. On a CPU, [`HAND_SOFTMAX_CHUNK`] logits at most. On a CubeCL device, whose memory
/// pool keeps buffers from step to step, chunks as large as `kernels` lets one intermediate
/// buffer be ([`KernelSettings::rows_per_buffer`]) with four of them alive at once (the logits,
/// their exponentials, the gradient and a product's operand), in as few equal chunks as that
/// allows: a chunk runs ~30 kernels whatever its size, so fewer chunks launch fewer (at
/// `ptb-large.json` 256 × 35, 17,920 rows of 10,002 logits: 3 chunks where 4M logits made 43).
fn softmax_chunk_rows(
    like: &Tensor<2>,
    n: usize,
    n_candidates: usize,
    kernels: KernelSettings,
) -> usize {
    let most = match elmo_kernels::on_cube_device(like) {
        true => kernels.rows_per_buffer(like, 4 * n_candidates.max(1) * size_of::<f32>()),
        false => HAND_SOFTMAX_CHUNK / n_candidates.max(1),
    }
    .max(1);
    n.div_ceil(n.div_ceil(most).max(1)).max(1)
}

/// A softmax loss and its gradients for a training step, computed without autodiff.
#[derive(Debug, Clone)]
pub struct SoftmaxGradients {
    /// `[N]`: each row's NLL ([`Softmax::full_nll`] or [`Softmax::sampled_nll`]).
    pub nll: Tensor<1>,
    /// `[N, P]`: gradient of `Σ_i scale_i · nll_i` with respect to the rows.
    pub hidden: Tensor<2>,
    /// `[V, P]`: … with respect to the weight (`[U, P]`, the rows of `rows`, with `rows`).
    pub weight: Tensor<2>,
    /// `[V]`: … with respect to the bias (`[U]` with `rows`).
    pub bias: Tensor<1>,
    /// With row gradients ([`Softmax::nll_with_gradients`]'s `row_gradients`): the `U`
    /// vocabulary rows the gradients are of, ascending, the sampled candidates' and the
    /// targets' (the gradient is zero in every other row).
    pub rows: Option<Vec<u32>>,
}

/// The distinct values of `rows`, ascending, and the place of each of `rows` among them.
fn distinct_rows(rows: &[usize]) -> (Vec<u32>, Vec<usize>) {
    let mut distinct: Vec<u32> = rows.iter().map(|&row| row as u32).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let place = rows
        .iter()
        .map(|&row| distinct.partition_point(|&d| (d as usize) < row))
        .collect();
    (distinct, place)
}

/// Negative candidates of one step of the sampled softmax, with their log expected counts.
#[derive(Debug, Clone)]
pub struct SampledCandidates {
    /// Distinct sampled ids.
    pub ids: Vec<u32>,
    /// Number of draws it took to get them (TensorFlow's `num_tries`).
    pub n_tries: u64,
    /// Vocabulary size the sampler draws from.
    pub n_vocab: usize,
}

impl SampledCandidates {
    /// Probability of id `k` under the log-uniform (Zipfian) distribution over a frequency-sorted
    /// vocabulary: `(log(k + 2) − log(k + 1)) / log(V + 1)`.
    pub fn probability(k: u32, n_vocab: usize) -> f64 {
        let k = f64::from(k);
        ((k + 2.0) / (k + 1.0)).ln() / (n_vocab as f64 + 1.0).ln()
    }

    /// Draws `n_sampled` distinct ids (TensorFlow's `log_uniform_candidate_sampler` with
    /// `unique=True`: draw until that many distinct ids were seen).
    pub fn draw(n_sampled: usize, n_vocab: usize, rng: &mut impl Rng) -> Self {
        assert!(
            n_sampled < n_vocab,
            "cannot draw {n_sampled} distinct ids from {n_vocab}"
        );
        let log_range = (n_vocab as f64 + 1.0).ln();
        // One flag an id: ~25,000 tries for 8,192 of 50,000 ids, each a lookup.
        let mut seen = vec![false; n_vocab];
        let mut ids = Vec::with_capacity(n_sampled);
        let mut n_tries = 0u64;
        while ids.len() < n_sampled {
            n_tries += 1;
            let u: f64 = rng.random();
            let k =
                (((u * log_range).exp() as u64).saturating_sub(1)).min(n_vocab as u64 - 1) as u32;
            if !std::mem::replace(&mut seen[k as usize], true) {
                ids.push(k);
            }
        }
        Self {
            ids,
            n_tries,
            n_vocab,
        }
    }

    /// 1 for each of `targets` that is not a candidate, 0 for each that is.
    pub fn outside(&self, targets: &[u32]) -> Vec<f32> {
        let mut sampled = vec![false; self.n_vocab];
        for &k in &self.ids {
            sampled[k as usize] = true;
        }
        targets
            .iter()
            .map(|&t| match sampled.get(t as usize) {
                Some(true) => 0.0,
                _ => 1.0,
            })
            .collect()
    }

    /// `log E[count of k]` after `n_tries` draws with unique acceptance:
    /// `log(1 − (1 − p_k)^n_tries)`.
    pub fn log_expected_count(&self, k: u32) -> f32 {
        let p = Self::probability(k, self.n_vocab);
        let expected = -((self.n_tries as f64) * (-p).ln_1p()).exp_m1();
        expected.ln() as f32
    }
}

/// `log Σ_k exp(x_k)` of each row, `[N, 1]`; the row maximum, subtracted for stability, is a
/// constant to autodiff (it cancels in the gradient).
fn log_sum_exp(logits: Tensor<2>) -> Tensor<2> {
    let max = logits.clone().detach().max_dim(1);
    (logits - max.clone()).exp().sum_dim(1).log() + max
}

impl Softmax {
    /// `−log p(target)` of each row, with the full vocabulary:
    /// `logsumexp(h·Wᵀ + b) − (h·W_target + b_target)`.
    ///
    /// # Shapes
    /// - hidden: `[N, P]`; targets: `N` ids
    /// - output: `[N]`
    pub fn full_nll(&self, hidden: Tensor<2>, targets: &[u32]) -> Tensor<1> {
        let [n, _] = hidden.dims();
        let targets = ids_tensor(targets, &hidden.device());
        let n_vocab = self.weight.shape().dims::<2>()[0];
        let rows_per_chunk = (FULL_SOFTMAX_CHUNK / n_vocab.max(1)).max(1);
        let weight_t = self.weight.val().transpose();
        let bias = self.bias.val().unsqueeze_dim::<2>(0);
        let mut parts = Vec::with_capacity(n.div_ceil(rows_per_chunk));
        let mut start = 0;
        while start < n {
            let len = rows_per_chunk.min(n - start);
            let logits = hidden
                .clone()
                .narrow(0, start, len)
                .matmul(weight_t.clone())
                + bias.clone();
            let picked = logits.clone().gather(
                1,
                targets.clone().narrow(0, start, len).unsqueeze_dim::<2>(1),
            );
            parts.push((log_sum_exp(logits) - picked).reshape([len]));
            start += len;
        }
        if parts.is_empty() {
            return Tensor::zeros([0], &hidden.device());
        }
        Tensor::cat(parts, 0)
    }

    /// [`Self::full_nll`] (`candidates` `None`) or [`Self::sampled_nll`], and by hand the
    /// gradients of the weighted loss `Σ_i scale_i · nll_i`, outside autodiff: the training
    /// step's fast path. Rows are taken in chunks so that one chunk of logits exists at a time,
    /// its buffer turned into the probabilities and then into their gradient in place.
    ///
    /// Both losses have one form: the true logit `y_i` (corrected by `−log E[count]` when
    /// sampled) against the candidates' logits `z_ik` (every word, or the sampled ones), plus
    /// `y_i` itself when the target is not a candidate; `nll_i = lse_i − y_i`,
    /// `∂/∂z_ik = scale_i · softmax_ik`, `∂/∂y_i = scale_i · (p_true_i − 1)` with `p_true_i` = 0
    /// when the target is a candidate (its own `z` carries it).
    ///
    /// With `row_gradients`, a sampled step off a CubeCL device gives the weight's and bias's
    /// gradients as the rows it touched ([`SoftmaxGradients::rows`]: TensorFlow's
    /// `IndexedSlices`), not as the whole vocabulary's tables that are zero elsewhere: for an
    /// optimizer that leaves a row with a zero gradient as it is (Adagrad), the same update
    /// without a `[V, P]` gradient made, summed and walked each step.
    ///
    /// # Shapes
    /// - hidden: `[N, P]`; targets, scales: `N` values
    pub fn nll_with_gradients(
        &self,
        hidden: Tensor<2>,
        targets: &[u32],
        scales: &[f32],
        candidates: Option<&SampledCandidates>,
        row_gradients: bool,
    ) -> SoftmaxGradients {
        let n_candidates = candidates.map_or(self.weight.shape().dims::<2>()[0], |c| c.ids.len());
        let rows_per_chunk = softmax_chunk_rows(&hidden, targets.len(), n_candidates, self.kernels);
        let row_gradients = row_gradients && !elmo_kernels::on_cube_device(&hidden);
        self.nll_with_gradients_in_chunks(
            hidden,
            targets,
            scales,
            candidates,
            rows_per_chunk,
            row_gradients,
        )
    }

    fn nll_with_gradients_in_chunks(
        &self,
        hidden: Tensor<2>,
        targets: &[u32],
        scales: &[f32],
        candidates: Option<&SampledCandidates>,
        rows_per_chunk: usize,
        row_gradients: bool,
    ) -> SoftmaxGradients {
        let hidden = hidden.inner();
        let device = hidden.device();
        let [n, d] = hidden.dims();
        let weight = self.weight.val().inner();
        let bias = self.bias.val().inner();
        let [n_vocab, _] = weight.dims();
        let column = |values: Vec<f32>| {
            let n = values.len();
            Tensor::<2>::from_data(TensorData::new(values, [n, 1]), &device)
        };
        let correction = |ids: &[u32]| -> Vec<f32> {
            ids.iter()
                .map(|&k| candidates.map_or(0.0, |c| c.log_expected_count(k)))
                .collect()
        };
        // The candidates' weights and corrected biases.
        let (candidate_weight, candidate_bias) = match candidates {
            None => (weight.clone(), bias.clone()),
            Some(c) => {
                let ids = ids_tensor(&c.ids, &device);
                let corrected = bias.clone().select(0, ids.clone())
                    - column(correction(&c.ids)).reshape([c.ids.len()]);
                (weight.clone().select(0, ids), corrected)
            }
        };
        let candidate_weight_t = candidate_weight.clone().transpose();
        // `∂/∂z · W` has a long inner dimension (the candidates) and a small output: split
        // along it on a GPU (`split_product`), unless a vendor BLAS runs it.
        let kernels = self.kernels;
        let mode = kernels.product_mode(&weight);
        let candidate_product = SplitWeight::for_products(
            candidate_weight.clone(),
            kernels.split_for(&weight) && !mode.vendor_blas,
        )
        .prepared(mode);
        let candidate_bias = candidate_bias.unsqueeze_dim::<2>(0);
        // On flex, the logits' weight packed once for every chunk (the host kernel would pack
        // it again for each), and the weight's gradient accumulated transposed, `[P, S]`: a
        // wide product for the host kernel, where `∂/∂zᵀ · rows` has a few hundred columns.
        let on_host = kernels.host_for(&hidden);
        let logits_weight = on_host.then(|| {
            SplitWeight::for_products(candidate_weight_t.clone(), false)
                .on_host(kernels.product_mode(&hidden))
        });
        // The targets' weights, true logits and whether they are outside the candidates.
        let target_ids = ids_tensor(targets, &device);
        let target_weight = weight.select(0, target_ids.clone());
        let true_logits = (hidden.clone() * target_weight.clone()).sum_dim(1)
            + (bias.select(0, target_ids.clone()).reshape([n, 1]) - column(correction(targets)));
        let not_candidate = column(match candidates {
            None => vec![0.0; n],
            Some(c) => c.outside(targets),
        });
        let scales = column(scales.to_vec());

        let n_candidates = candidate_weight.dims()[0];
        let mut grad_candidate_weight = match on_host {
            true => Tensor::<2>::zeros([d, n_candidates], &device),
            false => Tensor::<2>::zeros([n_candidates, d], &device),
        };
        let mut grad_candidate_bias = Tensor::<1>::zeros([n_candidates], &device);
        let (mut nll, mut grad_hidden, mut grad_true) = (Vec::new(), Vec::new(), Vec::new());
        let mut start = 0;
        while start < n {
            let len = rows_per_chunk.min(n - start);
            let chunk = |t: &Tensor<2>| t.clone().narrow(0, start, len);
            let (rows, scale, y, outside) = (
                chunk(&hidden),
                chunk(&scales),
                chunk(&true_logits),
                chunk(&not_candidate),
            );
            let logits = match &logits_weight {
                Some(weight) => weight.left_product(rows.clone()),
                None => product(rows.clone(), candidate_weight_t.clone(), kernels),
            };
            // ∂/∂y = scale · (p_true − 1); ∂/∂z = scale · softmax: one pass a row on flex (in
            // the logits' buffer, `host_softmax_rows`), one kernel on a CubeCL device
            // (`cube_softmax_rows`), burn's operations elsewhere.
            let fused = match kernels.fused_for(&logits) {
                true => cube_softmax_rows(&logits, &candidate_bias, &y, &outside, &scale),
                false => None,
            };
            let (grad_logits, dy) = if let Some(rows) = fused {
                nll.push(rows.nll);
                (rows.gradient, rows.true_gradient)
            } else if kernels.host_for(&logits) {
                let rows = host_softmax_rows(logits, &candidate_bias, &y, &outside, &scale)
                    .expect("flex tensors (KernelSettings::host_for)");
                nll.push(rows.nll);
                (rows.gradient, rows.true_gradient)
            } else {
                let logits = logits + candidate_bias.clone();
                let max =
                    reduce_rows(logits.clone(), RowReduction::Max, kernels).max_pair(y.clone());
                let exp = (logits - max.clone()).exp();
                let true_exp = (y.clone() - max.clone()).exp() * outside;
                let sum = reduce_rows(exp.clone(), RowReduction::Sum, kernels) + true_exp.clone();
                nll.push((sum.clone().log() + max - y).reshape([len]));
                let per_sum = scale.clone() / sum;
                (exp * per_sum.clone(), true_exp * per_sum - scale)
            };
            // In 16 bits once for its two products (each would cast it); the bias gradient sums
            // the `f32` values.
            let logits_factor = to_half(grad_logits.clone(), mode.half);
            grad_hidden.push(
                candidate_product.left_product(logits_factor.clone())
                    + chunk(&target_weight) * dy.clone(),
            );
            grad_candidate_bias = grad_candidate_bias + sum_columns(grad_logits, kernels);
            grad_candidate_weight = grad_candidate_weight
                + match on_host {
                    true => product(rows.transpose(), logits_factor, kernels),
                    false => product(logits_factor.transpose(), rows, kernels),
                };
            grad_true.push(dy);
            start += len;
        }
        if on_host {
            grad_candidate_weight = grad_candidate_weight.transpose();
        }
        let cat = |parts: Vec<Tensor<2>>, width: usize| match parts.is_empty() {
            true => Tensor::zeros([0, width], &device),
            false => Tensor::cat(parts, 0),
        };
        let grad_true = cat(grad_true, 1);
        // The true logits' share goes row by row into their targets' rows, the candidates'
        // into theirs: sums by vocabulary row in a fixed order (repeated targets add up).
        let target_rows: Vec<usize> = targets.iter().map(|&t| t as usize).collect();
        let grad_true_weight = hidden * grad_true.clone();
        let grad_true_bias = grad_true.reshape([n]);
        let (grad_weight, grad_bias, rows) = match candidates {
            None => (
                grad_candidate_weight
                    + sum_row_groups(grad_true_weight, &target_rows, n_vocab, kernels),
                grad_candidate_bias + sum_groups(grad_true_bias, &target_rows, n_vocab, kernels),
                None,
            ),
            Some(c) => {
                let rows: Vec<usize> = (c.ids.iter().map(|&k| k as usize))
                    .chain(target_rows)
                    .collect();
                // Each vocabulary row's sum, into its place among the rows touched or into
                // the whole table: the same additions in the same order.
                let (group_of, n_groups, distinct) = match row_gradients {
                    true => {
                        let (distinct, place) = distinct_rows(&rows);
                        (place, distinct.len(), Some(distinct))
                    }
                    false => (rows, n_vocab, None),
                };
                (
                    sum_row_groups(
                        Tensor::cat(vec![grad_candidate_weight, grad_true_weight], 0),
                        &group_of,
                        n_groups,
                        kernels,
                    ),
                    sum_groups(
                        Tensor::cat(vec![grad_candidate_bias, grad_true_bias], 0),
                        &group_of,
                        n_groups,
                        kernels,
                    ),
                    distinct,
                )
            }
        };
        SoftmaxGradients {
            nll: match nll.is_empty() {
                true => Tensor::zeros([0], &device),
                false => Tensor::cat(nll, 0),
            },
            hidden: cat(grad_hidden, d),
            weight: grad_weight,
            bias: grad_bias,
            rows,
        }
    }

    /// The sampled-softmax loss of each row: the true class against the `candidates`, every
    /// logit corrected by `−log E[count]`, candidates equal to the target removed ("accidental
    /// hits"), as `tf.nn.sampled_softmax_loss(remove_accidental_hits=True)`.
    ///
    /// A hit's corrected logit is the true class's own, so a row whose target was sampled
    /// sums the candidates alone, and any other row adds its true class: no `[N, S]` hit mask
    /// and no concatenation.
    ///
    /// # Shapes
    /// - hidden: `[N, P]`; targets: `N` ids
    /// - output: `[N]`
    pub fn sampled_nll(
        &self,
        hidden: Tensor<2>,
        targets: &[u32],
        candidates: &SampledCandidates,
    ) -> Tensor<1> {
        let device = hidden.device();
        let [n, _] = hidden.dims();
        let correction = |ids: &[u32]| {
            let values: Vec<f32> = ids
                .iter()
                .map(|&k| candidates.log_expected_count(k))
                .collect();
            Tensor::<1>::from_data(TensorData::new(values, [ids.len()]), &device)
        };
        let sampled_ids = ids_tensor(&candidates.ids, &device);
        let target_ids = ids_tensor(targets, &device);
        let not_sampled = candidates.outside(targets);
        let not_sampled = Tensor::<2>::from_data(TensorData::new(not_sampled, [n, 1]), &device);

        let weight = self.weight.val();
        let bias = self.bias.val();
        let true_logits = (hidden.clone() * weight.clone().select(0, target_ids.clone()))
            .sum_dim(1)
            + (bias.clone().select(0, target_ids) - correction(targets)).unsqueeze_dim::<2>(1);
        let sampled_logits = hidden.matmul(weight.select(0, sampled_ids.clone()).transpose())
            + (bias.select(0, sampled_ids) - correction(&candidates.ids)).unsqueeze_dim::<2>(0);
        let max = sampled_logits
            .clone()
            .detach()
            .max_dim(1)
            .max_pair(true_logits.clone().detach());
        let total = (sampled_logits - max.clone()).exp().sum_dim(1)
            + (true_logits.clone() - max.clone()).exp() * not_sampled;
        (total.log() + max - true_logits).reshape([n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::collections::HashSet;

    /// `ptb-large.json` at 256 × 35: 17,920 rows of 10,002 logits in equal chunks, of at most
    /// 4M logits on a CPU, on a GPU as large as the buffer budget allows (a quarter of it each).
    #[test]
    fn softmax_chunks_are_equal_and_larger_on_a_gpu() {
        let (n, vocab) = (17_920, 10_002);
        let cpu = Tensor::<2>::zeros([1, 1], &Device::flex());
        let all = KernelSettings::default();
        assert_eq!(
            softmax_chunk_rows(&cpu, n, vocab, all),
            417,
            "43 chunks of 4M logits"
        );
        assert_eq!(softmax_chunk_rows(&cpu, 10, vocab, all), 10);
        assert_eq!(softmax_chunk_rows(&cpu, 0, vocab, all), 1);
        let Some(gpu) =
            elmo_test_support::wgpu_device_or_skip("softmax_chunks_are_equal_and_larger_on_a_gpu")
        else {
            return;
        };
        let gpu = Tensor::<2>::zeros([1, 1], &gpu);
        // A budget below the device's own limit (lavapipe's is 128 MiB a buffer).
        let budget = KernelSettings {
            buffer_bytes: 4 * 1_000 * 4 * 600,
            ..all
        };
        assert_eq!(
            softmax_chunk_rows(&gpu, 1_790, 1_000, budget),
            597,
            "3 chunks of at most 600 rows"
        );
        let rows = softmax_chunk_rows(&gpu, n, vocab, all);
        assert!(rows > 417, "the device's own limit allows more: {rows}");
    }

    /// The draw is TensorFlow's unique log-uniform sampling, as a set of ids seen: the same ids
    /// in the same order and the same number of tries as with a `HashSet` (so runs resume and
    /// reproduce across versions), and `outside` flags the targets that were not drawn.
    #[test]
    fn the_draw_is_the_set_algorithms_and_outside_flags_the_rest() {
        for (seed, n_sampled, n_vocab) in [(3, 8192, 50_000), (9, 5, 7), (1, 99, 100)] {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let draws = SampledCandidates::draw(n_sampled, n_vocab, &mut rng);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let log_range = (n_vocab as f64 + 1.0).ln();
            let (mut seen, mut ids, mut n_tries) = (HashSet::new(), Vec::new(), 0u64);
            while ids.len() < n_sampled {
                n_tries += 1;
                let u: f64 = rng.random();
                let k = (((u * log_range).exp() as u64).saturating_sub(1)).min(n_vocab as u64 - 1);
                if seen.insert(k as u32) {
                    ids.push(k as u32);
                }
            }
            assert_eq!((&draws.ids, draws.n_tries), (&ids, n_tries));
            let targets: Vec<u32> = (0..n_vocab as u32).collect();
            let outside = draws.outside(&targets);
            for (k, flag) in targets.iter().zip(outside) {
                assert_eq!(flag == 0.0, seen.contains(k), "id {k}");
            }
        }
    }

    #[test]
    fn log_uniform_sampler_matches_its_distribution() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let n_vocab = 1000;
        let total: f64 = (0..n_vocab as u32)
            .map(|k| SampledCandidates::probability(k, n_vocab))
            .sum();
        assert!((total - 1.0).abs() < 1e-9);
        let draws = SampledCandidates::draw(100, n_vocab, &mut rng);
        let distinct: HashSet<u32> = draws.ids.iter().copied().collect();
        assert_eq!(distinct.len(), 100);
        assert!(draws.n_tries >= 100);
        // Frequent ids are nearly certain to be drawn; their expected count is then close to 1.
        assert!(distinct.contains(&0));
        assert!(draws.log_expected_count(0).exp() > 0.99);
        assert!(draws.log_expected_count(999).exp() < 0.1);
    }

    #[test]
    fn sampled_equals_full_when_every_other_id_is_a_candidate_with_count_one() {
        // With all ids as candidates and log E[count] = 0 for all, sampled == full softmax.
        let device = Device::flex();
        let softmax = SoftmaxConfig {
            n_vocab: 6,
            d_input: 4,
        }
        .init(&device);
        let hidden = Tensor::<2>::random([3, 4], burn::tensor::Distribution::Default, &device);
        let targets = [1u32, 4, 0];
        let full: f32 = softmax
            .full_nll(hidden.clone(), &targets)
            .sum()
            .into_scalar();
        // n_tries huge → every expected count is 1 → log correction 0.
        let candidates = SampledCandidates {
            ids: (0..6).collect(),
            n_tries: 1 << 40,
            n_vocab: 6,
        };
        let sampled: f32 = softmax
            .sampled_nll(hidden, &targets, &candidates)
            .sum()
            .into_scalar();
        assert!(
            (full - sampled).abs() < 1e-4,
            "full {full} sampled {sampled}"
        );
    }

    /// The hand-written gradients of both softmaxes equal autodiff's, with rows in chunks of 3
    /// (7 rows: 3 + 3 + 1), a target repeated across chunks, and (sampled) targets inside and
    /// outside the candidates. Tolerance 1e-5. On flex the chunks run `host_softmax_rows`.
    #[test]
    fn hand_written_softmax_gradients_equal_autodiff() {
        check_softmax_gradients(Device::flex(), 9);
        // On flex the host pass: rows of several of its 16 lanes and a remainder.
        check_softmax_gradients(Device::flex(), 41);
    }

    /// The same on wgpu (in CI: lavapipe), where the row adds are atomic scatters
    /// (`index_add`) and, with 512 words, `∂/∂z · W` is split along the vocabulary into 4
    /// slices (`split_product`).
    #[test]
    fn hand_written_softmax_gradients_equal_autodiff_on_wgpu() {
        if let Some(device) = elmo_test_support::wgpu_device_or_skip(
            "hand_written_softmax_gradients_equal_autodiff_on_wgpu",
        ) {
            assert_eq!(elmo_kernels::slices_for(512), 4);
            check_softmax_gradients(device.clone(), 9);
            check_softmax_gradients(device, 512);
        }
    }

    fn check_softmax_gradients(device: Device, n_vocab: usize) {
        let device = device.autodiff();
        let softmax = SoftmaxConfig {
            n_vocab,
            d_input: 4,
        }
        .init(&device);
        let hidden: Vec<f32> = (0..7 * 4).map(|i| (i as f32 * 0.9).sin()).collect();
        let targets = [2u32, 7, 0, 5, 2, 8, 2];
        let scales = [0.5f32, 0.1, 0.2, 0.3, 0.25, 0.05, 1.0];
        let hidden = Tensor::<2>::from_data(TensorData::new(hidden, [7, 4]), &device);
        let scale_tensor = Tensor::<1>::from_data(TensorData::new(scales.to_vec(), [7]), &device);
        // Targets 0 and 5 are sampled, 2, 7 and 8 are not.
        let sampled = SampledCandidates {
            ids: vec![0, 3, 5, 6],
            n_tries: 6,
            n_vocab,
        };
        for candidates in [None, Some(&sampled)] {
            let leaf = hidden.clone().require_grad();
            let expected_nll = match candidates {
                None => softmax.full_nll(leaf.clone(), &targets),
                Some(c) => softmax.sampled_nll(leaf.clone(), &targets, c),
            };
            let mut grads = (expected_nll.clone() * scale_tensor.clone())
                .sum()
                .backward();
            let got = softmax.nll_with_gradients_in_chunks(
                hidden.clone(),
                &targets,
                &scales,
                candidates,
                3,
                false,
            );
            let close = |name: &str, a: Tensor<1>, b: Tensor<1>| {
                let error: f32 = (a.inner() - b.inner()).abs().max().into_scalar();
                assert!(error < 1e-5, "{name} ({candidates:?}): {error}");
            };
            close("nll", expected_nll, got.nll);
            let flat = |t: Tensor<2>| t.reshape([-1]);
            let grad_hidden = leaf.grad_remove(&mut grads).unwrap();
            close("hidden", flat(grad_hidden), flat(got.hidden));
            let grad_weight = softmax.weight.val().grad_remove(&mut grads).unwrap();
            close("weight", flat(grad_weight), flat(got.weight.clone()));
            let grad_bias = softmax.bias.val().grad_remove(&mut grads).unwrap();
            close("bias", grad_bias, got.bias.clone());
            // Row gradients: the sampled step's touched rows of the same tables, bit for bit,
            // and zeros in every other row; the full softmax's tables as they were.
            let by_rows = softmax.nll_with_gradients_in_chunks(
                hidden.clone(),
                &targets,
                &scales,
                candidates,
                3,
                true,
            );
            let values = |t: Tensor<1>| t.into_data().try_to_vec::<f32>().unwrap();
            let (dense_weight, dense_bias) = (values(flat(got.weight)), values(got.bias));
            let (row_weight, row_bias) = (values(flat(by_rows.weight)), values(by_rows.bias));
            match (candidates, by_rows.rows) {
                (None, None) => {
                    assert_eq!((&row_weight, &row_bias), (&dense_weight, &dense_bias));
                }
                (Some(_), Some(rows)) => {
                    assert_eq!(rows, [0, 2, 3, 5, 6, 7, 8], "candidates and targets");
                    let mut weight = vec![0.0f32; n_vocab * 4];
                    let mut bias = vec![0.0f32; n_vocab];
                    for (place, &row) in rows.iter().enumerate() {
                        let row = row as usize;
                        weight[row * 4..row * 4 + 4]
                            .copy_from_slice(&row_weight[place * 4..place * 4 + 4]);
                        bias[row] = row_bias[place];
                    }
                    assert_eq!((weight, bias), (dense_weight, dense_bias), "{device:?}");
                }
                (_, rows) => panic!("rows {rows:?} for {candidates:?}"),
            }
            // No rows at all: empty losses, zero gradients.
            let empty = softmax.nll_with_gradients(
                Tensor::zeros([0, 4], &device),
                &[],
                &[],
                candidates,
                false,
            );
            assert_eq!(empty.nll.dims(), [0]);
            assert_eq!(empty.hidden.dims(), [0, 4]);
            let sum: f32 = empty.weight.abs().sum().into_scalar();
            assert_eq!(sum, 0.0);
        }
    }

    /// Both losses against a float64 host computation of their definitions (log-softmax over
    /// the vocabulary; the true logit against the non-hit candidates, all corrected by
    /// `−log E[count]`), with some targets sampled (accidental hits) and some not.
    #[test]
    fn losses_match_a_host_reference() {
        let device = Device::flex();
        let (n_vocab, d) = (9, 3);
        // Fixed weights (not the random initialisation), so that the test is deterministic.
        let weight: Vec<f32> = (0..n_vocab * d)
            .map(|i| (i as f32 * 0.7).cos() * 1.5)
            .collect();
        let bias: Vec<f64> = (0..n_vocab).map(|k| 0.1 * k as f64 - 0.3).collect();
        let softmax = Softmax {
            weight: Param::from_tensor(Tensor::from_data(
                TensorData::new(weight.clone(), [n_vocab, d]),
                &device,
            )),
            bias: Param::from_tensor(Tensor::from_data(
                TensorData::new(bias.iter().map(|&b| b as f32).collect(), [n_vocab]),
                &device,
            )),
            kernels: KernelSettings::default(),
        };
        let hidden: Vec<f32> = (0..4 * d).map(|i| (i as f32 * 1.3).sin() * 2.0).collect();
        let targets = [2u32, 7, 0, 5];
        let candidates = SampledCandidates {
            ids: vec![0, 3, 5, 6],
            n_tries: 6,
            n_vocab,
        };
        let logit = |row: usize, k: u32| -> f64 {
            (0..d)
                .map(|j| f64::from(hidden[row * d + j]) * f64::from(weight[k as usize * d + j]))
                .sum::<f64>()
                + bias[k as usize]
        };
        let log_sum_exp = |xs: &[f64]| {
            let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            max + xs.iter().map(|x| (x - max).exp()).sum::<f64>().ln()
        };
        let corrected =
            |row: usize, k: u32| logit(row, k) - f64::from(candidates.log_expected_count(k));
        let mut full_expected = 0.0;
        let mut sampled_expected = 0.0;
        let mut hits_kept = 0.0;
        for (row, &t) in targets.iter().enumerate() {
            let all: Vec<f64> = (0..n_vocab as u32).map(|k| logit(row, k)).collect();
            full_expected += log_sum_exp(&all) - logit(row, t);
            let mut against = vec![corrected(row, t)];
            against.extend(
                candidates
                    .ids
                    .iter()
                    .filter(|&&k| k != t)
                    .map(|&k| corrected(row, k)),
            );
            sampled_expected += log_sum_exp(&against) - corrected(row, t);
            let mut with_hits = vec![corrected(row, t)];
            with_hits.extend(candidates.ids.iter().map(|&k| corrected(row, k)));
            hits_kept += log_sum_exp(&with_hits) - corrected(row, t);
        }
        let hidden = Tensor::<2>::from_data(TensorData::new(hidden.clone(), [4, d]), &device);
        let full: f32 = softmax
            .full_nll(hidden.clone(), &targets)
            .sum()
            .into_scalar();
        let sampled: f32 = softmax
            .sampled_nll(hidden, &targets, &candidates)
            .sum()
            .into_scalar();
        assert!(
            (f64::from(full) - full_expected).abs() < 1e-4,
            "{full} {full_expected}"
        );
        assert!(
            (f64::from(sampled) - sampled_expected).abs() < 1e-4,
            "{sampled} {sampled_expected}"
        );
        // Removing the hits matters here (rows 2 and 3 have their target sampled).
        assert!(
            (hits_kept - sampled_expected).abs() > 0.1,
            "{hits_kept} {sampled_expected}"
        );
    }
}
