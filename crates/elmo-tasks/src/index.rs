//! A string ↔ id table for task words and labels, built from training data.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Words or labels with their ids. With `unknown`, id 1 stands for anything not in the table and
/// id 0 for padding; without, ids start at 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Index {
    /// The entries, by id.
    pub names: Vec<String>,
    /// Whether ids 0 and 1 are padding and unknown.
    pub unknown: bool,
    #[serde(skip)]
    ids: HashMap<String, usize>,
}

/// Padding word id (indexes with `unknown`).
pub const PADDING_ID: usize = 0;
/// Unknown word id (indexes with `unknown`).
pub const UNKNOWN_ID: usize = 1;

impl Index {
    /// Words seen at least `min_count` times (most frequent first, ties in first-seen order),
    /// after padding and unknown, at most `max_size` entries in all.
    pub fn words<'a>(
        tokens: impl IntoIterator<Item = &'a str>,
        min_count: usize,
        max_size: usize,
    ) -> Self {
        let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
        for token in tokens {
            let next = counts.len();
            counts.entry(token).or_insert((0, next)).0 += 1;
        }
        let mut entries: Vec<(&str, (usize, usize))> = counts
            .into_iter()
            .filter(|(_, (n, _))| *n >= min_count)
            .collect();
        entries.sort_by_key(|&(_, (n, first))| (std::cmp::Reverse(n), first));
        let names = ["<pad>", "<unk>"]
            .into_iter()
            .chain(entries.into_iter().map(|(w, _)| w))
            .take(max_size.max(2))
            .map(str::to_string)
            .collect();
        Self::from_names(names, true)
    }

    /// Labels in sorted order (stable across runs whatever the data order).
    pub fn labels<'a>(labels: impl IntoIterator<Item = &'a str>) -> Self {
        let mut names: Vec<String> = labels.into_iter().map(str::to_string).collect();
        names.sort();
        names.dedup();
        Self::from_names(names, false)
    }

    /// A table of the given entries.
    pub fn from_names(names: Vec<String>, unknown: bool) -> Self {
        let mut index = Self {
            names,
            unknown,
            ids: HashMap::new(),
        };
        index.rebuild();
        index
    }

    /// Restores the lookup table after deserialisation.
    pub fn rebuild(&mut self) {
        self.ids = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
    }

    /// Number of entries (padding and unknown included).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The id of `name`: unknown for unseen words, `None` for unseen labels.
    pub fn id(&self, name: &str) -> Option<usize> {
        self.ids
            .get(name)
            .copied()
            .or(self.unknown.then_some(UNKNOWN_ID))
    }

    /// The entry of an id.
    pub fn name(&self, id: usize) -> &str {
        &self.names[id]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_frequency_sorted_after_padding_and_unknown() {
        let index = Index::words("b a b c b a".split(' '), 2, 100);
        assert_eq!(index.names, ["<pad>", "<unk>", "b", "a"]);
        assert_eq!(index.id("c"), Some(UNKNOWN_ID));
        let labels = Index::labels(["O", "B-x", "O"]);
        assert_eq!(labels.names, ["B-x", "O"]);
        assert_eq!(labels.id("I-x"), None);
    }
}
