//! Contiguous batching (Zaremba et al. 2014, Kim et al. 2016's Penn Treebank setup): the corpus,
//! in file order and unshuffled, is one text cut into `B` contiguous parts, one per batch row, so
//! that the LSTM state a row carries from batch to batch holds the preceding sentences of the same
//! document. The backward LM reads the whole text reversed (the last sentence first, each
//! sentence reversed), cut the same way.
//!
//! The batches are [`LmBatch::Packed`] ones with the packed mode's tokens and targets: each
//! sentence is `<S> w1 … wn </S>`, `</S>` is a target but never an input (the next sentence
//! starts with its `<S>`). Training loops over the text forever, each epoch starting at a random
//! offset below `T` (from the seed and the epoch) so that the truncation points move, and drops
//! the tail that does not fill a whole batch; evaluation reads it once, every target exactly
//! once per direction. The whole text is held in memory (an index of 4 bytes per token and
//! direction, plus each distinct token once).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::corpus::{display_paths, no_sentence, read_shard, split_line};
use crate::error::{Result, TrainError};
use crate::lm_batch::{LmBatch, Targets, TokenGrid};
use crate::seeds::mix_seed;
use crate::vocabulary::{BOS, EOS, Vocabulary};

/// Marks an input that starts a sentence (`<S>` forward, `</S>` backward) in [`Direction`].
const STARTS_SENTENCE: u32 = 1 << 31;

/// The text of one direction: its inputs in reading order, as indices into the token table.
/// An input's target is the next input, or the direction's end token where the next input
/// starts a sentence or the text ends.
struct Direction {
    inputs: Vec<u32>,
    /// The vocabulary id of the end token (`</S>` forward, `<S>` backward).
    end_id: u32,
}

impl Direction {
    fn target(&self, k: usize, vocab_ids: &[u32]) -> u32 {
        match self.inputs.get(k + 1) {
            Some(&next) if next & STARTS_SENTENCE == 0 => vocab_ids[next as usize],
            _ => self.end_id,
        }
    }
}

/// The corpus as one text in both directions.
struct Text {
    /// Distinct tokens (index 0 is `<S>`, 1 is `</S>`).
    tokens: Vec<String>,
    /// Their vocabulary ids.
    vocab_ids: Vec<u32>,
    forward: Direction,
    backward: Direction,
}

impl Text {
    fn read(files: &[PathBuf], tokenize: bool, vocab: &Vocabulary) -> Result<Self> {
        let mut tokens = vec![BOS.to_string(), EOS.to_string()];
        let mut index: HashMap<String, u32> = HashMap::new();
        let mut sentences: Vec<Vec<u32>> = Vec::new();
        for file in files {
            for line in read_shard(file)? {
                let words = split_line(&line, tokenize);
                if words.is_empty() {
                    continue;
                }
                let ids = words.into_iter().map(|word| {
                    *index.entry(word).or_insert_with_key(|word| {
                        tokens.push(word.clone());
                        (tokens.len() - 1) as u32
                    })
                });
                sentences.push(ids.collect());
            }
        }
        if sentences.is_empty() {
            return Err(no_sentence(files));
        }
        if tokens.len() as u64 >= u64::from(STARTS_SENTENCE) {
            return Err(TrainError::Corpus(
                "more than 2^31 distinct tokens for contiguous batching".into(),
            ));
        }
        let n_inputs: usize = sentences.iter().map(|s| s.len() + 1).sum();
        let mut forward = Vec::with_capacity(n_inputs);
        for sentence in &sentences {
            forward.push(STARTS_SENTENCE);
            forward.extend(sentence);
        }
        let mut backward = Vec::with_capacity(n_inputs);
        for sentence in sentences.iter().rev() {
            backward.push(1 | STARTS_SENTENCE);
            backward.extend(sentence.iter().rev());
        }
        let vocab_ids = tokens.iter().map(|t| vocab.id(t)).collect();
        Ok(Self {
            tokens,
            vocab_ids,
            forward: Direction {
                inputs: forward,
                end_id: vocab.eos_id(),
            },
            backward: Direction {
                inputs: backward,
                end_id: vocab.bos_id(),
            },
        })
    }

    fn len(&self) -> usize {
        self.forward.inputs.len()
    }
}

/// Where each row reads in an epoch: row `r` covers inputs
/// `offset + r · row_len .. offset + (r + 1) · row_len` (cut at the end of the text).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Layout {
    offset: usize,
    row_len: usize,
}

/// Saved state of a [`ContiguousBatcher`]: both directions advance together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContiguousState {
    /// Passes over the text completed.
    pub epoch: u64,
    /// Steps of every row already read in this epoch.
    pub position: usize,
}

/// Batches of `n_rows × n_steps` over the corpus as one text (see the module docs).
pub struct ContiguousBatcher {
    files: Arc<Vec<PathBuf>>,
    tokenize: bool,
    vocab: Arc<Vocabulary>,
    n_rows: usize,
    n_steps: usize,
    /// `Some(seed)`: loop forever, random offsets; `None`: one pass.
    seed: Option<u64>,
    /// Read on the first batch.
    text: Option<Text>,
    state: ContiguousState,
}

impl ContiguousBatcher {
    /// A batcher over `files` (read in this order when the first batch is asked for).
    pub fn new(
        files: Arc<Vec<PathBuf>>,
        tokenize: bool,
        vocab: Arc<Vocabulary>,
        n_rows: usize,
        n_steps: usize,
        seed: Option<u64>,
    ) -> Self {
        Self {
            files,
            tokenize,
            vocab,
            n_rows,
            n_steps,
            seed,
            text: None,
            state: ContiguousState {
                epoch: 0,
                position: 0,
            },
        }
    }

    fn layout(&self, len: usize) -> Result<Layout> {
        let Some(seed) = self.seed else {
            return Ok(Layout {
                offset: 0,
                row_len: len.div_ceil(self.n_rows),
            });
        };
        let max_offset = self
            .n_steps
            .min(len.saturating_sub(self.n_rows * self.n_steps));
        let offset = if max_offset == 0 {
            0
        } else {
            let rng_seed = mix_seed(&[seed, self.state.epoch, 0xC0_4716]);
            ChaCha8Rng::seed_from_u64(rng_seed).random_range(0..max_offset)
        };
        let row_len = (len - offset) / self.n_rows / self.n_steps * self.n_steps;
        if row_len == 0 {
            return Err(TrainError::Corpus(format!(
                "{}: {len} tokens do not fill one batch of {} rows × {} steps (contiguous batching)",
                display_paths(&self.files),
                self.n_rows,
                self.n_steps
            )));
        }
        Ok(Layout { offset, row_len })
    }

    /// The next batch; `None` once a one-pass batcher has read the whole text. The last batch of
    /// a pass is padded (weight 0) where the rows end.
    pub fn next_batch(&mut self) -> Result<Option<LmBatch>> {
        if self.text.is_none() {
            self.text = Some(Text::read(&self.files, self.tokenize, &self.vocab)?);
        }
        let Some(text) = &self.text else {
            unreachable!("read above")
        };
        let len = text.len();
        let mut layout = self.layout(len)?;
        if self.state.position >= layout.row_len {
            if self.seed.is_none() {
                return Ok(None);
            }
            self.state = ContiguousState {
                epoch: self.state.epoch + 1,
                position: 0,
            };
            layout = self.layout(len)?;
        }
        let (forward, forward_targets) = self.grid(text, &text.forward, layout);
        let (backward, backward_targets) = self.grid(text, &text.backward, layout);
        self.state.position += self.n_steps;
        Ok(Some(LmBatch::Packed {
            forward,
            backward,
            forward_targets,
            backward_targets,
        }))
    }

    fn grid(&self, text: &Text, direction: &Direction, layout: Layout) -> (TokenGrid, Targets) {
        let cells = self.n_rows * self.n_steps;
        let mut targets = Targets {
            ids: vec![0; cells],
            weights: vec![0.0; cells],
        };
        let mut rows = Vec::with_capacity(self.n_rows);
        for r in 0..self.n_rows {
            let row_start = layout.offset + r * layout.row_len;
            let row_end = (row_start + layout.row_len).min(text.len());
            let start = (row_start + self.state.position).min(row_end);
            let end = (start + self.n_steps).min(row_end);
            let mut row = Vec::with_capacity(end - start);
            for (t, k) in (start..end).enumerate() {
                let token = direction.inputs[k] & !STARTS_SENTENCE;
                row.push(text.tokens[token as usize].clone());
                let cell = r * self.n_steps + t;
                targets.ids[cell] = direction.target(k, &text.vocab_ids);
                targets.weights[cell] = 1.0;
            }
            rows.push(row);
        }
        (
            TokenGrid {
                rows,
                n_steps: self.n_steps,
            },
            targets,
        )
    }

    /// What a checkpoint needs to continue exactly.
    pub fn state(&self) -> ContiguousState {
        self.state.clone()
    }

    /// Continues from a saved state.
    pub fn restore(&mut self, state: ContiguousState) {
        self.state = state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batcher::BatcherState;

    fn vocab() -> Arc<Vocabulary> {
        Arc::new(Vocabulary::from_tokens(
            ["a", "b", "c", "d", "e"].map(String::from),
        ))
    }

    fn files(dir: &std::path::Path, text: &str) -> Arc<Vec<PathBuf>> {
        let path = dir.join("c.txt");
        std::fs::write(&path, text).unwrap();
        Arc::new(vec![path])
    }

    /// (inputs, targets) of each row of one direction, padding left out.
    fn rows(grid: &TokenGrid, targets: &Targets) -> Vec<(Vec<String>, Vec<u32>)> {
        grid.rows
            .iter()
            .enumerate()
            .map(|(r, row)| {
                let cells = r * grid.n_steps..r * grid.n_steps + row.len();
                assert!(targets.weights[cells.clone()].iter().all(|&w| w == 1.0));
                (row.clone(), targets.ids[cells].to_vec())
            })
            .collect()
    }

    #[test]
    fn one_pass_reads_each_row_as_a_contiguous_part_of_the_text() {
        let dir = tempfile::tempdir().unwrap();
        // The sentence ends take the vocabulary's ids: `<S>` 0, `</S>` 1 in `elmo vocab`'s
        // order, `</S>` 0, `<S>` 1 in the 1B Word Benchmark's; a 3 … e 7 in both.
        let bilm_tf = dir.path().join("vocab.txt");
        std::fs::write(&bilm_tf, "</S>\n<S>\n<UNK>\na\nb\nc\nd\ne\n").unwrap();
        for vocab in [vocab(), Arc::new(Vocabulary::from_file(&bilm_tf).unwrap())] {
            let (bos, eos) = (vocab.bos_id(), vocab.eos_id());
            // Forward inputs: <S> a b <S> c <S> d e (8), targets a b </S> c </S> d e </S>.
            let files = files(dir.path(), "a b\n\nc\nd e\n");
            let mut batcher = ContiguousBatcher::new(files, false, vocab, 2, 3, None);
            let Some(LmBatch::Packed {
                forward,
                backward,
                forward_targets,
                backward_targets,
            }) = batcher.next_batch().unwrap()
            else {
                panic!("expected a packed batch")
            };
            let s = |tokens: &[&str]| tokens.iter().map(|t| t.to_string()).collect::<Vec<_>>();
            // Rows of 4: [<S> a b <S>] and [c <S> d e].
            assert_eq!(
                rows(&forward, &forward_targets),
                vec![
                    (s(&["<S>", "a", "b"]), vec![3, 4, eos]),
                    (s(&["c", "<S>", "d"]), vec![eos, 6, 7]),
                ]
            );
            // Backward inputs: </S> e d </S> c </S> b a, targets e d <S> c <S> b a <S>.
            assert_eq!(
                rows(&backward, &backward_targets),
                vec![
                    (s(&["</S>", "e", "d"]), vec![7, 6, bos]),
                    (s(&["c", "</S>", "b"]), vec![bos, 4, 3]),
                ]
            );
            let Some(LmBatch::Packed {
                forward,
                forward_targets,
                ..
            }) = batcher.next_batch().unwrap()
            else {
                panic!("expected a packed batch")
            };
            assert_eq!(
                rows(&forward, &forward_targets),
                vec![(s(&["<S>"]), vec![5]), (s(&["e"]), vec![eos])]
            );
            assert!(batcher.next_batch().unwrap().is_none());
        }
    }

    #[test]
    fn training_loops_with_full_batches_and_restores_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..40)
            .map(|i| format!("a b{}\n", "c".repeat(i % 3)))
            .collect();
        let files = files(dir.path(), &text);
        let make = || ContiguousBatcher::new(files.clone(), false, vocab(), 3, 4, Some(5));
        let mut a = make();
        let mut offsets = std::collections::HashSet::new();
        let mut batches = Vec::new();
        for _ in 0..60 {
            let batch = a.next_batch().unwrap().unwrap();
            let LmBatch::Packed {
                forward_targets,
                backward_targets,
                ..
            } = &batch
            else {
                panic!("expected a packed batch")
            };
            assert_eq!(forward_targets.count(), 12, "training batches are full");
            assert_eq!(backward_targets.count(), 12);
            if a.state.position == 4 {
                offsets.insert(a.layout(a.text.as_ref().unwrap().len()).unwrap().offset);
            }
            batches.push(batch);
        }
        assert!(a.state.epoch >= 3, "60 batches cover several epochs");
        assert!(offsets.len() > 1, "epochs start at different offsets");
        let mut b = make();
        for _ in 0..25 {
            b.next_batch().unwrap();
        }
        // Through a checkpoint's JSON.
        let saved = serde_json::to_string(&BatcherState::Contiguous(b.state())).unwrap();
        let Ok(BatcherState::Contiguous(state)) = serde_json::from_str(&saved) else {
            panic!("{saved} did not read back")
        };
        let mut c = make();
        c.restore(state);
        let resumed: Vec<LmBatch> = (0..35).map(|_| c.next_batch().unwrap().unwrap()).collect();
        assert_eq!(batches[25..], resumed[..]);
    }

    #[test]
    fn too_little_text_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let short = files(dir.path(), "a b\n");
        let mut batcher = ContiguousBatcher::new(short, false, vocab(), 4, 5, Some(1));
        let error = batcher.next_batch().unwrap_err().to_string();
        assert!(
            error.contains("c.txt") && error.contains("4 rows × 5 steps"),
            "{error}"
        );
        let blank = files(dir.path(), "\n\n");
        let mut batcher = ContiguousBatcher::new(blank, false, vocab(), 1, 5, None);
        let error = batcher.next_batch().unwrap_err().to_string();
        assert!(error.contains("no sentence"), "{error}");
    }
}
