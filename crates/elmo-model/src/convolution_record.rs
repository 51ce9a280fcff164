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
    /// The slots of each token `record`'s windows read (of a convolution of `width`): the first
    /// `n_positions + width − 1` for [`RecordedWindows::Flat`], all of them for
    /// [`RecordedWindows::Chars`].
    ///
    /// # Panics
    /// If `record` is not one of this chunk's.
    pub fn slots_read(&self, record: &ConvolutionRecord, width: usize) -> usize {
        let n_slots = self.ids.len() / self.n_rows;
        match &record.windows {
            RecordedWindows::Flat { windows, .. } => {
                (windows.dims()[0] / record.rows.len() + width - 1).min(n_slots)
            }
            RecordedWindows::Chars { .. } => n_slots,
        }
    }

    /// The char ids of the first `n_slots` slots of the chunk's tokens `rows`, a token's slots
    /// in a row: the ids of the rows of their slots' gradient `[rows.len(), n_slots, E]`
    /// reshaped to `[_, E]`.
    ///
    /// # Panics
    /// If `rows` passes the chunk's rows, `n_slots` its tokens' slots, or an id is negative.
    pub fn slot_char_ids(&self, rows: Range<usize>, n_slots: usize) -> Vec<usize> {
        let slots = self.ids.len() / self.n_rows;
        assert!(n_slots <= slots, "{n_slots} of {slots} slots");
        let ids = &self.ids[rows.start * slots..rows.end * slots];
        ids.chunks(slots)
            .flat_map(|token| &token[..n_slots])
            .map(|&id| usize::try_from(id).expect("char ids are not negative"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    /// A chunk of two tokens of 4 slots and a record of windows of width 3 at 2 positions.
    fn chunk_and_record() -> (ConvolvedChunk, ConvolutionRecord) {
        let device = Device::flex();
        let record = ConvolutionRecord {
            convolution: 0,
            rows: 0..2,
            columns: 0..1,
            windows: RecordedWindows::Flat {
                windows: Tensor::zeros([2 * 2, 3], &device),
                argmax: Tensor::from_data(TensorData::new(vec![0i64, 1], [2, 1, 1]), &device),
            },
            padding: None,
            output: Tensor::zeros([2, 1], &device),
        };
        let chunk = ConvolvedChunk {
            start: 0,
            n_kept: 2,
            n_rows: 2,
            ids: vec![1, 2, 3, 4, 5, 6, 7, 8],
            convolutions: vec![record.clone()],
        };
        (chunk, record)
    }

    /// Windows of width 3 at 2 positions read the first 4 slots; the ids of the first slots
    /// of each token follow the tokens.
    #[test]
    fn slots_and_their_char_ids_follow_the_tokens() {
        let (chunk, record) = chunk_and_record();
        assert_eq!(chunk.slots_read(&record, 3), 4);
        assert_eq!(chunk.slots_read(&record, 2), 3);
        assert_eq!(chunk.slot_char_ids(0..2, 3), vec![1, 2, 3, 5, 6, 7]);
        assert_eq!(chunk.slot_char_ids(1..2, 4), vec![5, 6, 7, 8]);
    }
}
