//! `elmo embed --use-sentence-keys`: every line's dataset named by its sentence (AllenNLP's `elmo
//! --use-sentence-keys`), with the input checked before anything is computed: AllenNLP fails at
//! the first repeated sentence, after writing every line before it.

use std::collections::HashMap;

use anyhow::{Result, bail};

use crate::input::{InputText, SentenceReader};

/// The lines of an input by their sentence.
pub struct SentenceKeys {
    /// xxh3-128 of a line's sentence → its 0-based line number. (Two different sentences of one
    /// hash would be reported as a repeat; at 128 bits that does not happen.)
    lines: HashMap<u128, usize>,
}

fn key_hash(sentence: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(sentence.as_bytes())
}

/// Why `sentence` cannot name an HDF5 dataset, if it cannot.
fn unusable(sentence: &str) -> Option<String> {
    if sentence.is_empty() {
        Some("an empty line".into())
    } else {
        crate::hdf5_layout::unusable_name(sentence, "sentence")
    }
}

impl SentenceKeys {
    /// Reads every line of `input` (the same reader, and so the same errors, as the embedding
    /// pass): an error naming the line when its sentence cannot name a dataset or repeats an
    /// earlier line's.
    pub fn scan(input: &InputText, max_tokens: usize, tokenize: bool) -> Result<Self> {
        let mut reader = SentenceReader::open(input, max_tokens, tokenize)?;
        let mut lines = HashMap::new();
        while let Some(sentence) = reader.next_sentence()? {
            let line_number = sentence.index + 1;
            if let Some(problem) = unusable(&sentence.text) {
                bail!(
                    "{}:{line_number}: {problem} cannot name a dataset (--use-sentence-keys); \
                     without the flag datasets are named by line number",
                    input.label()
                );
            }
            if let Some(first) = lines.insert(key_hash(&sentence.text), sentence.index) {
                bail!(
                    "{}:{line_number}: the same sentence as line {} (--use-sentence-keys names \
                     each dataset by its sentence, so no two lines may be equal); without the \
                     flag datasets are named by line number",
                    input.label(),
                    first + 1
                );
            }
        }
        Ok(Self { lines })
    }

    /// The 0-based line whose sentence is `name`.
    pub fn line_of(&self, name: &str) -> Option<usize> {
        self.lines.get(&key_hash(name)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> Result<SentenceKeys> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.txt");
        std::fs::write(&path, text).expect("write");
        let input = InputText::open(&path, dir.path().join("unused")).expect("input");
        SentenceKeys::scan(&input, 100, false)
    }

    #[test]
    fn lines_are_found_by_their_sentence() {
        let keys = scan("the bank\n  a  b \nc\n").expect("scan");
        assert_eq!(keys.line_of("the bank"), Some(0));
        assert_eq!(keys.line_of("a  b"), Some(1));
        assert_eq!(keys.line_of("c"), Some(2));
        assert_eq!(keys.line_of("d"), None);
    }

    #[test]
    fn a_repeat_or_an_unusable_name_is_an_error_naming_its_line() {
        for (text, expected) in [
            ("a\nb\n a \n", "in.txt:3: the same sentence as line 1"),
            ("a\n\nb\n", "in.txt:2: an empty line"),
            ("a\n.\n", "in.txt:2: `.`"),
            ("a\nx / y\n", "in.txt:2: a sentence with `/`"),
            ("a\nx \0 y\n", "in.txt:2: a sentence with a NUL character"),
        ] {
            let error = format!("{:#}", scan(text).err().expect("an error"));
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }
}
