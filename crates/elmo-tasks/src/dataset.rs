//! Task examples read from the task's file format: tagging (CoNLL columns), classification (TSV
//! `text`, `label`, or `label<TAB>text` without a header) and sentence pairs (TSV `text_a`,
//! `text_b`, `label`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::conll::read_conll;
use crate::error::{Result, TaskError};
use crate::tsv::{is_column_number, read_tsv};

/// The kind of task, which fixes the file format and the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    /// Sequence tagging (POS, NER): BiLSTM + CRF.
    Tag,
    /// Sentence classification (sentiment): BiLSTM + max/mean pooling.
    Classify,
    /// Sentence-pair classification: ESIM-like alignment.
    Pair,
}

/// What an example is labelled with.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// One tag per token of `tokens`.
    Tags(Vec<String>),
    /// One label for the example.
    Label(String),
}

/// One example: one token sequence (tagging, classification) or two (pairs).
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    /// The (first) sentence.
    pub tokens: Vec<String>,
    /// The second sentence of a pair.
    pub second: Option<Vec<String>>,
    /// The gold target.
    pub target: Target,
}

impl Example {
    /// Its sentences: the tokens and, for a pair, the second sentence.
    pub fn sentences(&self) -> impl Iterator<Item = &[String]> {
        std::iter::once(self.tokens.as_slice()).chain(self.second.as_deref())
    }

    /// Its gold labels: the tags, or the one label.
    pub fn labels(&self) -> &[String] {
        match &self.target {
            Target::Tags(tags) => tags,
            Target::Label(label) => std::slice::from_ref(label),
        }
    }
}

/// How to read a data file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataFormat {
    /// Task kind.
    pub kind: TaskKind,
    /// TSV text column, a header's name or a 1-based number (classification; pairs use
    /// `<text>_a` and `<text>_b` unless the column is `text`, i.e. `text_a`, `text_b`, and by
    /// number columns `N` and `N + 1`).
    pub text_column: String,
    /// TSV label column, a name or a 1-based number.
    pub label_column: String,
    /// The TSV files open with a header line (without one, columns are numbers). Task
    /// directories written before this setting had one.
    #[serde(default = "with_header")]
    pub header: bool,
    /// Split TSV text with the built-in tokenizer (otherwise on whitespace).
    pub tokenize: bool,
    /// Longer sentences are cut (tagging) or truncated (classification, pairs).
    pub max_tokens: usize,
}

/// `DataFormat::header`'s value where a task directory does not give it.
fn with_header() -> bool {
    true
}

impl DataFormat {
    /// Reads every example of `path`. Empty texts are errors naming the line.
    pub fn read(&self, path: &Path) -> Result<Vec<Example>> {
        match self.kind {
            TaskKind::Tag => Ok(read_conll(path, self.max_tokens)?
                .into_iter()
                .map(|s| Example {
                    tokens: s.tokens,
                    second: None,
                    target: Target::Tags(s.tags),
                })
                .collect()),
            TaskKind::Classify => {
                let rows = read_tsv(path, &[&self.text_column, &self.label_column], self.header)?;
                rows.into_iter()
                    .map(|row| {
                        Ok(Example {
                            tokens: self.split(path, row.line, &row.fields[0])?,
                            second: None,
                            target: Target::Label(row.fields[1].clone()),
                        })
                    })
                    .collect()
            }
            TaskKind::Pair => {
                let column = self.text_column.as_str();
                let (a, b) = if is_column_number(column) {
                    // Columns N and N + 1 (the reader refuses a number too large).
                    let next = (column.parse::<usize>())
                        .map_or(column.to_string(), |n| n.saturating_add(1).to_string());
                    (column.to_string(), next)
                } else if column == "text" {
                    ("text_a".to_string(), "text_b".to_string())
                } else {
                    (format!("{column}_a"), format!("{column}_b"))
                };
                let rows = read_tsv(path, &[&a, &b, &self.label_column], self.header)?;
                rows.into_iter()
                    .map(|row| {
                        Ok(Example {
                            tokens: self.split(path, row.line, &row.fields[0])?,
                            second: Some(self.split(path, row.line, &row.fields[1])?),
                            target: Target::Label(row.fields[2].clone()),
                        })
                    })
                    .collect()
            }
        }
    }

    /// Tokens of a text field from line `line` of the file.
    fn split(&self, path: &Path, line: usize, text: &str) -> Result<Vec<String>> {
        let mut tokens = if self.tokenize {
            elmo_model::tokenizer::tokenize(text)
        } else {
            text.split_whitespace().map(str::to_string).collect()
        };
        if tokens.is_empty() {
            return Err(TaskError::Data {
                path: path.to_path_buf(),
                line,
                message: "empty text".into(),
            });
        }
        tokens.truncate(self.max_tokens.max(1));
        Ok(tokens)
    }
}
