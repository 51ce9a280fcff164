//! One batch of the joint biLM loss (bilm-tf `bilm/data.py`'s `X`/`Y` pairs): the token grids the
//! two directions read and the targets they predict, made by [`crate::batcher`].

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
    /// Sentence mode: one grid, the backward LM reads each row right to left.
    Sentences {
        /// One sentence (piece) per row, with boundaries.
        tokens: TokenGrid,
        /// Real length of each row.
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
