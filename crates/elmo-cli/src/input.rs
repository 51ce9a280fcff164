//! Streaming reader of the embed input: UTF-8 text, one sentence per line, whitespace tokens,
//! from a file or from standard input (`-`, as AllenNLP's `elmo` command takes it). Lines and
//! tokens are what AllenNLP's `elmo` command reads (`allennlp/commands/elmo.py`: a file opened
//! in Python's text mode, `line.strip()`, `sentence.split()`), by [`elmo_model::python_text`];
//! with `--tokenize` a line's tokens are the built-in tokenizer's instead. A gzip-compressed
//! input is read decompressed ([`elmo_model::open_text`]): its lines, hash and size are the
//! text's.

use std::fs::File;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use elmo_model::open_text;
use elmo_model::python_text::{LineCounter, UniversalLines, python_strip};

/// The text `elmo embed` reads: a file, or standard input copied to a hidden file beside the
/// output first (the input is read more than once: its line count, its hash, its lines), which
/// is removed when this is dropped.
pub struct InputText {
    path: PathBuf,
    label: String,
    spooled: bool,
}

impl InputText {
    /// The input `argument` names: `-` for standard input, copied (streaming) to `spool`.
    pub fn open(argument: &Path, spool: PathBuf) -> Result<Self> {
        if argument != Path::new("-") {
            return Ok(Self {
                path: argument.to_path_buf(),
                label: argument.display().to_string(),
                spooled: false,
            });
        }
        let input = Self {
            path: spool,
            label: "<stdin>".into(),
            spooled: true,
        };
        let copied = File::create(&input.path).and_then(|mut file| {
            std::io::copy(&mut std::io::stdin().lock(), &mut file)?;
            file.sync_all()
        });
        copied.with_context(|| {
            format!(
                "copying standard input to {} (read more than once)",
                input.path.display()
            )
        })?;
        Ok(input)
    }

    /// How messages name it: the path, or `<stdin>`.
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl Drop for InputText {
    fn drop(&mut self) {
        if self.spooled {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One input line.
#[derive(Debug, Clone)]
pub struct Sentence {
    /// 0-based line index (the dataset name in the output).
    pub index: usize,
    /// The line with surrounding whitespace removed.
    pub text: String,
    /// Its tokens: whitespace-separated words, or the tokenizer's.
    pub tokens: Vec<String>,
}

/// An input file's line count and content hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSummary {
    /// Lines (a last line without a newline counts).
    pub lines: u64,
    /// xxh3-128 of the bytes.
    pub hash: u128,
    /// Its size.
    pub bytes: u64,
}

/// Reads sentences one line at a time (bounded memory).
pub struct SentenceReader {
    lines: UniversalLines<Box<dyn BufRead + Send>>,
    label: String,
    next_index: usize,
    max_tokens: usize,
    tokenize: bool,
    buffer: Vec<u8>,
}

impl SentenceReader {
    /// Opens `input`; a line with more than `max_tokens` tokens is an error. With `tokenize` a
    /// line's tokens are the built-in tokenizer's (`elmo train --tokenize`'s), else its
    /// whitespace-separated words.
    pub fn open(input: &InputText, max_tokens: usize, tokenize: bool) -> Result<Self> {
        let text = open_text(&input.path, 1 << 16)
            .with_context(|| format!("{}: cannot open input", input.label))?;
        Ok(Self {
            lines: UniversalLines::new(text),
            label: input.label.clone(),
            next_index: 0,
            max_tokens,
            tokenize,
            buffer: Vec::new(),
        })
    }

    /// Counts the lines of a file without keeping them (for the progress bar and `--shard`),
    /// and hashes its bytes (xxh3: which input a partial output belongs to).
    pub fn scan(input: &InputText) -> Result<InputSummary> {
        let label = &input.label;
        let mut reader = open_text(&input.path, 1 << 20)
            .with_context(|| format!("{label}: cannot open input"))?;
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut ends = LineCounter::default();
        let mut bytes = 0u64;
        loop {
            let buf = reader
                .fill_buf()
                .with_context(|| format!("{label}: read error"))?;
            if buf.is_empty() {
                break;
            }
            ends.count(buf);
            hasher.update(buf);
            let n = buf.len();
            bytes += n as u64;
            reader.consume(n);
        }
        let count = ends.lines();
        Ok(InputSummary {
            lines: count,
            hash: hasher.digest128(),
            bytes,
        })
    }

    /// The next sentence, `None` at the end of the file.
    pub fn next_sentence(&mut self) -> Result<Option<Sentence>> {
        if !self
            .lines
            .read_line(&mut self.buffer)
            .with_context(|| format!("{}: read error", self.label))?
        {
            return Ok(None);
        }
        let index = self.next_index;
        self.next_index += 1;
        let line_number = index + 1;
        let text = match std::str::from_utf8(&self.buffer) {
            Ok(text) => text,
            Err(e) => bail!(
                "{}:{line_number}: invalid UTF-8 at byte {} of the line",
                self.label,
                e.valid_up_to()
            ),
        };
        let text = python_strip(text);
        let tokens = elmo_train::corpus::split_line(text, self.tokenize);
        if tokens.len() > self.max_tokens {
            bail!(
                "{}:{line_number}: {} tokens, more than --max-tokens {} (split the line or raise the limit)",
                self.label,
                tokens.len(),
                self.max_tokens
            );
        }
        Ok(Some(Sentence {
            index,
            text: text.to_string(),
            tokens,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    /// The lines and tokens of `bytes` through [`SentenceReader`], and the count
    /// [`SentenceReader::scan`] gives.
    fn read(bytes: &[u8]) -> (Vec<(String, Vec<String>)>, u64) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("input.txt");
        std::fs::write(&path, bytes).expect("write");
        let input = InputText::open(&path, dir.path().join("spool")).expect("open");
        let mut reader = SentenceReader::open(&input, 100, false).expect("reader");
        // A small buffer, so that line ends fall across its refills.
        reader.lines = UniversalLines::new(Box::new(BufReader::with_capacity(
            3,
            File::open(&path).expect("open"),
        )));
        let mut lines = Vec::new();
        while let Some(sentence) = reader.next_sentence().expect("sentence") {
            assert_eq!(sentence.index, lines.len());
            lines.push((sentence.text, sentence.tokens));
        }
        let count = SentenceReader::scan(&input).expect("scan").lines;
        (lines, count)
    }

    fn owned(lines: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        lines
            .iter()
            .map(|(text, tokens)| {
                (
                    text.to_string(),
                    tokens.iter().map(|t| t.to_string()).collect(),
                )
            })
            .collect()
    }

    /// Golden values from Python 3.11: `[l.strip() for l in open(p, encoding="utf-8")]` and
    /// `.split()` of each, as AllenNLP's `elmo` command reads its input.
    #[test]
    fn lines_and_tokens_are_what_python_reads() {
        // printf 'a b\r\nc\rd\x1ce \x1f\n\xc2\xa0x\xe2\x80\x83y\r'
        // (and the counts: `len(list(open(p, encoding="utf-8")))` of each file below)
        let (lines, count) = read("a b\r\nc\rd\u{1c}e \u{1f}\n\u{a0}x\u{2003}y\r".as_bytes());
        assert_eq!(
            lines,
            owned(&[
                ("a b", &["a", "b"]),
                ("c", &["c"]),
                ("d\u{1c}e", &["d", "e"]),
                ("x\u{2003}y", &["x", "y"]),
            ])
        );
        assert_eq!(count, 4);
        for (bytes, expected) in [
            (&b""[..], 0),
            (b"\n", 1),
            (b"\r", 1),
            (b"\r\n", 1),
            (b"\n\r", 2),
            (b"\r\r\n", 2),
            (b"x", 1),
            (b"x\ny", 2),
            (b"x\r\ry\r\n\nz", 5),
            (b"ab\r\r\r\n\r", 4),
        ] {
            let (lines, count) = read(bytes);
            assert_eq!(count, expected, "{bytes:?}");
            assert_eq!(lines.len() as u64, expected, "{bytes:?}");
        }
    }
}
