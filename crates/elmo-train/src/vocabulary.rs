//! The output vocabulary of the language model (bilm-tf's `vocab.txt`, read as bilm-tf's
//! `Vocabulary` in bilm/data.py): one token per line, the corpus tokens from most to least
//! frequent, with `<S>`, `</S>`, `<UNK>` where the file lists them (`elmo vocab` writes them first;
//! the 1B Word Benchmark's `vocab-2016-09-10.txt` starts `</S>`, `<S>`, `<UNK>`).
//!
//! Inputs are always characters; the vocabulary only indexes the softmax.

use std::collections::HashMap;
use std::path::Path;

use elmo_model::python_text::{is_python_space, python_strip};

use crate::corpus::{for_each_line, read_lines};
use crate::error::{Result, TrainError, io_error};

/// Beginning of sentence.
pub const BOS: &str = "<S>";
/// End of sentence.
pub const EOS: &str = "</S>";
/// Unknown token.
pub const UNK: &str = "<UNK>";
/// The last line of the 1B Word Benchmark's vocabulary, not a token (bilm-tf skips it).
const MAX_TERM_ID: &str = "!!!MAXTERMID";

/// Options of [`Vocabulary::build`].
#[derive(Debug, Clone, Copy)]
pub struct VocabularyOptions {
    /// Keep tokens seen at least this often.
    pub min_count: u64,
    /// Keep at most this many entries in total (the three special tokens included).
    pub max_size: Option<usize>,
}

impl Default for VocabularyOptions {
    fn default() -> Self {
        Self {
            min_count: 1,
            max_size: None,
        }
    }
}

/// Token ↔ id mapping (an id is a token's position); `<S>`, `</S>` and `<UNK>` are always in it,
/// at ids 0, 1, 2 unless a file put them elsewhere ([`Self::from_file`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Vocabulary {
    tokens: Vec<String>,
    index: HashMap<String, u32>,
    bos_id: u32,
    eos_id: u32,
    unk_id: u32,
}

impl Vocabulary {
    /// A vocabulary from tokens given most frequent first (special tokens are added in front).
    pub fn from_tokens<I: IntoIterator<Item = String>>(tokens: I) -> Self {
        let mut unique = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for token in [BOS, EOS, UNK].map(String::from).into_iter().chain(tokens) {
            if seen.insert(token.clone()) {
                unique.push(token);
            }
        }
        Self::in_order(unique)
    }

    /// The vocabulary of distinct `tokens` in id order, `<S>`, `</S>` and `<UNK>` among them.
    fn in_order(tokens: Vec<String>) -> Self {
        let index: HashMap<String, u32> = (tokens.iter().enumerate())
            .map(|(id, token)| (token.clone(), id as u32))
            .collect();
        let [bos_id, eos_id, unk_id] = [BOS, EOS, UNK].map(|special| index[special]);
        Self {
            tokens,
            index,
            bos_id,
            eos_id,
            unk_id,
        }
    }

    /// Builds a vocabulary from token counts: frequency-sorted (ties by token), `min_count` and
    /// `max_size` applied.
    pub fn from_counts(counts: HashMap<String, u64>, options: VocabularyOptions) -> Self {
        let mut entries: Vec<(String, u64)> = counts
            .into_iter()
            .filter(|(token, count)| {
                *count >= options.min_count && ![BOS, EOS, UNK].contains(&token.as_str())
            })
            .collect();
        entries.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if let Some(max) = options.max_size {
            entries.truncate(max.saturating_sub(3));
        }
        Self::from_tokens(entries.into_iter().map(|(token, _)| token))
    }

    /// Counts the tokens of corpus files (one sentence per line) and builds the vocabulary.
    pub fn build(
        files: &[std::path::PathBuf],
        tokenize: bool,
        options: VocabularyOptions,
        mut on_line: impl FnMut(u64),
    ) -> Result<Self> {
        let mut counts: HashMap<String, u64> = HashMap::new();
        for file in files {
            read_lines(file, |_, line| {
                let tokens = crate::corpus::split_line(line, tokenize);
                for token in tokens {
                    *counts.entry(token).or_insert(0) += 1;
                }
                on_line(line.len() as u64 + 1);
                Ok(())
            })?;
        }
        Ok(Self::from_counts(counts, options))
    }

    /// Reads a vocabulary file (one token per line) as bilm-tf's `Vocabulary` does: lines as
    /// Python's universal newlines split them, each stripped of whitespace, `!!!MAXTERMID` (the
    /// 1B Word Benchmark's last line) skipped, each token's id its position, `<S>`, `</S>` and
    /// `<UNK>` wherever the file lists them. A file that lists none of the three gets them in
    /// front (bilm-tf requires them); one that lists only some is an error naming the missing.
    /// A count after a tab is dropped; empty lines, tokens with ASCII whitespace inside and
    /// duplicates are errors (other Unicode whitespace inside a token is kept, as bilm-tf keeps
    /// it).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let mut tokens = Vec::new();
        let mut seen = HashMap::new();
        for_each_line(path, |number, text| {
            // Vocabularies may carry a count after the token: keep the first column.
            let token = python_strip(text.split('\t').next().unwrap_or(""));
            if token == MAX_TERM_ID {
                return Ok(());
            }
            let vocab_error = |message: String| TrainError::Vocabulary {
                path: path.to_path_buf(),
                line: number,
                message,
            };
            // ASCII whitespace inside is a second field (a count after a space?); other Unicode
            // whitespace stays part of the token, as bilm-tf keeps it (a corpus split at it
            // never yields that token).
            if token.is_empty() || token.chars().any(|c| c.is_ascii() && is_python_space(c)) {
                return Err(vocab_error(
                    "empty token or token with whitespace (one token per line)".into(),
                ));
            }
            if let Some(first) = seen.insert(token.to_string(), number) {
                return Err(vocab_error(format!(
                    "duplicate token `{token}` (first on line {first})"
                )));
            }
            tokens.push(token.to_string());
            Ok(())
        })?;
        if tokens.is_empty() {
            return Err(TrainError::Vocabulary {
                path: path.to_path_buf(),
                line: 0,
                message: "the file is empty".into(),
            });
        }
        let missing: Vec<&str> = [BOS, EOS, UNK]
            .into_iter()
            .filter(|special| !seen.contains_key(*special))
            .collect();
        match missing.len() {
            0 => Ok(Self::in_order(tokens)),
            3 => Ok(Self::from_tokens(tokens)),
            _ => Err(TrainError::Vocabulary {
                path: path.to_path_buf(),
                line: 0,
                message: format!(
                    "it lists some of `{BOS}`, `{EOS}`, `{UNK}` but not {}: list all three \
                     (bilm-tf's files do) or none (they are then added in front)",
                    missing
                        .iter()
                        .map(|m| format!("`{m}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }

    /// Writes one token per line (atomically: a temporary file renamed into place).
    pub fn to_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut text = String::new();
        for token in &self.tokens {
            text.push_str(token);
            text.push('\n');
        }
        elmo_model::write_atomic(path.as_ref(), text.as_bytes()).map_err(io_error(path.as_ref()))
    }

    /// Number of entries (the softmax size).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether only the special tokens are present.
    pub fn is_empty(&self) -> bool {
        self.tokens.len() <= 3
    }

    /// Id of a token, `<UNK>`'s when absent.
    pub fn id(&self, token: &str) -> u32 {
        self.index.get(token).copied().unwrap_or(self.unk_id)
    }

    /// Id of `<S>` (the backward direction's last target).
    pub fn bos_id(&self) -> u32 {
        self.bos_id
    }

    /// Id of `</S>` (the forward direction's last target).
    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }

    /// Id of `<UNK>`.
    pub fn unk_id(&self) -> u32 {
        self.unk_id
    }

    /// The token of an id.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// All tokens in id order.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sorted_with_specials_first() {
        let counts: HashMap<String, u64> = [("b", 3), ("a", 3), ("c", 5), ("rare", 1), ("<S>", 9)]
            .into_iter()
            .map(|(t, c)| (t.to_string(), c))
            .collect();
        let vocab = Vocabulary::from_counts(
            counts.clone(),
            VocabularyOptions {
                min_count: 2,
                max_size: None,
            },
        );
        assert_eq!(vocab.tokens(), ["<S>", "</S>", "<UNK>", "c", "a", "b"]);
        assert_eq!(vocab.id("rare"), vocab.unk_id());
        assert_eq!(vocab.id("a"), 4);
        let capped = Vocabulary::from_counts(
            counts,
            VocabularyOptions {
                min_count: 1,
                max_size: Some(4),
            },
        );
        assert_eq!(capped.tokens(), ["<S>", "</S>", "<UNK>", "c"]);
    }

    #[test]
    fn file_round_trip_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vocab.txt");
        let vocab = Vocabulary::from_tokens(["the".to_string(), "cat".to_string()]);
        vocab.to_file(&path).unwrap();
        assert_eq!(Vocabulary::from_file(&path).unwrap(), vocab);

        std::fs::write(&path, "<S>\n</S>\n<UNK>\nthe\nthe\n").unwrap();
        let err = Vocabulary::from_file(&path).unwrap_err().to_string();
        assert!(err.contains(":5:") && err.contains("duplicate"), "{err}");
        std::fs::write(&path, "the\n\ncat\n").unwrap();
        let err = Vocabulary::from_file(&path).unwrap_err().to_string();
        assert!(err.contains(":2:"), "{err}");
        std::fs::write(&path, b"the\n\xff\n").unwrap();
        let err = Vocabulary::from_file(&path).unwrap_err().to_string();
        assert!(err.contains(":2:") && err.contains("UTF-8"), "{err}");
        // Without the special tokens they are added in front.
        std::fs::write(&path, "the\ncat\n").unwrap();
        assert_eq!(Vocabulary::from_file(&path).unwrap(), vocab);
        // Lines as bilm-tf's `Vocabulary` reads them: universal newlines, `strip()`,
        // `!!!MAXTERMID` skipped; a count after a tab dropped.
        let text = "<S>\r</S>\r\n<UNK> \nthe\t5\n\u{1f}cat\u{3000}\n!!!MAXTERMID\n";
        std::fs::write(&path, text).unwrap();
        assert_eq!(Vocabulary::from_file(&path).unwrap(), vocab);
        // bilm-tf's ids are positions, the special tokens wherever the file lists them (the 1B
        // Word Benchmark's vocabulary starts `</S>`, `<S>`, `<UNK>`), written back in that order.
        std::fs::write(&path, "</S>\n<S>\n<UNK>\nthe\ncat\n!!!MAXTERMID\n").unwrap();
        let bilm_tf = Vocabulary::from_file(&path).unwrap();
        assert_eq!(bilm_tf.tokens(), ["</S>", "<S>", "<UNK>", "the", "cat"]);
        let ids = [bilm_tf.bos_id(), bilm_tf.eos_id(), bilm_tf.unk_id()];
        assert_eq!(
            (ids, bilm_tf.id("cat"), bilm_tf.id("dog")),
            ([1, 0, 2], 4, 2)
        );
        std::fs::write(&path, "the\n<UNK>\ncat\n</S>\n<S>\n").unwrap();
        let scattered = Vocabulary::from_file(&path).unwrap();
        let ids = [scattered.bos_id(), scattered.eos_id(), scattered.unk_id()];
        assert_eq!((ids, scattered.id("dog")), ([4, 3, 1], 1));
        scattered.to_file(&path).unwrap();
        assert_eq!(Vocabulary::from_file(&path).unwrap(), scattered);
        // Some of the special tokens but not all: an error naming those missing.
        std::fs::write(&path, "<S>\n</S>\nthe\n").unwrap();
        let err = Vocabulary::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("not `<UNK>`:"), "{err}");
        // A no-break space inside a token is part of it (bilm-tf's `strip()` leaves it).
        std::fs::write(&path, "the\n10\u{a0}000\n").unwrap();
        let kept = Vocabulary::from_file(&path).unwrap();
        assert_eq!(kept.tokens()[3..], ["the", "10\u{a0}000"]);
        for (text, line) in [("the\ncat dog\n", ":2:"), ("the\rcat\u{1c}dog\n", ":2:")] {
            std::fs::write(&path, text).unwrap();
            let err = Vocabulary::from_file(&path).unwrap_err().to_string();
            assert!(err.contains(line) && err.contains("whitespace"), "{err}");
        }
    }
}
