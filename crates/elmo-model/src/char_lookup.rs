//! The token encoder's convolution windows (Peters et al. 2018, §3.4) made outside autodiff,
//! for a training step that sums the char embedding's gradient itself: each convolution's
//! windows of looked-up chars are an autodiff leaf, and their gradients go into the table's rows
//! by char id in a fixed order ([`elmo_kernels::sum_row_groups`], in elmo-train's
//! `encoder_backward`). Under autodiff, the lookup's and the windows' gradients are burn's
//! scatter-adds, which add atomically on CUDA (the last bits vary from run to run) and, for the
//! lookup on WGSL, walk all of a step's ~300,000 char positions in one unit per column.

use burn::tensor::Tensor;

/// The windows of a chunk of tokens as autodiff leaves
/// ([`crate::CharCnnEncoder::convolutions_by_hand`]).
#[derive(Debug, Clone)]
pub struct CharLookup {
    /// Each convolution's windows, for each piece of the chunk.
    pub windows: Vec<WindowLeaves>,
    /// `[E]`: the padding char's embedding as the convolutions read it past the longest word
    /// (an autodiff leaf), where they do.
    pub padding_char: Option<Tensor<1>>,
}

/// One convolution's windows ([`crate::char_cnn::CharConvolution::windows`]) as a leaf, and
/// the char each of their slots holds.
#[derive(Debug, Clone)]
pub struct WindowLeaves {
    /// `[n, n_positions, width · E]`: an autodiff leaf.
    pub windows: Tensor<3>,
    /// The `n · n_positions · width` char ids of the windows' slots, row-major: slot `k` of
    /// window `p` of token `t` is slot `p + k` of the token.
    pub ids: Vec<usize>,
}

impl WindowLeaves {
    /// `windows` made a leaf, with the char ids of its slots from `host_ids` (the tokens' ids,
    /// `n_slots` a token, row-major).
    ///
    /// # Shapes
    /// - windows: `[n, n_positions, width · E]`
    ///
    /// # Panics
    /// If `host_ids` has not `n · n_slots` values, a window passes `n_slots` or an id is
    /// negative.
    pub(crate) fn new(windows: Tensor<3>, width: usize, host_ids: &[i64], n_slots: usize) -> Self {
        let [n, n_positions, _] = windows.dims();
        assert_eq!(
            host_ids.len(),
            n * n_slots,
            "host ids of the windows' tokens"
        );
        assert!(n_positions + width <= n_slots + 1, "windows past the slots");
        let mut ids = Vec::with_capacity(n * n_positions * width);
        for token in host_ids.chunks(n_slots) {
            for p in 0..n_positions {
                ids.extend(
                    token[p..p + width]
                        .iter()
                        .map(|&id| usize::try_from(id).expect("char ids are not negative")),
                );
            }
        }
        Self {
            windows: windows.autodiff().require_grad(),
            ids,
        }
    }
}
