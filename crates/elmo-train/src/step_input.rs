//! A batch with the host work of its training step done ahead (bilm-tf `train`'s inner loop
//! feeds a batch and its sampled negatives): the distinct tokens of its two streams and the
//! step's negatives, drawn from (seed, step). [`crate::Trainer::step`] prepares the next batch
//! while the device runs a step, so that the next step's first kernel follows the update's.

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
/// batch's token strings, which the caller may drop at once).
#[derive(Debug, Clone)]
pub struct StepInput {
    streams: PreparedStreams,
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

/// What a step's negatives depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CandidateKey {
    seed: u64,
    step: u64,
    /// `None` with the full softmax.
    negatives: Option<usize>,
    n_vocab: usize,
}

impl CandidateKey {
    fn of(config: &TrainConfig, n_vocab: usize, seed: u64, step: u64) -> Self {
        Self {
            seed,
            step,
            negatives: config
                .uses_sampled_softmax(n_vocab)
                .then_some(config.negatives),
            n_vocab,
        }
    }
}

impl StepInput {
    /// `batch` prepared for step `step` (0-based) of a run of `seed` under `config` with
    /// `n_vocab` words.
    pub fn prepare(
        batch: &LmBatch,
        config: &TrainConfig,
        n_vocab: usize,
        seed: u64,
        step: u64,
    ) -> Self {
        let drawn_for = CandidateKey::of(config, n_vocab, seed, step);
        Self {
            streams: PreparedStreams::of(batch),
            candidates: draw_candidates(drawn_for),
            drawn_for,
        }
    }

    /// What the step reads of the batch.
    pub(crate) fn streams(&self) -> &PreparedStreams {
        &self.streams
    }

    /// The negatives of step `step` of a run of `seed` under `config` (`None` with the full
    /// softmax): those drawn ahead where they were drawn for that step, else drawn now.
    pub(crate) fn candidates_for(
        &self,
        config: &TrainConfig,
        n_vocab: usize,
        seed: u64,
        step: u64,
    ) -> Cow<'_, Option<SampledCandidates>> {
        let key = CandidateKey::of(config, n_vocab, seed, step);
        match key == self.drawn_for {
            true => Cow::Borrowed(&self.candidates),
            false => Cow::Owned(draw_candidates(key)),
        }
    }
}

/// TensorFlow's log-uniform candidates of one step, from (seed, step).
fn draw_candidates(key: CandidateKey) -> Option<SampledCandidates> {
    key.negatives.map(|negatives| {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[key.seed, key.step, 0x5A3]));
        SampledCandidates::draw(negatives, key.n_vocab, &mut rng)
    })
}
