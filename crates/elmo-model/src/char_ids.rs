//! Character ids exactly as AllenNLP's `ELMoCharacterMapper` / `batch_to_ids` (allennlp/modules/elmo.py).
//!
//! Every token becomes 50 ids: `[BOW, utf-8 bytes (cut to 48, a multi-byte character may be split),
//! EOW, PAD, ...]`, then `+1` on every id so that 0 is free for batch padding. The literal tokens
//! `<S>` and `</S>` map to the sentence-boundary ids.

use crate::error::{ElmoError, Result};

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

    /// Builds a batch from raw ids `[B, T, 50]` (as `batch_to_ids` gives them, of any integer
    /// type); a token is real when any of its ids is non-zero, and a sentence's length is its
    /// number of real tokens (AllenNLP's mask).
    ///
    /// # Errors
    /// [`ElmoError::InvalidInput`] naming the place of the first id outside `0..`[`N_CHARACTERS`],
    /// or of a real token after a padding token (padding goes last, as `batch_to_ids` puts it),
    /// and for `ids` of another length than `B × T × 50`.
    pub fn from_ids<I: Copy + Into<i64>>(
        ids: &[I],
        n_sentences: usize,
        n_tokens: usize,
    ) -> Result<Self> {
        let expected = n_sentences
            .checked_mul(n_tokens)
            .and_then(|n| n.checked_mul(MAX_CHARS_PER_TOKEN));
        if expected != Some(ids.len()) {
            return Err(ElmoError::InvalidInput(format!(
                "char ids: {} values for [{n_sentences}, {n_tokens}, {MAX_CHARS_PER_TOKEN}]",
                ids.len()
            )));
        }
        let mut checked = Vec::with_capacity(ids.len());
        let mut lengths = vec![0; n_sentences];
        for (i, chars) in ids.chunks_exact(MAX_CHARS_PER_TOKEN).enumerate() {
            let (sentence, token) = (i / n_tokens, i % n_tokens);
            for (slot, &c) in chars.iter().enumerate() {
                let c: i64 = c.into();
                match u16::try_from(c) {
                    Ok(c) if usize::from(c) < N_CHARACTERS => checked.push(c),
                    _ => {
                        return Err(ElmoError::InvalidInput(format!(
                            "char ids: sentence {sentence}, token {token}, slot {slot}: id {c} \
                             is outside 0..{N_CHARACTERS}"
                        )));
                    }
                }
            }
            if chars.iter().any(|&c| c.into() != 0) {
                let length = &mut lengths[sentence];
                if *length < token {
                    return Err(ElmoError::InvalidInput(format!(
                        "char ids: sentence {sentence}: token {length} is padding (all zeros) \
                         but token {token} after it is not; padding goes after a sentence's \
                         tokens"
                    )));
                }
                *length += 1;
            }
        }
        Ok(Self {
            ids: checked,
            n_sentences,
            n_tokens,
            lengths,
        })
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
    fn raw_ids_are_the_batch_of_their_sentences() {
        let batch = CharIdBatch::from_sentences(&[vec!["ab", "c"], vec![], vec!["é"]]);
        let wide: Vec<i64> = batch.ids.iter().map(|&c| i64::from(c)).collect();
        assert_eq!(CharIdBatch::from_ids(&wide, 3, 2).unwrap(), batch);
        assert_eq!(CharIdBatch::from_ids(&batch.ids, 3, 2).unwrap(), batch);
        assert_eq!(batch.lengths, [2, 0, 1]);
        let empty = CharIdBatch::from_ids::<u16>(&[], 4, 0).unwrap();
        assert_eq!(empty.lengths, [0; 4]);

        let refused = |ids: &[i64], words: &[&str]| {
            let error = CharIdBatch::from_ids(ids, 3, 2).unwrap_err().to_string();
            for word in words {
                assert!(error.contains(word), "{error:?} does not name {word:?}");
            }
        };
        let mut ids = wide.clone();
        ids[2 * 50 + 3] = -1;
        refused(&ids, &["sentence 1", "token 0", "slot 3", "id -1"]);
        ids[2 * 50 + 3] = 70_000;
        refused(&ids, &["sentence 1", "token 0", "slot 3", "id 70000"]);
        refused(&wide[1..], &["299 values", "[3, 2, 50]"]);
        let mut ids = wide.clone();
        ids[5 * 50] = 1; // sentence 2's second token, after its first
        assert_eq!(
            CharIdBatch::from_ids(&ids, 3, 2).unwrap().lengths,
            [2, 0, 2]
        );
        ids[4 * 50..5 * 50].fill(0); // its first now padding
        refused(&ids, &["sentence 2", "token 0 is padding", "token 1"]);
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
        assert_eq!(CharIdBatch::from_ids(&batch.ids, 2, 2).unwrap(), batch);
    }
}
