//! A batch with the host work of its training step done ahead (bilm-tf `train`'s inner loop
//! feeds a batch and its sampled negatives): per tower (bilm-tf's `n_gpus` slices of rows), the
//! distinct tokens of its two streams and its negatives, drawn from (seed, step, tower).
//! [`crate::Trainer::step`] prepares the next batch while the device runs a step, so that the
//! next step's first kernel follows the update's.

use std::borrow::Cow;

use elmo_model::DistinctTokens;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::config::TrainConfig;
use crate::language_model::stream_char_ids;
use crate::lm_batch::{LmBatch, Streams, Targets};
use crate::seeds::mix_seed;
use crate::softmax::SampledCandidates;

/// A batch prepared for the optimizer step of one (seed, step)
/// ([`crate::optimizer_step::optimizer_step_overlapping`]): what the step reads of it (not the
/// batch's token strings, which the caller may drop at once), cut into the config's towers.
#[derive(Debug, Clone)]
pub struct StepInput {
    towers: Vec<PreparedTower>,
}

/// One tower's rows of a [`StepInput`] and its negatives.
#[derive(Debug, Clone)]
pub(crate) struct PreparedTower {
    pub(crate) streams: PreparedStreams,
    /// The negatives and what they were drawn for.
    candidates: Option<SampledCandidates>,
    drawn_for: CandidateKey,
}

/// What a training step reads of a batch ([`LmBatch::streams`]): the distinct tokens of its
/// two streams, and their targets.
#[derive(Debug, Clone)]
pub(crate) struct PreparedStreams {
    /// The forward stream's rows, then the reversed stream's.
    pub(crate) tokens: DistinctTokens<'static>,
    /// Each stream's targets, row-major over its grid.
    pub(crate) targets: [Targets; 2],
    /// Rows of each stream (`B`).
    pub(crate) n_rows: usize,
    /// Whether the LSTM state carries over from the batch before.
    pub(crate) carries_state: bool,
}

impl PreparedStreams {
    pub(crate) fn of(batch: &LmBatch) -> Self {
        let streams = batch.streams();
        let tokens = DistinctTokens::owning(stream_char_ids(&streams));
        let Streams {
            grids,
            targets,
            carries_state,
        } = streams;
        Self {
            tokens,
            n_rows: grids[0].rows.len(),
            targets: targets.map(Cow::into_owned),
            carries_state,
        }
    }
}

/// What a tower's negatives depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CandidateKey {
    seed: u64,
    step: u64,
    tower: u64,
    /// `None` with the full softmax.
    negatives: Option<usize>,
    n_vocab: usize,
}

impl CandidateKey {
    fn of(config: &TrainConfig, n_vocab: usize, seed: u64, step: u64, tower: u64) -> Self {
        Self {
            seed,
            step,
            tower,
            negatives: config
                .uses_sampled_softmax(n_vocab)
                .then_some(config.negatives),
            n_vocab,
        }
    }
}

impl StepInput {
    /// `batch` prepared for step `step` (0-based) of a run of `seed` under `config` with
    /// `n_vocab` words: cut into `config.towers` slices of rows ([`TrainConfig::towers`]), each
    /// with its distinct tokens and its own negatives.
    pub fn prepare(
        batch: &LmBatch,
        config: &TrainConfig,
        n_vocab: usize,
        seed: u64,
        step: u64,
    ) -> Self {
        let tower = |rows: &LmBatch, tower| {
            let drawn_for = CandidateKey::of(config, n_vocab, seed, step, tower);
            PreparedTower {
                streams: PreparedStreams::of(rows),
                candidates: draw_candidates(drawn_for),
                drawn_for,
            }
        };
        let towers = match config.towers {
            ..=1 => vec![tower(batch, 0)],
            towers => (batch.split_rows(towers).iter().zip(0..))
                .map(|(rows, k)| tower(rows, k))
                .collect(),
        };
        Self { towers }
    }

    /// The towers' rows, in order.
    pub(crate) fn towers(&self) -> &[PreparedTower] {
        &self.towers
    }
}

impl PreparedTower {
    /// The negatives of this tower (the `tower`-th) at step `step` of a run of `seed` under
    /// `config` (`None` with the full softmax): those drawn ahead where they were drawn for that
    /// step, else drawn now.
    pub(crate) fn candidates_for(
        &self,
        config: &TrainConfig,
        n_vocab: usize,
        seed: u64,
        step: u64,
        tower: u64,
    ) -> Cow<'_, Option<SampledCandidates>> {
        let key = CandidateKey::of(config, n_vocab, seed, step, tower);
        match key == self.drawn_for {
            true => Cow::Borrowed(&self.candidates),
            false => Cow::Owned(draw_candidates(key)),
        }
    }
}

/// TensorFlow's log-uniform candidates of one tower's step, from (seed, step, tower); the first
/// tower's from (seed, step), as a run of one tower draws them.
fn draw_candidates(key: CandidateKey) -> Option<SampledCandidates> {
    key.negatives.map(|negatives| {
        let seed = match key.tower {
            0 => mix_seed(&[key.seed, key.step, 0x5A3]),
            tower => mix_seed(&[key.seed, key.step, 0x5A3, tower]),
        };
        SampledCandidates::draw(negatives, key.n_vocab, &mut ChaCha8Rng::seed_from_u64(seed))
    })
}
