//! CoNLL-style column files: `token<TAB>tag` (the first column is the token, the last the tag),
//! a blank line between sentences, lines starting with `#` ignored.

use std::path::Path;

use crate::error::{Result, TaskError, io_error};

/// One sentence with a tag per token.
#[derive(Debug, Clone, PartialEq)]
pub struct TaggedSentence {
    /// Tokens.
    pub tokens: Vec<String>,
    /// One tag per token.
    pub tags: Vec<String>,
}

/// Reads a CoNLL column file. Malformed lines (one column, invalid UTF-8) are errors naming the
/// file and line; sentences longer than `max_tokens` are cut into pieces.
pub fn read_conll(path: &Path, max_tokens: usize) -> Result<Vec<TaggedSentence>> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    let mut sentences = Vec::new();
    let mut current = TaggedSentence {
        tokens: Vec::new(),
        tags: Vec::new(),
    };
    let mut flush = |current: &mut TaggedSentence| {
        if !current.tokens.is_empty() {
            let taken = std::mem::replace(
                current,
                TaggedSentence {
                    tokens: Vec::new(),
                    tags: Vec::new(),
                },
            );
            let step = max_tokens.max(1);
            for start in (0..taken.tokens.len()).step_by(step) {
                let end = (start + step).min(taken.tokens.len());
                sentences.push(TaggedSentence {
                    tokens: taken.tokens[start..end].to_vec(),
                    tags: taken.tags[start..end].to_vec(),
                });
            }
        }
    };
    for (number, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = std::str::from_utf8(raw).map_err(|e| TaskError::Data {
            path: path.to_path_buf(),
            line: number + 1,
            message: format!("invalid UTF-8 ({e})"),
        })?;
        let line = line.trim_end_matches('\r');
        if line.starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut current);
            continue;
        }
        let columns: Vec<&str> = if line.contains('\t') {
            line.split('\t').map(str::trim).collect()
        } else {
            line.split_whitespace().collect()
        };
        match (columns.first(), columns.last()) {
            (Some(token), Some(tag))
                if columns.len() >= 2 && !token.is_empty() && !tag.is_empty() =>
            {
                current.tokens.push((*token).to_string());
                current.tags.push((*tag).to_string());
            }
            _ => {
                return Err(TaskError::Data {
                    path: path.to_path_buf(),
                    line: number + 1,
                    message: format!("expected `token<TAB>tag`, found `{line}`"),
                });
            }
        }
    }
    flush(&mut current);
    if sentences.is_empty() {
        return Err(TaskError::Data {
            path: path.to_path_buf(),
            line: 0,
            message: "no tagged sentence".into(),
        });
    }
    Ok(sentences)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sentences_skips_comments_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.conll");
        std::fs::write(&path, "# doc\nThe\tDT\ncat\tNN\n\n\nruns\tVBZ\n").unwrap();
        let sentences = read_conll(&path, 100).unwrap();
        assert_eq!(sentences.len(), 2);
        assert_eq!(sentences[0].tokens, ["The", "cat"]);
        assert_eq!(sentences[1].tags, ["VBZ"]);
        assert_eq!(read_conll(&path, 1).unwrap().len(), 3);
        std::fs::write(&path, "The\tDT\nlonely\n").unwrap();
        let error = read_conll(&path, 100).unwrap_err().to_string();
        assert!(error.contains("a.conll:2"), "{error}");
        std::fs::write(&path, b"The\tDT\n\xff\tNN\n").unwrap();
        let error = read_conll(&path, 100).unwrap_err().to_string();
        assert!(error.contains(":2: invalid UTF-8"), "{error}");
    }
}
