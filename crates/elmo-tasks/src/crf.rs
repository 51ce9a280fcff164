//! A linear-chain conditional random field over tag scores (Lample et al. 2016, the tagger of
//! Peters et al. 2018 §5.1): negative log-likelihood with the forward algorithm, Viterbi decoding.

use burn::module::{Module, Param};
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Configuration of a [`Crf`].
#[derive(Debug, Clone)]
pub struct CrfConfig {
    /// Number of tags (`K`).
    pub n_tags: usize,
}

impl CrfConfig {
    /// A CRF with zero transition, start and end scores.
    pub fn init(&self, device: &Device) -> Crf {
        let k = self.n_tags;
        Crf {
            transitions: Param::from_tensor(Tensor::zeros([k, k], device)),
            start: Param::from_tensor(Tensor::zeros([k], device)),
            end: Param::from_tensor(Tensor::zeros([k], device)),
        }
    }
}

/// Transition scores `[from, to]` and start / end scores.
#[derive(Module, Debug)]
pub struct Crf {
    /// `[K, K]`: score of tag `j` following tag `i`.
    pub transitions: Param<Tensor<2>>,
    /// `[K]`: score of starting with a tag.
    pub start: Param<Tensor<1>>,
    /// `[K]`: score of ending with a tag.
    pub end: Param<Tensor<1>>,
}

/// `log Σ exp` along `dim` (kept), stable.
fn log_sum_exp<const D: usize>(x: Tensor<D>, dim: usize) -> Tensor<D> {
    let max = x.clone().max_dim(dim).detach();
    (x - max.clone()).exp().sum_dim(dim).log() + max
}

fn int_tensor(values: Vec<i64>, device: &Device) -> Tensor<1, Int> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n]), device)
}

impl Crf {
    fn n_tags(&self) -> usize {
        self.start.shape().dims::<1>()[0]
    }

    /// Summed negative log-likelihood of the gold tags of a batch.
    ///
    /// # Shapes
    /// - emissions: `[B, T, K]`; `tags[b]` and `lengths[b]` (>= 1) cover row `b`'s real tokens
    /// - output: `[1]`
    pub fn nll(&self, emissions: Tensor<3>, tags: &[Vec<usize>], lengths: &[usize]) -> Tensor<1> {
        let device = emissions.device();
        let [batch, n_steps, k] = emissions.dims();
        // Partition function: alpha[b, j] = log Σ over paths ending in j.
        let transitions = self.transitions.val().unsqueeze_dim::<3>(0);
        let mut alpha = emissions.clone().narrow(1, 0, 1).reshape([batch, k])
            + self.start.val().unsqueeze_dim::<2>(0);
        for t in 1..n_steps {
            let emit = emissions.clone().narrow(1, t, 1).reshape([batch, k]);
            let next = log_sum_exp(alpha.clone().unsqueeze_dim::<3>(2) + transitions.clone(), 1)
                .reshape([batch, k])
                + emit;
            let active: Vec<f32> = lengths
                .iter()
                .map(|&l| f32::from(u8::from(l > t)))
                .collect();
            let active = Tensor::<2>::from_data(TensorData::new(active, [batch, 1]), &device);
            alpha = next * active.clone() + alpha * active.neg().add_scalar(1.0);
        }
        let log_z = log_sum_exp(alpha + self.end.val().unsqueeze_dim::<2>(0), 1).sum();
        // Score of the gold paths.
        let (mut emitted, mut moves, mut firsts, mut lasts) = (vec![], vec![], vec![], vec![]);
        for (b, (row, &len)) in tags.iter().zip(lengths).enumerate() {
            for t in 0..len {
                emitted.push(((b * n_steps + t) * k + row[t]) as i64);
                if t > 0 {
                    moves.push((row[t - 1] * k + row[t]) as i64);
                }
            }
            firsts.push(row[0] as i64);
            lasts.push(row[len - 1] as i64);
        }
        let mut gold = emissions
            .reshape([batch * n_steps * k])
            .select(0, int_tensor(emitted, &device))
            .sum()
            + self
                .start
                .val()
                .select(0, int_tensor(firsts, &device))
                .sum()
            + self.end.val().select(0, int_tensor(lasts, &device)).sum();
        if !moves.is_empty() {
            gold = gold
                + self
                    .transitions
                    .val()
                    .reshape([k * k])
                    .select(0, int_tensor(moves, &device))
                    .sum();
        }
        log_z - gold
    }

    /// The best tag sequence of every row (Viterbi, on the host).
    ///
    /// # Shapes
    /// - emissions: `[B, T, K]`
    pub fn viterbi(&self, emissions: Tensor<3>, lengths: &[usize]) -> Vec<Vec<usize>> {
        let [_, n_steps, k] = emissions.dims();
        let host = |t: Tensor<1>| t.into_data().try_to_vec::<f32>().unwrap_or_default();
        let scores = host(emissions.reshape([lengths.len() * n_steps * k]));
        let transitions = host(self.transitions.val().reshape([k * k]));
        let (start, end) = (host(self.start.val()), host(self.end.val()));
        debug_assert_eq!(start.len(), self.n_tags());
        lengths
            .iter()
            .enumerate()
            .map(|(b, &len)| {
                if len == 0 {
                    return Vec::new();
                }
                let emit = |t: usize, j: usize| scores[(b * n_steps + t) * k + j];
                let mut best: Vec<f32> = (0..k).map(|j| start[j] + emit(0, j)).collect();
                let mut back: Vec<Vec<usize>> = Vec::with_capacity(len);
                for t in 1..len {
                    let mut next = vec![f32::NEG_INFINITY; k];
                    let mut from = vec![0; k];
                    for j in 0..k {
                        for i in 0..k {
                            let s = best[i] + transitions[i * k + j];
                            if s > next[j] {
                                next[j] = s;
                                from[j] = i;
                            }
                        }
                        next[j] += emit(t, j);
                    }
                    back.push(from);
                    best = next;
                }
                let mut tag = (0..k)
                    .max_by(|&a, &c| (best[a] + end[a]).total_cmp(&(best[c] + end[c])))
                    .unwrap_or(0);
                let mut path = vec![tag];
                for from in back.iter().rev() {
                    tag = from[tag];
                    path.push(tag);
                }
                path.reverse();
                path
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path of a 3-token, 3-tag CRF enumerated: the NLL equals log Σ exp(score) − score(gold)
    /// and Viterbi finds the argmax.
    #[test]
    fn nll_and_viterbi_match_brute_force() {
        let device = Device::flex();
        let k = 3;
        let values: Vec<f32> = (0..9).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.3).collect();
        let trans: Vec<f32> = (0..9).map(|i| ((i * 4 % 7) as f32 - 3.0) * 0.2).collect();
        let crf = Crf {
            transitions: Param::from_tensor(Tensor::from_data(
                TensorData::new(trans.clone(), [k, k]),
                &device,
            )),
            start: Param::from_tensor(Tensor::from_data(
                TensorData::new(vec![0.1f32, -0.2, 0.3], [k]),
                &device,
            )),
            end: Param::from_tensor(Tensor::from_data(
                TensorData::new(vec![-0.1f32, 0.2, 0.0], [k]),
                &device,
            )),
        };
        let emissions =
            || Tensor::<3>::from_data(TensorData::new(values.clone(), [1, 3, k]), &device);
        let score = |p: &[usize]| {
            let s = [0.1f32, -0.2, 0.3][p[0]] + [-0.1f32, 0.2, 0.0][p[2]];
            s + (0..3).map(|t| values[t * k + p[t]]).sum::<f32>()
                + trans[p[0] * k + p[1]]
                + trans[p[1] * k + p[2]]
        };
        let paths: Vec<Vec<usize>> = (0..27).map(|n| vec![n / 9, n / 3 % 3, n % 3]).collect();
        let log_z = paths.iter().map(|p| score(p).exp()).sum::<f32>().ln();
        let gold = vec![2, 0, 1];
        let nll: f32 = crf
            .nll(emissions(), std::slice::from_ref(&gold), &[3])
            .into_scalar();
        assert!((nll - (log_z - score(&gold))).abs() < 1e-5, "{nll}");
        let best = paths
            .iter()
            .max_by(|a, b| score(a).total_cmp(&score(b)))
            .unwrap();
        assert_eq!(&crf.viterbi(emissions(), &[3])[0], best);
        // A shorter row ignores the padded steps.
        let short: f32 = crf.nll(emissions(), &[vec![1]], &[1]).into_scalar();
        let log_z1 = (0..k)
            .map(|j| ([0.1f32, -0.2, 0.3][j] + values[j] + [-0.1f32, 0.2, 0.0][j]).exp())
            .sum::<f32>()
            .ln();
        assert!((short - (log_z1 - (-0.2 + values[1] + 0.2))).abs() < 1e-5);
    }
}
