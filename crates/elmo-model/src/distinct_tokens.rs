//! The distinct tokens of a host batch of char ids: the token encoder is context-free (Peters et
//! al. 2018 §3.4, bilm-tf's char CNN), so [`crate::BiLm`] encodes each distinct token once and
//! places its row at every position that holds it. Found on the host before the encoder runs;
//! a trainer finds the next batch's while the device runs a step (`elmo_train::StepInput`).

use std::borrow::Cow;
use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use crate::char_cnn::char_extent;
use crate::char_ids::{CharIdBatch, MAX_CHARS_PER_TOKEN};

/// A batch of char ids and its distinct tokens, in order of first appearance.
///
/// # Shapes
/// - [`Self::positions`]: `B * T` (row-major), each an index `< self.len()`
#[derive(Debug, Clone)]
pub struct DistinctTokens<'a> {
    batch: Cow<'a, CharIdBatch>,
    /// Per distinct token, the first position that holds it.
    first: Vec<usize>,
    /// Per distinct token, its characters before the padding ([`char_extent`]).
    extents: Vec<usize>,
    /// Per position, the index of its token in `first`.
    positions: Vec<usize>,
}

impl<'a> DistinctTokens<'a> {
    /// The distinct tokens of `batch`.
    pub fn of(batch: &'a CharIdBatch) -> Self {
        Self::new(Cow::Borrowed(batch))
    }

    /// The distinct tokens of `batch`, which they keep (a batch prepared ahead of its step).
    pub fn owning(batch: CharIdBatch) -> DistinctTokens<'static> {
        DistinctTokens::new(Cow::Owned(batch))
    }

    fn new(batch: Cow<'a, CharIdBatch>) -> Self {
        let mut index: FxHashMap<&[u16], usize> = FxHashMap::default();
        let mut first = Vec::new();
        let positions = (batch.ids.chunks_exact(MAX_CHARS_PER_TOKEN).enumerate())
            .map(|(position, token)| match index.entry(token) {
                Entry::Occupied(seen) => *seen.get(),
                Entry::Vacant(new) => {
                    first.push(position);
                    *new.insert(first.len() - 1)
                }
            })
            .collect();
        drop(index);
        let mut tokens = Self {
            batch,
            first,
            extents: Vec::new(),
            positions,
        };
        tokens.extents = (0..tokens.len())
            .map(|u| char_extent(tokens.token(u)))
            .collect();
        tokens
    }

    /// The batch.
    pub fn batch(&self) -> &CharIdBatch {
        &self.batch
    }

    /// Number of distinct tokens (`U`).
    pub fn len(&self) -> usize {
        self.first.len()
    }

    /// Whether the batch has no position.
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    /// The char ids of distinct token `u` (`MAX_CHARS_PER_TOKEN` of them).
    pub fn token(&self, u: usize) -> &[u16] {
        let start = self.first[u] * MAX_CHARS_PER_TOKEN;
        &self.batch.ids[start..start + MAX_CHARS_PER_TOKEN]
    }

    /// Characters of distinct token `u` before its padding ([`char_extent`]).
    pub fn extent(&self, u: usize) -> usize {
        self.extents[u]
    }

    /// For every position of the batch (row-major), the index of its distinct token.
    pub fn positions(&self) -> &[usize] {
        &self.positions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Positions holding the same characters share one index, numbered in order of first
    /// appearance, padding positions included (all padding tokens are one token).
    #[test]
    fn positions_share_the_index_of_their_first_appearance() {
        let batch = CharIdBatch::from_sentences(&[vec!["a", "bc", "a"], vec!["bc"]]);
        let tokens = DistinctTokens::of(&batch);
        // Row 1 is padded with two all-zero tokens.
        assert_eq!(tokens.positions(), &[0, 1, 0, 1, 2, 2]);
        assert_eq!(tokens.len(), 3);
        assert_eq!(tokens.token(1), &batch.ids[50..100]);
        assert!(tokens.token(2).iter().all(|&c| c == 0));
        // `a`: begin-of-word, `a`, end-of-word.
        assert_eq!(tokens.extent(0), 3);
        assert_eq!(tokens.extent(1), 4);
        let owned = DistinctTokens::owning(batch.clone());
        assert_eq!(owned.positions(), tokens.positions());
        assert_eq!(owned.batch(), &batch);
    }
}
