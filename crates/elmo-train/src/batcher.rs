//! Batches for the joint biLM loss, as bilm-tf builds them (`bilm/data.py`).
//!
//! - **Stateful (packed)**: `B` rows × `T` steps; each row is a stream of sentences
//!   `<S> w1 … wn </S>` laid end to end, where position `t` predicts the token at `t + 1` and
//!   `</S>` is never an input (the next sentence starts with its `<S>`). The LSTM state carries
//!   from one batch to the next. The backward LM reads its own, independently shuffled stream of
//!   reversed sentences `</S> wn … w1 <S>` the same way.
//! - **Contiguous**: stateful too, over the corpus in file order as one text cut into one part
//!   per row ([`crate::contiguous`]).
//! - **Sentences**: one sentence per row (long ones cut into pieces that overlap by one token, so
//!   every target is predicted once), from a zero state; the forward LM predicts the next token,
//!   the backward LM (reading each row right to left) the previous one.
//!
//! Shards (files) and the sentences of a shard are shuffled per epoch from the seed, so a batcher
//! is a pure function of its seed and position: [`BatcherState`] is all a checkpoint needs. A
//! stream holds `n_mixed_shards` shards at once (a *group*, in the epoch's shard order) and
//! interleaves their shuffled sentences at random, so that a corpus of different sources is not
//! learnt one source after another (bilm-tf's one shard at a time is `n_mixed_shards = 1`).

use std::path::PathBuf;
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::contiguous::{ContiguousBatcher, ContiguousState};
use crate::corpus::{no_sentence, read_shard, split_line};
use crate::error::{Result, TrainError};
use crate::lm_batch::{LmBatch, Targets, TokenGrid, empty_grid};
use crate::seeds::mix_seed;
use crate::vocabulary::{BOS, EOS, Vocabulary};

/// Where a [`SentenceStream`] is: the next sentence is line `line` (in visiting order) of shard
/// group `shard` (in visiting order) of epoch `epoch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamPosition {
    /// Passes over the corpus completed.
    pub epoch: u64,
    /// Index of the group of shards in the epoch's shard order (the shard itself when the
    /// stream reads one at a time).
    pub shard: usize,
    /// Index into the group's sentence order.
    pub line: usize,
}

/// Sentences of a corpus with boundary tokens, shuffled (endless) or in order (one pass).
pub struct SentenceStream {
    files: Arc<Vec<PathBuf>>,
    tokenize: bool,
    reverse: bool,
    /// Shards held and interleaved at once.
    n_mixed_shards: usize,
    /// `Some(seed)`: shuffle and loop forever; `None`: one pass in file order.
    shuffle_seed: Option<u64>,
    position: StreamPosition,
    /// The group in use: (epoch, group index, raw lines in visiting order).
    loaded: Option<(u64, usize, Vec<String>)>,
}

impl SentenceStream {
    /// A stream over `files` that holds `n_mixed_shards` of them at once (at least 1);
    /// `reverse` gives `</S> wn … w1 <S>`.
    pub fn new(
        files: Arc<Vec<PathBuf>>,
        tokenize: bool,
        reverse: bool,
        n_mixed_shards: usize,
        shuffle_seed: Option<u64>,
    ) -> Self {
        Self {
            files,
            tokenize,
            reverse,
            n_mixed_shards: n_mixed_shards.max(1),
            shuffle_seed,
            position: StreamPosition::default(),
            loaded: None,
        }
    }

    fn n_groups(&self) -> usize {
        self.files.len().div_ceil(self.n_mixed_shards)
    }

    /// The current position.
    pub fn position(&self) -> &StreamPosition {
        &self.position
    }

    /// Moves to a saved position (the shard is re-read on the next sentence).
    pub fn seek(&mut self, position: StreamPosition) {
        self.position = position;
        self.loaded = None;
    }

    fn shard_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.files.len()).collect();
        if let Some(seed) = self.shuffle_seed {
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(mix_seed(&[seed, epoch])));
        }
        order
    }

    /// Reads the current group: each shard's lines shuffled as when read alone, then
    /// interleaved at random (each next line from a shard with probability proportional to what
    /// it has left, which makes the group's order a uniform shuffle of all its lines).
    fn load(&mut self) -> Result<()> {
        let StreamPosition { epoch, shard, .. } = self.position;
        if matches!(&self.loaded, Some((e, s, _)) if *e == epoch && *s == shard) {
            return Ok(());
        }
        let order = self.shard_order(epoch);
        let start = shard * self.n_mixed_shards;
        let group = &order[start..(start + self.n_mixed_shards).min(order.len())];
        let mut shards = Vec::with_capacity(group.len());
        for &file in group {
            let mut lines = read_shard(&self.files[file])?;
            if let Some(seed) = self.shuffle_seed {
                let rng_seed = mix_seed(&[seed, epoch, file as u64 + 1]);
                lines.shuffle(&mut ChaCha8Rng::seed_from_u64(rng_seed));
            }
            shards.push(lines);
        }
        let lines = match self.shuffle_seed {
            Some(seed) if shards.len() > 1 => {
                let rng_seed = mix_seed(&[seed, epoch, u64::MAX - shard as u64]);
                interleave(shards, &mut ChaCha8Rng::seed_from_u64(rng_seed))
            }
            _ => shards.concat(),
        };
        self.loaded = Some((epoch, shard, lines));
        Ok(())
    }

    /// The next sentence with its boundary tokens, `None` at the end of a one-pass stream.
    pub fn next_sentence(&mut self) -> Result<Option<Vec<String>>> {
        // Groups passed without a sentence: more than all of them means an empty corpus.
        let mut groups_passed = 0;
        loop {
            if self.shuffle_seed.is_none() && self.position.epoch > 0 {
                return Ok(None);
            }
            if self.position.shard >= self.n_groups() {
                self.position = StreamPosition {
                    epoch: self.position.epoch + 1,
                    shard: 0,
                    line: 0,
                };
                continue;
            }
            self.load()?;
            let lines = match &self.loaded {
                Some((_, _, lines)) => lines,
                None => unreachable!("load() fills the group"),
            };
            while let Some(line) = lines.get(self.position.line) {
                self.position.line += 1;
                let words = split_line(line, self.tokenize);
                if words.is_empty() {
                    continue;
                }
                let mut sentence = Vec::with_capacity(words.len() + 2);
                let (first, last) = if self.reverse { (EOS, BOS) } else { (BOS, EOS) };
                sentence.push(first.to_string());
                if self.reverse {
                    sentence.extend(words.into_iter().rev());
                } else {
                    sentence.extend(words);
                }
                sentence.push(last.to_string());
                return Ok(Some(sentence));
            }
            groups_passed += 1;
            if groups_passed > self.n_groups() {
                return Err(no_sentence(&self.files));
            }
            self.position.shard += 1;
            self.position.line = 0;
            self.loaded = None;
        }
    }
}

/// Merges `shards` into one sequence: each next item from a shard drawn with probability
/// proportional to its remaining items (each shard keeps its own order).
fn interleave(shards: Vec<Vec<String>>, rng: &mut impl Rng) -> Vec<String> {
    let mut remaining: Vec<usize> = shards.iter().map(Vec::len).collect();
    let mut total: usize = remaining.iter().sum();
    let mut iters: Vec<_> = shards.into_iter().map(Vec::into_iter).collect();
    let mut merged = Vec::with_capacity(total);
    while total > 0 {
        let mut pick = rng.random_range(0..total);
        let shard = remaining
            .iter()
            .position(|&n| {
                if pick < n {
                    true
                } else {
                    pick -= n;
                    false
                }
            })
            .unwrap_or(0);
        remaining[shard] -= 1;
        total -= 1;
        merged.extend(iters[shard].next());
    }
    merged
}

/// bilm-tf's packing of one stream into `B × T` batches.
pub struct PackedBatcher {
    stream: SentenceStream,
    vocab: Arc<Vocabulary>,
    n_rows: usize,
    n_steps: usize,
    /// The unread rest of each row's current sentence.
    rows: Vec<Vec<String>>,
}

impl PackedBatcher {
    /// A batcher of `n_rows × n_steps` over `stream`.
    pub fn new(
        stream: SentenceStream,
        vocab: Arc<Vocabulary>,
        n_rows: usize,
        n_steps: usize,
    ) -> Self {
        Self {
            stream,
            vocab,
            n_rows,
            n_steps,
            rows: vec![Vec::new(); n_rows],
        }
    }

    /// The next batch; `None` once a one-pass stream is used up. The last batch of a one-pass
    /// stream is padded (weight 0) where the data ran out.
    pub fn next_batch(&mut self) -> Result<Option<(TokenGrid, Targets)>> {
        let cells = self.n_rows * self.n_steps;
        let mut targets = Targets {
            ids: vec![0; cells],
            weights: vec![0.0; cells],
        };
        let mut grid = Vec::with_capacity(self.n_rows);
        let mut exhausted = false;
        for row in 0..self.n_rows {
            let mut inputs: Vec<String> = Vec::with_capacity(self.n_steps);
            while inputs.len() < self.n_steps && !exhausted {
                if self.rows[row].len() <= 1 {
                    match self.stream.next_sentence()? {
                        Some(sentence) => self.rows[row] = sentence,
                        None => {
                            exhausted = true;
                            break;
                        }
                    }
                }
                let current = &mut self.rows[row];
                let how_many = (current.len() - 1).min(self.n_steps - inputs.len());
                for (k, target) in current[1..=how_many].iter().enumerate() {
                    let cell = row * self.n_steps + inputs.len() + k;
                    targets.ids[cell] = self.vocab.id(target);
                    targets.weights[cell] = 1.0;
                }
                inputs.extend(current.drain(..how_many));
            }
            grid.push(inputs);
        }
        if exhausted && targets.count() == 0 {
            return Ok(None);
        }
        Ok(Some((
            TokenGrid {
                rows: grid,
                n_steps: self.n_steps,
            },
            targets,
        )))
    }

    /// What a checkpoint needs to continue exactly.
    pub fn state(&self) -> PackedState {
        PackedState {
            position: self.stream.position().clone(),
            rows: self.rows.clone(),
        }
    }

    /// Continues from a saved state.
    pub fn restore(&mut self, state: PackedState) -> Result<()> {
        if state.rows.len() != self.n_rows {
            return Err(TrainError::InvalidConfig(format!(
                "the checkpoint has {} batch rows, the config {}",
                state.rows.len(),
                self.n_rows
            )));
        }
        self.stream.seek(state.position);
        self.rows = state.rows;
        Ok(())
    }
}

/// Saved state of a [`PackedBatcher`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackedState {
    /// Stream position.
    pub position: StreamPosition,
    /// Unread rest of each row's sentence.
    pub rows: Vec<Vec<String>>,
}

/// One sentence per row.
pub struct SentenceBatcher {
    stream: SentenceStream,
    vocab: Arc<Vocabulary>,
    n_rows: usize,
    max_tokens: usize,
    /// Pieces of a long sentence not yet batched.
    pending: Vec<Vec<String>>,
}

impl SentenceBatcher {
    /// Batches of `n_rows` sentences of at most `max_tokens` tokens (boundaries included).
    pub fn new(
        stream: SentenceStream,
        vocab: Arc<Vocabulary>,
        n_rows: usize,
        max_tokens: usize,
    ) -> Self {
        Self {
            stream,
            vocab,
            n_rows,
            max_tokens: max_tokens.max(2),
            pending: Vec::new(),
        }
    }

    fn next_piece(&mut self) -> Result<Option<Vec<String>>> {
        if let Some(piece) = self.pending.pop() {
            return Ok(Some(piece));
        }
        let Some(sentence) = self.stream.next_sentence()? else {
            return Ok(None);
        };
        if sentence.len() <= self.max_tokens {
            return Ok(Some(sentence));
        }
        // Pieces overlapping by one token: every target is predicted exactly once per direction.
        let step = self.max_tokens - 1;
        let mut pieces: Vec<Vec<String>> = (0..sentence.len() - 1)
            .step_by(step)
            .map(|start| sentence[start..(start + self.max_tokens).min(sentence.len())].to_vec())
            .collect();
        pieces.reverse();
        let first = pieces.pop();
        self.pending = pieces;
        Ok(first)
    }

    /// The next batch; `None` at the end of a one-pass stream.
    pub fn next_batch(&mut self) -> Result<Option<LmBatch>> {
        let mut rows = Vec::with_capacity(self.n_rows);
        while rows.len() < self.n_rows {
            match self.next_piece()? {
                Some(piece) => rows.push(piece),
                None => break,
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let n_steps = rows.iter().map(Vec::len).max().unwrap_or(0);
        let cells = rows.len() * n_steps;
        let mut forward = Targets {
            ids: vec![0; cells],
            weights: vec![0.0; cells],
        };
        let mut backward = forward.clone();
        for (r, row) in rows.iter().enumerate() {
            for p in 0..row.len().saturating_sub(1) {
                let cell = r * n_steps + p;
                forward.ids[cell] = self.vocab.id(&row[p + 1]);
                forward.weights[cell] = 1.0;
                backward.ids[cell + 1] = self.vocab.id(&row[p]);
                backward.weights[cell + 1] = 1.0;
            }
        }
        let lengths = rows.iter().map(Vec::len).collect();
        Ok(Some(LmBatch::Sentences {
            tokens: TokenGrid { rows, n_steps },
            lengths,
            forward_targets: forward,
            backward_targets: backward,
        }))
    }
}

/// Saved state of a [`Batcher`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum BatcherState {
    /// Stateful mode: both streams.
    Packed {
        /// Forward stream.
        forward: PackedState,
        /// Reversed stream.
        backward: PackedState,
    },
    /// Contiguous mode: where the rows are.
    Contiguous(ContiguousState),
    /// Sentence mode.
    Sentences {
        /// Stream position.
        position: StreamPosition,
        /// Pieces of a long sentence not yet batched.
        pending: Vec<Vec<String>>,
    },
}

/// The batches of a training run or an evaluation.
pub enum Batcher {
    /// Stateful mode.
    Packed {
        /// Forward stream.
        forward: PackedBatcher,
        /// Reversed stream.
        backward: PackedBatcher,
    },
    /// Stateful mode over the corpus as one text (see [`crate::contiguous`]).
    Contiguous(ContiguousBatcher),
    /// Sentence mode.
    Sentences(SentenceBatcher),
}

/// How sentences are laid out in batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// bilm-tf's stateful packing: each row a stream of shuffled sentences, the LSTM state
    /// carried from batch to batch.
    Packed,
    /// Stateful, over the corpus in file order cut into one contiguous part per row.
    Contiguous,
    /// One sentence per row from a zero state.
    Sentences,
}

/// The most token positions one training step or evaluation batch may read (`batch_size ×
/// towers × unroll_steps`, or `max_sentence_tokens` in the sentence mode): 2^24, 6,553 times
/// bilm-tf's 128 × 20.
pub const MAX_STEP_POSITIONS: usize = 1 << 24;

/// How to batch: grid size and mode.
#[derive(Debug, Clone, Copy)]
pub struct BatchShape {
    /// Rows per batch.
    pub n_rows: usize,
    /// Steps per batch (stateful modes).
    pub n_steps: usize,
    /// Packed, contiguous or sentence mode.
    pub mode: BatchMode,
    /// Shards each stream holds and interleaves at once (see the module docs).
    pub n_mixed_shards: usize,
    /// Longest piece in sentence mode.
    pub max_sentence_tokens: usize,
}

impl BatchShape {
    /// Checks the shape before a batcher allocates its rows: at least one row and one step
    /// (pieces of at least 2 tokens in sentence mode, one shard a stream), and a batch of at
    /// most [`MAX_STEP_POSITIONS`] positions.
    ///
    /// # Errors
    /// [`TrainError::InvalidConfig`] naming the value.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(TrainError::InvalidConfig(message));
        if self.n_rows == 0 || self.n_steps == 0 || self.n_mixed_shards == 0 {
            return bad(format!(
                "a batch of {} rows of {} steps over {} shards a stream: each must be positive",
                self.n_rows, self.n_steps, self.n_mixed_shards
            ));
        }
        if self.max_sentence_tokens < 2 {
            return bad(format!(
                "pieces of at most {} tokens: a sentence piece holds at least 2",
                self.max_sentence_tokens
            ));
        }
        let length = match self.mode {
            BatchMode::Sentences => self.max_sentence_tokens,
            BatchMode::Packed | BatchMode::Contiguous => self.n_steps,
        };
        let limit = MAX_STEP_POSITIONS;
        if self.n_rows.checked_mul(length).is_none_or(|n| n > limit) {
            return bad(format!(
                "a batch of {} rows × {length} positions is more than {limit}: fewer rows",
                self.n_rows
            ));
        }
        Ok(())
    }
}

impl Batcher {
    /// Batches over `files`: endless and shuffled with `Some(seed)`, one ordered pass with `None`.
    pub fn new(
        files: Vec<PathBuf>,
        tokenize: bool,
        vocab: Arc<Vocabulary>,
        shape: BatchShape,
        shuffle_seed: Option<u64>,
    ) -> Self {
        let files = Arc::new(files);
        // The two directions shuffle independently, as bilm-tf's two LMDatasets do.
        let seed_for = |direction: u64| shuffle_seed.map(|s| mix_seed(&[s, direction]));
        match shape.mode {
            BatchMode::Packed => {
                let stream = |reverse: bool| {
                    SentenceStream::new(
                        files.clone(),
                        tokenize,
                        reverse,
                        shape.n_mixed_shards,
                        seed_for(u64::from(reverse)),
                    )
                };
                Self::Packed {
                    forward: PackedBatcher::new(
                        stream(false),
                        vocab.clone(),
                        shape.n_rows,
                        shape.n_steps,
                    ),
                    backward: PackedBatcher::new(stream(true), vocab, shape.n_rows, shape.n_steps),
                }
            }
            BatchMode::Contiguous => Self::Contiguous(ContiguousBatcher::new(
                files,
                tokenize,
                vocab,
                shape.n_rows,
                shape.n_steps,
                shuffle_seed,
            )),
            BatchMode::Sentences => Self::Sentences(SentenceBatcher::new(
                SentenceStream::new(files, tokenize, false, shape.n_mixed_shards, seed_for(0)),
                vocab,
                shape.n_rows,
                shape.max_sentence_tokens,
            )),
        }
    }

    /// The next batch, `None` when a one-pass batcher is done.
    pub fn next_batch(&mut self) -> Result<Option<LmBatch>> {
        match self {
            Self::Packed { forward, backward } => {
                let shape = (forward.n_rows, forward.n_steps);
                let f = forward.next_batch()?;
                let b = backward.next_batch()?;
                if f.is_none() && b.is_none() {
                    return Ok(None);
                }
                let (forward, forward_targets) = f.unwrap_or_else(|| empty_grid(shape));
                let (backward, backward_targets) = b.unwrap_or_else(|| empty_grid(shape));
                Ok(Some(LmBatch::Packed {
                    forward,
                    backward,
                    forward_targets,
                    backward_targets,
                }))
            }
            Self::Contiguous(batcher) => batcher.next_batch(),
            Self::Sentences(batcher) => batcher.next_batch(),
        }
    }

    /// What a checkpoint needs to continue exactly.
    pub fn state(&self) -> BatcherState {
        match self {
            Self::Packed { forward, backward } => BatcherState::Packed {
                forward: forward.state(),
                backward: backward.state(),
            },
            Self::Contiguous(b) => BatcherState::Contiguous(b.state()),
            Self::Sentences(b) => BatcherState::Sentences {
                position: b.stream.position().clone(),
                pending: b.pending.clone(),
            },
        }
    }

    /// Continues from a saved state (of a batcher with the same configuration).
    pub fn restore(&mut self, state: BatcherState) -> Result<()> {
        match (self, state) {
            (
                Self::Packed { forward, backward },
                BatcherState::Packed {
                    forward: f,
                    backward: b,
                },
            ) => {
                forward.restore(f)?;
                backward.restore(b)
            }
            (Self::Contiguous(batcher), BatcherState::Contiguous(state)) => {
                batcher.restore(state);
                Ok(())
            }
            (Self::Sentences(batcher), BatcherState::Sentences { position, pending }) => {
                batcher.stream.seek(position);
                batcher.pending = pending;
                Ok(())
            }
            _ => Err(TrainError::InvalidConfig(
                "the checkpoint's batching mode (packed, contiguous or sentences) differs from the \
                 config's"
                    .into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(dir: &std::path::Path, text: &str) -> Vec<PathBuf> {
        let path = dir.join("c.txt");
        std::fs::write(&path, text).unwrap();
        vec![path]
    }

    fn vocab() -> Arc<Vocabulary> {
        Arc::new(Vocabulary::from_tokens(
            ["a", "b", "c", "d", "e"].map(String::from),
        ))
    }

    /// A shape of no rows, no steps, no shards, pieces of one token or a batch past the bound
    /// is refused with its values named (`elmo eval --batch-size 0` panicked in the model).
    #[test]
    fn shapes_that_cannot_batch_are_refused() {
        let good = BatchShape {
            n_rows: 4,
            n_steps: 1,
            mode: BatchMode::Packed,
            n_mixed_shards: 1,
            max_sentence_tokens: 2,
        };
        good.validate().expect("4 rows of 1 step");
        let refused = |shape: BatchShape, word: &str| {
            let error = shape.validate().expect_err("refused").to_string();
            assert!(error.contains(word), "{error:?} does not name {word:?}");
        };
        refused(BatchShape { n_rows: 0, ..good }, "0 rows");
        refused(BatchShape { n_steps: 0, ..good }, "0 steps");
        refused(
            BatchShape {
                n_mixed_shards: 0,
                ..good
            },
            "0 shards",
        );
        refused(
            BatchShape {
                max_sentence_tokens: 1,
                ..good
            },
            "at most 1 tokens",
        );
        let limit = MAX_STEP_POSITIONS;
        refused(
            BatchShape {
                n_rows: limit,
                n_steps: 2,
                ..good
            },
            "more than",
        );
        refused(
            BatchShape {
                n_rows: usize::MAX,
                n_steps: 2,
                ..good
            },
            "more than",
        );
        // Sentence mode bounds its pieces, not its steps.
        let sentences = BatchShape {
            mode: BatchMode::Sentences,
            n_rows: limit / 2,
            ..good
        };
        sentences.validate().expect("pieces of 2 tokens");
        refused(
            BatchShape {
                max_sentence_tokens: 3,
                ..sentences
            },
            "more than",
        );
    }

    #[test]
    fn packing_follows_bilm_tf() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(corpus(dir.path(), "a b\nc d e\n"));
        let stream = SentenceStream::new(files, false, false, 1, None);
        let mut batcher = PackedBatcher::new(stream, vocab(), 1, 4);
        let (grid, targets) = batcher.next_batch().unwrap().unwrap();
        // <S> a b </S> <S> c d e </S>: inputs skip </S>, targets skip <S>.
        assert_eq!(grid.rows, vec![vec!["<S>", "a", "b", "<S>"]]);
        assert_eq!(targets.ids, vec![3, 4, 1, 5]);
        let (grid, targets) = batcher.next_batch().unwrap().unwrap();
        assert_eq!(grid.rows, vec![vec!["c", "d", "e"]]);
        assert_eq!(targets.ids[..3], [6, 7, 1]);
        assert_eq!(targets.weights, vec![1.0, 1.0, 1.0, 0.0]);
        assert!(batcher.next_batch().unwrap().is_none());
    }

    #[test]
    fn reversed_stream_and_sentence_mode() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(corpus(dir.path(), "a b c\n"));
        let mut stream = SentenceStream::new(files.clone(), false, true, 1, None);
        assert_eq!(
            stream.next_sentence().unwrap().unwrap(),
            vec!["</S>", "c", "b", "a", "<S>"]
        );
        let stream = SentenceStream::new(files, false, false, 1, None);
        let mut batcher = SentenceBatcher::new(stream, vocab(), 2, 3);
        // <S> a b c </S> cut into [<S> a b], [b c </S>].
        let Some(LmBatch::Sentences {
            tokens,
            forward_targets,
            backward_targets,
            ..
        }) = batcher.next_batch().unwrap()
        else {
            panic!("expected a sentence batch")
        };
        assert_eq!(
            tokens.rows,
            vec![vec!["<S>", "a", "b"], vec!["b", "c", "</S>"]]
        );
        let real = |t: &Targets| -> Vec<u32> {
            t.ids
                .iter()
                .zip(&t.weights)
                .filter(|(_, w)| **w > 0.0)
                .map(|(i, _)| *i)
                .collect()
        };
        assert_eq!(real(&forward_targets), vec![3, 4, 5, 1]);
        assert_eq!(real(&backward_targets), vec![0, 3, 4, 5]);
    }

    /// Files `s0.txt`, `s1.txt`, ... of `n_lines` lines `s{k}_{i}` each.
    fn sources(dir: &std::path::Path, n_files: usize, n_lines: usize) -> Arc<Vec<PathBuf>> {
        let files = (0..n_files)
            .map(|k| {
                let path = dir.join(format!("s{k}.txt"));
                let text: String = (0..n_lines).map(|i| format!("s{k}_{i}\n")).collect();
                std::fs::write(&path, text).unwrap();
                path
            })
            .collect();
        Arc::new(files)
    }

    #[test]
    fn mixed_shards_interleave_sources_and_cover_each_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let files = sources(dir.path(), 3, 100);
        // Which file each of the first `n` sentences comes from.
        let sources_of_first = |n_mixed: usize, n: usize| {
            let mut stream = SentenceStream::new(files.clone(), false, false, n_mixed, Some(3));
            let mut counts = [0; 3];
            for _ in 0..n {
                let sentence = stream.next_sentence().unwrap().unwrap();
                counts[usize::from(sentence[1].as_bytes()[1] - b'0')] += 1;
            }
            counts
        };
        // One file at a time (bilm-tf): the first 30 sentences are all from one source.
        assert_eq!(
            sources_of_first(1, 30).iter().filter(|&&c| c > 0).count(),
            1
        );
        // All three mixed: every source is there from the start, ~10 each.
        let counts = sources_of_first(3, 30);
        assert!(counts.iter().all(|&c| c >= 3), "{counts:?}");
        // Groups of 2 and 1: one epoch is every line once; the next is another order.
        let mut stream = SentenceStream::new(files.clone(), false, false, 2, Some(3));
        let epoch = |stream: &mut SentenceStream| {
            (0..300)
                .map(|_| stream.next_sentence().unwrap().unwrap()[1].clone())
                .collect::<Vec<_>>()
        };
        let first = epoch(&mut stream);
        let second = epoch(&mut stream);
        let mut sorted = first.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 300);
        assert_ne!(first, second);
        // Not shuffled (evaluation): file order, line order, whatever the group size.
        let mut stream = SentenceStream::new(files, false, false, 2, None);
        let in_order: Vec<String> = std::iter::from_fn(|| stream.next_sentence().unwrap())
            .map(|s| s[1].clone())
            .collect();
        let expected: Vec<String> = (0..3)
            .flat_map(|k| (0..100).map(move |i| format!("s{k}_{i}")))
            .collect();
        assert_eq!(in_order, expected);
    }

    #[test]
    fn shuffled_stream_is_reproducible_and_restorable() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..50).map(|i| format!("w{i} x{i}\n")).collect();
        let one_file = corpus(dir.path(), &text);
        let three_files = sources(dir.path(), 3, 20).to_vec();
        for (files, n_mixed_shards) in [(one_file, 1), (three_files.clone(), 1), (three_files, 2)] {
            restores_exactly(files, n_mixed_shards);
        }
    }

    fn restores_exactly(files: Vec<PathBuf>, n_mixed_shards: usize) {
        let shape = BatchShape {
            n_rows: 3,
            n_steps: 4,
            mode: BatchMode::Packed,
            max_sentence_tokens: 10,
            n_mixed_shards,
        };
        let make = || Batcher::new(files.clone(), false, vocab(), shape, Some(7));
        let mut a = make();
        let first: Vec<LmBatch> = (0..5).map(|_| a.next_batch().unwrap().unwrap()).collect();
        let state = a.state();
        let after: Vec<LmBatch> = (0..40).map(|_| a.next_batch().unwrap().unwrap()).collect();
        let mut b = make();
        let again: Vec<LmBatch> = (0..5).map(|_| b.next_batch().unwrap().unwrap()).collect();
        assert_eq!(first, again);
        let mut c = make();
        c.restore(state).unwrap();
        let resumed: Vec<LmBatch> = (0..40).map(|_| c.next_batch().unwrap().unwrap()).collect();
        assert_eq!(after, resumed);
        // Shuffled: not the file order.
        let LmBatch::Packed { forward, .. } = &first[0] else {
            panic!()
        };
        let first_line = std::fs::read_to_string(&files[0]).unwrap();
        let first_word = first_line.split_whitespace().next().unwrap();
        assert_ne!(
            forward.rows[0][..2],
            ["<S>".to_string(), first_word.to_string()]
        );
    }
}
