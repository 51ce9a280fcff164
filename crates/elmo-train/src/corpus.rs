//! Text corpora: files or glob patterns, one sentence per line, read shard (file) by shard.
//!
//! Lines and tokens are what bilm-tf's `LMDataset` reads (`bilm/data.py`: `open(shard).readlines()`,
//! `sentence.split()`), by [`elmo_model::python_text`]: a line ends at `\n`, `\r\n` or a lone `\r`,
//! and tokens are split at Python's whitespace (1B Word Benchmark style), or raw text is split by
//! [`elmo_model::tokenizer`]. Blank lines are skipped (bilm-tf trains on them as `<S> </S>`).
//! Invalid UTF-8 is an error naming file and line. A gzip-compressed file is read decompressed.

use std::path::{Path, PathBuf};

use elmo_model::python_text::{UniversalLines, python_split, python_strip};

use crate::error::{Result, TrainError, io_error};

/// Expands files and glob patterns (each must match at least one file), sorted, deduplicated.
pub fn expand_patterns<S: AsRef<str>>(patterns: &[S]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for pattern in patterns {
        let pattern = pattern.as_ref();
        if Path::new(pattern).is_file() {
            files.push(PathBuf::from(pattern));
            continue;
        }
        let mut matched: Vec<PathBuf> = glob::glob(pattern)
            .map_err(|source| TrainError::Pattern {
                pattern: pattern.to_string(),
                source,
            })?
            .filter_map(std::result::Result::ok)
            .filter(|p| p.is_file())
            .collect();
        if matched.is_empty() {
            return Err(TrainError::Corpus(format!("`{pattern}` matches no file")));
        }
        matched.sort();
        files.extend(matched);
    }
    files.dedup();
    Ok(files)
}

/// Calls `f(line_number, line)` for every line of `path` (1-based numbers, the line without
/// its end), streaming the file, decompressed where it is gzip ([`elmo_model::open_text`]);
/// invalid UTF-8 is an error naming the file and line.
pub fn for_each_line(path: &Path, mut f: impl FnMut(usize, &str) -> Result<()>) -> Result<()> {
    let text = elmo_model::open_text(path, 1 << 20).map_err(io_error(path))?;
    let mut reader = UniversalLines::new(text);
    let mut buffer = Vec::new();
    let mut number = 0;
    while reader.read_line(&mut buffer).map_err(io_error(path))? {
        number += 1;
        let text = std::str::from_utf8(&buffer).map_err(|source| TrainError::InvalidUtf8 {
            path: path.to_path_buf(),
            line: number,
            source,
        })?;
        f(number, text)?;
    }
    Ok(())
}

/// [`for_each_line`] for the non-blank lines of `path` only.
pub fn read_lines(path: &Path, mut f: impl FnMut(usize, &str) -> Result<()>) -> Result<()> {
    for_each_line(path, |number, text| match python_strip(text).is_empty() {
        true => Ok(()),
        false => f(number, text),
    })
}

/// The paths of `files`, comma-separated (for messages about a corpus).
pub fn display_paths(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    names.join(", ")
}

/// The error for a corpus whose files hold no sentence.
pub fn no_sentence(files: &[PathBuf]) -> TrainError {
    TrainError::Corpus(format!(
        "no sentence in {} (only blank lines)",
        display_paths(files)
    ))
}

/// The tokens of one line.
pub fn split_line(line: &str, tokenize: bool) -> Vec<String> {
    if tokenize {
        elmo_model::tokenizer::tokenize(line)
    } else {
        python_split(line).map(String::from).collect()
    }
}

/// The non-blank lines of one shard, in file order, untokenized (a shard in memory is its raw
/// text; [`split_line`] makes a line's tokens when it is used).
pub fn read_shard(path: &Path) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    read_lines(path, |_, line| {
        lines.push(line.to_string());
        Ok(())
    })?;
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_patterns_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        // Lines and tokens as bilm-tf's `open(shard).readlines()` and `.split()` give them
        // (Python 3.11): a lone `\r` ends a line, U+001C-U+001F separate tokens, U+2028 only
        // separates tokens.
        let text = "the cat sat\r\n\n \u{1f} \nDon't go.\rx\u{1c}y\u{2028}z \r\n";
        std::fs::write(&a, text).unwrap();
        let lines = read_shard(&a).unwrap();
        assert_eq!(
            lines,
            vec!["the cat sat", "Don't go.", "x\u{1c}y\u{2028}z "]
        );
        assert_eq!(split_line(&lines[1], false), vec!["Don't", "go."]);
        assert_eq!(split_line(&lines[1], true), vec!["Do", "n't", "go", "."]);
        assert_eq!(split_line(&lines[2], false), vec!["x", "y", "z"]);
        // A gzip-compressed shard reads as its text.
        let gz = dir.path().join("a.txt.gz");
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut encoder, text.as_bytes()).unwrap();
        std::fs::write(&gz, encoder.finish().unwrap()).unwrap();
        assert_eq!(read_shard(&gz).unwrap(), lines);

        let b = dir.path().join("b.txt");
        std::fs::write(&b, b"fine\r\rbad \xc3 byte\n").unwrap();
        let err = read_shard(&b).unwrap_err().to_string();
        assert!(err.contains("b.txt:3:") && err.contains("UTF-8"), "{err}");

        let pattern = format!("{}/*.txt", dir.path().display());
        assert_eq!(expand_patterns(&[pattern]).unwrap(), vec![a.clone(), b]);
        let none = format!("{}/*.md", dir.path().display());
        assert!(
            expand_patterns(&[none])
                .unwrap_err()
                .to_string()
                .contains("matches no file")
        );
    }
}
