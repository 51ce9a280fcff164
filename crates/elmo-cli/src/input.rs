//! Streaming reader of the embed input: UTF-8 text, one sentence per line, whitespace tokens,
//! from a file or from standard input (`-`, as AllenNLP's `elmo` command takes it).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

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
    /// Whitespace-separated tokens.
    pub tokens: Vec<String>,
}

/// An input file's line count and content hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSummary {
    /// Lines (a last line without a newline counts).
    pub lines: u64,
    /// xxh3-128 of the bytes.
    pub hash: u128,
}

/// Reads sentences one line at a time (bounded memory).
pub struct SentenceReader {
    reader: BufReader<File>,
    label: String,
    next_index: usize,
    max_tokens: usize,
    buffer: Vec<u8>,
}

impl SentenceReader {
    /// Opens `input`; a line with more than `max_tokens` tokens is an error.
    pub fn open(input: &InputText, max_tokens: usize) -> Result<Self> {
        let file = File::open(&input.path)
            .with_context(|| format!("{}: cannot open input", input.label))?;
        Ok(Self {
            reader: BufReader::new(file),
            label: input.label.clone(),
            next_index: 0,
            max_tokens,
            buffer: Vec::new(),
        })
    }

    /// Counts the lines of a file without keeping them (for the progress bar and `--shard`),
    /// and hashes its bytes (xxh3: which input a partial output belongs to).
    pub fn scan(input: &InputText) -> Result<InputSummary> {
        let label = &input.label;
        let file =
            File::open(&input.path).with_context(|| format!("{label}: cannot open input"))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut count = 0u64;
        let mut last_was_newline = true;
        loop {
            let buf = reader
                .fill_buf()
                .with_context(|| format!("{label}: read error"))?;
            if buf.is_empty() {
                break;
            }
            count += buf.iter().filter(|&&b| b == b'\n').count() as u64;
            last_was_newline = buf.last() == Some(&b'\n');
            hasher.update(buf);
            let n = buf.len();
            reader.consume(n);
        }
        if !last_was_newline {
            count += 1;
        }
        Ok(InputSummary {
            lines: count,
            hash: hasher.digest128(),
        })
    }

    /// The next sentence, `None` at the end of the file.
    pub fn next_sentence(&mut self) -> Result<Option<Sentence>> {
        self.buffer.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.buffer)
            .with_context(|| format!("{}: read error", self.label))?;
        if n == 0 {
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
        let text = text.trim();
        let tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
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
