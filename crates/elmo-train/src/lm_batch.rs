//! One batch of the joint biLM loss (bilm-tf `bilm/data.py`'s `X`/`Y` pairs): the token grids the
//! two directions read and the targets they predict, made by [`crate::batcher`], and the two
//! streams, both read left to right, that the model runs for either kind of batch.

use std::borrow::Cow;

/// Rows of tokens (strings: the model reads characters).
///
/// # Shapes
/// `B` rows of at most `n_steps` tokens; shorter rows are padding at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenGrid {
    /// The tokens of each row.
    pub rows: Vec<Vec<String>>,
    /// Width of the grid (`T`).
    pub n_steps: usize,
}

/// Prediction targets of one direction, row-major over the grid.
///
/// # Shapes
/// `ids`, `weights`: `[B * T]`; weight 1 for a real target, 0 for none (padding, `</S>` inputs).
#[derive(Debug, Clone, PartialEq)]
pub struct Targets {
    /// Vocabulary ids of the tokens to predict.
    pub ids: Vec<u32>,
    /// 1.0 where there is a target, else 0.0.
    pub weights: Vec<f32>,
}

impl Targets {
    /// Number of real targets.
    pub fn count(&self) -> usize {
        self.weights.iter().filter(|&&w| w > 0.0).count()
    }
}

/// One batch of the joint loss.
#[derive(Debug, Clone, PartialEq)]
pub enum LmBatch {
    /// Stateful mode: the two directions read different streams, both left to right.
    Packed {
        /// Forward stream.
        forward: TokenGrid,
        /// Reversed stream.
        backward: TokenGrid,
        /// Next-token targets of the forward stream.
        forward_targets: Targets,
        /// Next-token targets of the reversed stream.
        backward_targets: Targets,
    },
    /// Sentence mode: one grid, the backward LM reads each row right to left, from its last
    /// token; every row starts from a zero state.
    Sentences {
        /// One sentence (piece) per row, with boundaries.
        tokens: TokenGrid,
        /// Real length of each row (its number of tokens).
        lengths: Vec<usize>,
        /// Next-token targets.
        forward_targets: Targets,
        /// Previous-token targets.
        backward_targets: Targets,
    },
}

/// An all-padding grid, for a direction that ran out before the other.
pub(crate) fn empty_grid((n_rows, n_steps): (usize, usize)) -> (TokenGrid, Targets) {
    (
        TokenGrid {
            rows: vec![Vec::new(); n_rows],
            n_steps,
        },
        Targets {
            ids: vec![0; n_rows * n_steps],
            weights: vec![0.0; n_rows * n_steps],
        },
    )
}

/// The two streams the directions of a batch read, both left to right, with their targets
/// ([`LmBatch::streams`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Streams<'a> {
    /// The forward stream, then the reversed one.
    pub(crate) grids: [Cow<'a, TokenGrid>; 2],
    /// Each stream's targets, row-major over its grid.
    pub(crate) targets: [Cow<'a, Targets>; 2],
    /// Whether the LSTM state carries over from the batch before (packed batches); else every
    /// row starts from a zero state (sentences).
    pub(crate) carries_state: bool,
}

impl TokenGrid {
    /// Rows `rows` of the grid, the same width.
    fn rows(&self, rows: std::ops::Range<usize>) -> Self {
        Self {
            rows: self.rows[rows].to_vec(),
            n_steps: self.n_steps,
        }
    }
}

impl Targets {
    /// The targets of rows `rows` of a grid `n_steps` wide.
    fn rows(&self, rows: std::ops::Range<usize>, n_steps: usize) -> Self {
        let cells = rows.start * n_steps..rows.end * n_steps;
        Self {
            ids: self.ids[cells.clone()].to_vec(),
            weights: self.weights[cells].to_vec(),
        }
    }
}

impl LmBatch {
    /// Rows in the batch (`B`).
    pub fn n_rows(&self) -> usize {
        match self {
            LmBatch::Packed { forward, .. } => forward.rows.len(),
            LmBatch::Sentences { tokens, .. } => tokens.rows.len(),
        }
    }

    /// The batch cut by rows into `parts` slices of `⌈B / parts⌉` rows, in order (bilm-tf's
    /// towers: `X[k · B : (k + 1) · B]`); the last slices are shorter, or absent, where `B` is
    /// not a multiple of `parts`.
    pub(crate) fn split_rows(&self, parts: usize) -> Vec<LmBatch> {
        let n_rows = self.n_rows();
        let per = n_rows.div_ceil(parts.max(1)).max(1);
        (0..n_rows)
            .step_by(per)
            .map(|start| {
                let rows = start..(start + per).min(n_rows);
                match self {
                    LmBatch::Packed {
                        forward,
                        backward,
                        forward_targets,
                        backward_targets,
                    } => LmBatch::Packed {
                        forward: forward.rows(rows.clone()),
                        backward: backward.rows(rows.clone()),
                        forward_targets: forward_targets.rows(rows.clone(), forward.n_steps),
                        backward_targets: backward_targets.rows(rows, backward.n_steps),
                    },
                    LmBatch::Sentences {
                        tokens,
                        lengths,
                        forward_targets,
                        backward_targets,
                    } => LmBatch::Sentences {
                        tokens: tokens.rows(rows.clone()),
                        lengths: lengths[rows.clone()].to_vec(),
                        forward_targets: forward_targets.rows(rows.clone(), tokens.n_steps),
                        backward_targets: backward_targets.rows(rows, tokens.n_steps),
                    },
                }
            })
            .collect()
    }

    /// The streams the model runs: a packed batch's as they are; a sentence batch's rows as they
    /// are and each reversed within its length, its previous-token targets moved with their
    /// positions. Reading a row reversed left to right is reading it right to left from its
    /// last token, as AllenNLP's `LstmCellWithProjection` runs `go_forward=False` rows of
    /// different lengths; the positions past a row's length come after its tokens in both
    /// streams, so they change none of its outputs.
    pub(crate) fn streams(&self) -> Streams<'_> {
        match self {
            LmBatch::Packed {
                forward,
                backward,
                forward_targets,
                backward_targets,
            } => Streams {
                grids: [Cow::Borrowed(forward), Cow::Borrowed(backward)],
                targets: [
                    Cow::Borrowed(forward_targets),
                    Cow::Borrowed(backward_targets),
                ],
                carries_state: true,
            },
            LmBatch::Sentences {
                tokens,
                lengths,
                forward_targets,
                backward_targets,
            } => {
                let n_steps = tokens.n_steps;
                let mut reversed_targets = backward_targets.clone();
                let rows = (tokens.rows.iter().zip(lengths).enumerate())
                    .map(|(r, (row, &length))| {
                        let row_start = r * n_steps;
                        for t in 0..length {
                            let (from, to) = (row_start + t, row_start + length - 1 - t);
                            reversed_targets.ids[to] = backward_targets.ids[from];
                            reversed_targets.weights[to] = backward_targets.weights[from];
                        }
                        let (kept, rest) = row.split_at(length.min(row.len()));
                        kept.iter().rev().chain(rest).cloned().collect()
                    })
                    .collect();
                Streams {
                    grids: [
                        Cow::Borrowed(tokens),
                        Cow::Owned(TokenGrid { rows, n_steps }),
                    ],
                    targets: [Cow::Borrowed(forward_targets), Cow::Owned(reversed_targets)],
                    carries_state: false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(rows: &[&[&str]], n_steps: usize) -> TokenGrid {
        TokenGrid {
            rows: (rows.iter())
                .map(|row| row.iter().map(|t| t.to_string()).collect())
                .collect(),
            n_steps,
        }
    }

    /// bilm-tf's tower slices: rows `k · ⌈B / K⌉ …` with their targets (and a sentence batch's
    /// lengths), the last slice shorter where `K` does not divide `B`.
    #[test]
    fn a_batch_splits_into_slices_of_rows() {
        let tokens = grid(&[&["a", "b"], &["c"], &["d", "e"]], 2);
        let targets = |base: u32| Targets {
            ids: (base..base + 6).collect(),
            weights: vec![1.0, 1.0, 1.0, 0.0, 1.0, 1.0],
        };
        let batch = LmBatch::Sentences {
            tokens: tokens.clone(),
            lengths: vec![2, 1, 2],
            forward_targets: targets(0),
            backward_targets: targets(10),
        };
        let parts = batch.split_rows(2);
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[1],
            LmBatch::Sentences {
                tokens: grid(&[&["d", "e"]], 2),
                lengths: vec![2],
                forward_targets: Targets {
                    ids: vec![4, 5],
                    weights: vec![1.0, 1.0],
                },
                backward_targets: Targets {
                    ids: vec![14, 15],
                    weights: vec![1.0, 1.0],
                },
            }
        );
        assert_eq!(parts[0].n_rows(), 2);
        let packed = LmBatch::Packed {
            forward: tokens.clone(),
            backward: tokens,
            forward_targets: targets(0),
            backward_targets: targets(10),
        };
        let rows: Vec<usize> = packed.split_rows(3).iter().map(LmBatch::n_rows).collect();
        assert_eq!(rows, [1, 1, 1]);
        let LmBatch::Packed {
            backward_targets, ..
        } = &packed.split_rows(3)[1]
        else {
            panic!("a packed batch splits into packed batches");
        };
        assert_eq!(backward_targets.ids, [12, 13]);
        assert_eq!(packed.split_rows(1), std::slice::from_ref(&packed));
    }

    /// A sentence batch's reversed stream holds each row reversed within its length, and each
    /// previous-token target moves with its position; the forward stream is the batch's own.
    #[test]
    fn sentence_streams_reverse_each_row_within_its_length() {
        let tokens = grid(&[&["<S>", "a", "b", "</S>"], &["<S>", "c", "</S>"]], 4);
        // Row-major [2, 4]: the previous token's id (100 + position) where there is one.
        let backward_targets = Targets {
            ids: vec![0, 100, 101, 102, 0, 110, 111, 0],
            weights: vec![0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0],
        };
        let forward_targets = Targets {
            ids: vec![1, 2, 3, 0, 4, 5, 0, 0],
            weights: vec![1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        };
        let batch = LmBatch::Sentences {
            tokens: tokens.clone(),
            lengths: vec![4, 3],
            forward_targets: forward_targets.clone(),
            backward_targets,
        };
        let streams = batch.streams();
        assert!(!streams.carries_state);
        assert_eq!(*streams.grids[0], tokens);
        assert_eq!(*streams.targets[0], forward_targets);
        assert_eq!(
            *streams.grids[1],
            grid(&[&["</S>", "b", "a", "<S>"], &["</S>", "c", "<S>"]], 4)
        );
        assert_eq!(
            *streams.targets[1],
            Targets {
                ids: vec![102, 101, 100, 0, 111, 110, 0, 0],
                weights: vec![1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
            }
        );
        let packed = LmBatch::Packed {
            forward: tokens.clone(),
            backward: tokens.clone(),
            forward_targets: forward_targets.clone(),
            backward_targets: forward_targets,
        };
        let streams = packed.streams();
        assert!(streams.carries_state);
        assert!(matches!(streams.grids[1], Cow::Borrowed(_)));
    }
}
