//! `elmo vocab`: build the output vocabulary of a corpus (frequency-sorted, `<S>`, `</S>`,
//! `<UNK>` first, one token per line).

use std::path::PathBuf;

use anyhow::{Context, Result};
use elmo_train::corpus::expand_patterns;
use elmo_train::vocabulary::{Vocabulary, VocabularyOptions};

/// Arguments of `elmo vocab`.
#[derive(Debug, clap::Args)]
pub struct VocabArgs {
    /// Corpus files or glob patterns (one sentence per line).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,
    /// Where to write the vocabulary.
    #[arg(long, value_name = "VOCAB")]
    pub out: PathBuf,
    /// Split raw text with the built-in tokenizer (else split on whitespace).
    #[arg(long)]
    pub tokenize: bool,
    /// Keep tokens seen at least N times.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub min_count: u64,
    /// Keep at most N entries (special tokens included).
    #[arg(long, value_name = "N")]
    pub max_size: Option<usize>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `elmo vocab`.
pub fn run(args: &VocabArgs) -> Result<()> {
    let files = expand_patterns(&args.files)?;
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    // The bar counts the text's bytes: a gzip file's are more than its size says.
    let template = match files
        .iter()
        .any(|f| elmo_model::is_gzip(f).unwrap_or(false))
    {
        true => "{spinner} [{elapsed_precise}] {bytes} of text ({bytes_per_sec})",
        false => {
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}) ETA {eta}"
        }
    };
    let bar = crate::progress::bar(total, args.quiet, template);
    let vocab = Vocabulary::build(
        &files,
        args.tokenize,
        VocabularyOptions {
            min_count: args.min_count,
            max_size: args.max_size,
        },
        |bytes| bar.inc(bytes),
    )?;
    bar.finish_and_clear();
    vocab
        .to_file(&args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    if !args.quiet {
        eprintln!(
            "{} entries from {} file(s) written to {}",
            vocab.len(),
            files.len(),
            args.out.display()
        );
    }
    Ok(())
}
