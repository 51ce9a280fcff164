//! Character ids exactly as AllenNLP's `ELMoCharacterMapper` / `batch_to_ids` (allennlp/modules/elmo.py).
//!
//! Every token becomes 50 ids: `[BOW, utf-8 bytes (cut to 48, a multi-byte character may be split),
//! EOW, PAD, ...]`, then `+1` on every id so that 0 is free for batch padding. The literal tokens
//! `<S>` and `</S>` map to the sentence-boundary ids.

/// Character slots per token.
pub const MAX_CHARS_PER_TOKEN: usize = 50;
/// Size of the character vocabulary: 256 bytes, 5 markers, and the padding id 0.
pub const N_CHARACTERS: usize = 262;
/// Bytes kept from a token (two slots go to the begin- and end-of-word markers).
pub const MAX_TOKEN_BYTES: usize = MAX_CHARS_PER_TOKEN - 2;

const BOS_CHAR: u16 = 256;
const EOS_CHAR: u16 = 257;
const BOW_CHAR: u16 = 258;
const EOW_CHAR: u16 = 259;
const PAD_CHAR: u16 = 260;

/// The literal token that stands for the start of a sentence.
pub const BOS_TOKEN: &str = "<S>";
/// The literal token that stands for the end of a sentence.
pub const EOS_TOKEN: &str = "</S>";

/// The 50 character ids (already `+1`) of one token.
pub type TokenCharIds = [u16; MAX_CHARS_PER_TOKEN];

fn marker_token(marker: u16) -> TokenCharIds {
    let mut ids = [PAD_CHAR + 1; MAX_CHARS_PER_TOKEN];
    ids[0] = BOW_CHAR + 1;
    ids[1] = marker + 1;
    ids[2] = EOW_CHAR + 1;
    ids
}

/// Character ids of the sentence-start token `<S>`.
pub fn bos_char_ids() -> TokenCharIds {
    marker_token(BOS_CHAR)
}

/// Character ids of the sentence-end token `</S>`.
pub fn eos_char_ids() -> TokenCharIds {
    marker_token(EOS_CHAR)
}

/// Character ids of one token, AllenNLP's `convert_word_to_char_ids` followed by the `+1` shift.
pub fn token_to_char_ids(token: &str) -> TokenCharIds {
    if token == BOS_TOKEN {
        return bos_char_ids();
    }
    if token == EOS_TOKEN {
        return eos_char_ids();
    }
    let bytes = token.as_bytes();
    let bytes = &bytes[..bytes.len().min(MAX_TOKEN_BYTES)];
    let mut ids = [PAD_CHAR + 1; MAX_CHARS_PER_TOKEN];
    ids[0] = BOW_CHAR + 1;
    for (slot, &b) in ids[1..].iter_mut().zip(bytes) {
        *slot = u16::from(b) + 1;
    }
    ids[bytes.len() + 1] = EOW_CHAR + 1;
    ids
}

/// A padded batch of character ids, row-major `[n_sentences, n_tokens, 50]`, as `batch_to_ids`.
///
/// # Shapes
/// - `ids`: `n_sentences * n_tokens * 50` values; padding tokens are all zeros.
/// - `lengths`: `n_sentences` token counts (the mask is `position < length`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharIdBatch {
    /// The ids, zero for padding.
    pub ids: Vec<u16>,
    /// Number of sentences (`B`).
    pub n_sentences: usize,
    /// Length of the longest sentence (`T`).
    pub n_tokens: usize,
    /// Number of real tokens in each sentence.
    pub lengths: Vec<usize>,
}

impl CharIdBatch {
    /// Converts tokenised sentences to character ids (AllenNLP's `batch_to_ids`).
    ///
    /// An empty sentence gives an all-zero row; an empty token `""` is a real token
    /// (`[BOW, EOW, PAD..]`).
    pub fn from_sentences<T: AsRef<[S]>, S: AsRef<str>>(sentences: &[T]) -> Self {
        let n_sentences = sentences.len();
        let n_tokens = sentences
            .iter()
            .map(|s| s.as_ref().len())
            .max()
            .unwrap_or(0);
        let mut ids = vec![0u16; n_sentences * n_tokens * MAX_CHARS_PER_TOKEN];
        for (row, sentence) in sentences.iter().enumerate() {
            for (t, token) in sentence.as_ref().iter().enumerate() {
                let start = (row * n_tokens + t) * MAX_CHARS_PER_TOKEN;
                ids[start..start + MAX_CHARS_PER_TOKEN]
                    .copy_from_slice(&token_to_char_ids(token.as_ref()));
            }
        }
        Self {
            ids,
            n_sentences,
            n_tokens,
            lengths: sentences.iter().map(|s| s.as_ref().len()).collect(),
        }
    }

    /// Builds a batch from raw ids `[B, T, 50]`; a token is real when any of its ids is non-zero,
    /// and a sentence's length is its number of real tokens (AllenNLP's mask).
    pub fn from_ids(ids: Vec<u16>, n_sentences: usize, n_tokens: usize) -> Self {
        assert_eq!(ids.len(), n_sentences * n_tokens * MAX_CHARS_PER_TOKEN);
        let lengths = (0..n_sentences)
            .map(|row| {
                (0..n_tokens)
                    .filter(|t| {
                        let start = (row * n_tokens + t) * MAX_CHARS_PER_TOKEN;
                        ids[start..start + MAX_CHARS_PER_TOKEN]
                            .iter()
                            .any(|&c| c != 0)
                    })
                    .count()
            })
            .collect();
        Self {
            ids,
            n_sentences,
            n_tokens,
            lengths,
        }
    }

    /// Adds `<S>` before and `</S>` after every sentence (AllenNLP's
    /// `add_sentence_boundary_token_ids`): the result has `T + 2` positions, and an empty sentence
    /// becomes `[<S>, </S>]`.
    pub fn with_sentence_boundaries(&self) -> Self {
        let n_tokens = self.n_tokens + 2;
        let mut ids = vec![0u16; self.n_sentences * n_tokens * MAX_CHARS_PER_TOKEN];
        let (bos, eos) = (bos_char_ids(), eos_char_ids());
        for (row, &length) in self.lengths.iter().enumerate() {
            let src = row * self.n_tokens * MAX_CHARS_PER_TOKEN;
            let dst = row * n_tokens * MAX_CHARS_PER_TOKEN;
            let width = self.n_tokens * MAX_CHARS_PER_TOKEN;
            ids[dst + MAX_CHARS_PER_TOKEN..dst + MAX_CHARS_PER_TOKEN + width]
                .copy_from_slice(&self.ids[src..src + width]);
            ids[dst..dst + MAX_CHARS_PER_TOKEN].copy_from_slice(&bos);
            let eos_at = dst + (length + 1) * MAX_CHARS_PER_TOKEN;
            ids[eos_at..eos_at + MAX_CHARS_PER_TOKEN].copy_from_slice(&eos);
        }
        Self {
            ids,
            n_sentences: self.n_sentences,
            n_tokens,
            lengths: self.lengths.iter().map(|l| l + 2).collect(),
        }
    }

    /// The mask, row-major `[B, T]`, `true` for real tokens.
    pub fn mask(&self) -> Vec<bool> {
        self.lengths
            .iter()
            .flat_map(|&l| (0..self.n_tokens).map(move |t| t < l))
            .collect()
    }

    /// Total number of real tokens.
    pub fn n_real_tokens(&self) -> usize {
        self.lengths.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ascii_token() {
        let ids = token_to_char_ids("ab");
        assert_eq!(&ids[..4], &[259, 98, 99, 260]);
        assert!(ids[4..].iter().all(|&c| c == 261));
    }

    #[test]
    fn long_token_cut_to_48_bytes_even_inside_a_character() {
        let token = format!("{}é", "x".repeat(47));
        let ids = token_to_char_ids(&token);
        // 47 x's, then only the first byte of é (0xC3), then EOW in the last slot.
        assert_eq!(ids[48], 0xC3 + 1);
        assert_eq!(ids[49], 260);
    }

    #[test]
    fn boundary_literals() {
        assert_eq!(token_to_char_ids("<S>"), bos_char_ids());
        assert_eq!(token_to_char_ids("</S>"), eos_char_ids());
        assert_eq!(&bos_char_ids()[..3], &[259, 257, 260]);
    }

    #[test]
    fn empty_sentence_gets_boundaries_only() {
        let batch = CharIdBatch::from_sentences(&[vec!["a", "b"], vec![]]);
        assert_eq!(batch.lengths, vec![2, 0]);
        assert!(batch.ids[100..].iter().all(|&c| c == 0));
        let with = batch.with_sentence_boundaries();
        assert_eq!(with.lengths, vec![4, 2]);
        let row1 = &with.ids[4 * 50..];
        assert_eq!(&row1[..50], &bos_char_ids());
        assert_eq!(&row1[50..100], &eos_char_ids());
        assert!(row1[100..].iter().all(|&c| c == 0));
        assert_eq!(
            CharIdBatch::from_ids(batch.ids.clone(), 2, 2).lengths,
            vec![2, 0]
        );
    }
}
