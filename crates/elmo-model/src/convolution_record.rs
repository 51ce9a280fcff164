//! The token encoder's convolutions (Peters et al. 2018, §3.4; Kim et al. 2016) run outside
//! autodiff with what their backward pass needs, for a training step that differentiates them by
//! hand (elmo-train's `encoder_backward`): its products then run as every other product of the
//! step (cuBLAS on CUDA, the kernel of their shape on wgpu, 16-bit operands with `f32`
//! accumulation in mixed precision), and the char embedding's gradient is summed by char id in a
//! fixed order, where autodiff's scatter-adds add atomically on CUDA.

use std::ops::Range;

use burn::tensor::{Bool, Int, Tensor};

/// One convolution's pass over one piece of a chunk of tokens
/// ([`crate::CharCnnEncoder::convolutions_recorded`]).
#[derive(Debug, Clone)]
pub struct ConvolutionRecord {
    /// Which of the encoder's convolutions.
    pub convolution: usize,
    /// The piece's rows (tokens) in its chunk.
    pub rows: Range<usize>,
    /// The convolution's columns in the concatenated filters.
    pub columns: Range<usize>,
    /// The windows the convolution read.
    pub windows: RecordedWindows,
    /// Where the windows stop before the last: the all-padding window and where its value is
    /// the largest.
    pub padding: Option<PaddingWindow>,
    /// `[n, F]`: the activated output.
    pub output: Tensor<2>,
}

/// What a convolution's backward pass reads its windows from.
#[derive(Debug, Clone)]
// A record per convolution and chunk (a few a step): the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum RecordedWindows {
    /// The windows as burn's operations ran them.
    Flat {
        /// `[n · n_positions, width · E]`: the windows of looked-up chars
        /// ([`crate::char_cnn::CharConvolution::windows`], flat).
        windows: Tensor<2>,
        /// `[n, 1, F]`: the position of each filter's largest value over the windows.
        argmax: Tensor<3, Int>,
    },
    /// The windows as the host read them in place (`elmo_kernels::host_window_max`, on flex).
    Chars {
        /// `[n, S, E]`: the looked-up chars of the record's tokens.
        chars: Tensor<3>,
        /// `[n, F]` row-major: the position of each filter's largest value over the windows.
        positions: Vec<u32>,
    },
}

/// The window of padding chars that stands for the windows past the longest token of a chunk
/// ([`crate::char_cnn::CharConvolution::forward_with_extent`]).
#[derive(Debug, Clone)]
pub struct PaddingWindow {
    /// `[1, width · E]`: the padding char's embedding, `width` times.
    pub window: Tensor<2>,
    /// `[n, F]`: where its value is larger than every computed window's (the max's gradient
    /// goes to it there).
    pub wins: Tensor<2, Bool>,
}

/// A chunk of distinct tokens through the convolutions outside autodiff
/// ([`crate::BiLm::convolve_tokens`]).
#[derive(Debug, Clone)]
pub struct ConvolvedChunk {
    /// The chunk's first row in the distinct tokens' convolutions.
    pub start: usize,
    /// Its tokens there (`n_kept`); the chunk ran `n_rows` (completed with all-padding tokens
    /// whose values were dropped).
    pub n_kept: usize,
    /// The rows the chunk ran.
    pub n_rows: usize,
    /// The char ids of the `n_rows` tokens the chunk ran, a token's slots in a row, row-major.
    pub ids: Vec<i64>,
    /// Each convolution's pass over each piece of the chunk.
    pub convolutions: Vec<ConvolutionRecord>,
}

impl ConvolvedChunk {
    /// The char ids of the rows of `record`'s windows' gradient reshaped to `[_, E]` (of a
    /// convolution of `width`), row-major: for [`RecordedWindows::Flat`], slot `k` of window
    /// `p` of token `t` is slot `p + k` of the token; for [`RecordedWindows::Chars`], the
    /// tokens' slots.
    ///
    /// # Panics
    /// If `record` is not one of this chunk's, or `width` not its convolution's.
    pub fn slot_ids(&self, record: &ConvolutionRecord, width: usize) -> Vec<usize> {
        let n_slots = self.ids.len() / self.n_rows;
        let ids = &self.ids[record.rows.start * n_slots..record.rows.end * n_slots];
        match &record.windows {
            RecordedWindows::Flat { windows, .. } => {
                let n_positions = windows.dims()[0] / record.rows.len();
                window_ids(ids, n_positions, width, n_slots)
            }
            RecordedWindows::Chars { .. } => window_ids(ids, n_slots, 1, n_slots),
        }
    }
}

/// The char ids of the slots of `n_positions` windows of `width` slots of every token in
/// `host_ids` (`n_slots` ids a token, row-major), in the order of
/// [`ConvolvedChunk::slot_ids`].
///
/// # Panics
/// If a window passes `n_slots`, `host_ids` does not hold whole tokens, or an id is negative.
fn window_ids(host_ids: &[i64], n_positions: usize, width: usize, n_slots: usize) -> Vec<usize> {
    assert!(n_positions + width <= n_slots + 1, "windows past the slots");
    assert_eq!(host_ids.len() % n_slots, 0, "host ids of whole tokens");
    let mut ids = Vec::with_capacity(host_ids.len() / n_slots * n_positions * width);
    for token in host_ids.chunks(n_slots) {
        for p in 0..n_positions {
            ids.extend(
                token[p..p + width]
                    .iter()
                    .map(|&id| usize::try_from(id).expect("char ids are not negative")),
            );
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slot `k` of window `p` of token `t` is slot `p + k` of the token.
    #[test]
    fn window_ids_follow_the_windows_layout() {
        let host = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(
            window_ids(&host, 2, 3, 4),
            vec![1, 2, 3, 2, 3, 4, 5, 6, 7, 6, 7, 8]
        );
        assert_eq!(window_ids(&host, 4, 1, 4), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
