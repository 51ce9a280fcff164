//! `elmo tokens`: the token embeddings of a vocabulary, as bilm-tf's `dump_token_embeddings`
//! (bilm/model.py) writes them: each token alone through the char CNN, its highways and its
//! projection (ELMo's context-free layer 0, one copy, width P), row `i` for the vocabulary's id
//! `i`, in the float32 dataset `embedding` of shape `(n_tokens, P)`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use elmo_model::RunLock;
use elmo_train::Vocabulary;

use crate::backend::Backend;
use crate::hdf5_output::{Hdf5EmbeddingWriter, OutputFingerprint};
use crate::model_source::ModelArgs;

/// The dataset bilm-tf's `dump_token_embeddings` writes (and its `BidirectionalLanguageModel`
/// reads as `embedding_weight_file`).
const DATASET: &str = "embedding";

/// Arguments of `elmo tokens`.
#[derive(Debug, clap::Args)]
pub struct TokensArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The vocabulary, one token per line, read as `elmo train` and bilm-tf read it: a token's
    /// row is its id, `<S>` and `</S>` are the sentence-boundary tokens, `!!!MAXTERMID` is
    /// skipped, and a file without `<S>`, `</S>`, `<UNK>` gets them as rows 0-2.
    pub vocab: PathBuf,
    /// Output `.hdf5` or `.h5` file: the dataset `embedding`, `(n_tokens, P)` float32.
    pub output: PathBuf,
    /// Tokens per call of the token encoder.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Flex)]
    pub backend: Backend,
    /// Remove a lock on OUTPUT (`OUTPUT.lock`) left by an `elmo` process that is no longer
    /// running (another process writing OUTPUT is always refused).
    #[arg(long)]
    pub break_stale_lock: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `elmo tokens`.
pub fn run(args: &TokensArgs) -> Result<()> {
    crate::hdf5_output::check_output_path(&args.output)?;
    let _lock = RunLock::acquire(crate::embed::lock_path(&args.output), args.break_stale_lock)?;
    let vocab = Vocabulary::from_file(&args.vocab)?;
    let device = args.backend.device()?;
    let model = args.model.load(&device, args.quiet)?;
    let width = model.bilm.token_encoder.d_output();
    let fingerprint = OutputFingerprint {
        input: format!("tokens of {}", args.vocab.display()),
        model: model.description.clone(),
        settings: String::new(),
    };
    // One dataset, nothing to continue: a killed run's partial output is discarded.
    let mut writer =
        Hdf5EmbeddingWriter::open(&args.output, &fingerprint, true, usize::MAX, false, &|_| {
            false
        })?
        .writer;
    if !args.quiet {
        eprintln!(
            "model: {}; {} tokens of {}, vectors of width {width}; backend: {:?}",
            model.description,
            vocab.len(),
            args.vocab.display(),
            args.backend
        );
    }
    let bar = crate::progress::bar(
        vocab.len() as u64,
        args.quiet,
        "{elapsed_precise} [{bar:40}] {pos}/{len} tokens ({per_sec}, {eta} left)",
    );
    let started = Instant::now();
    let pieces = vocab
        .tokens()
        .chunks(args.batch_size as usize)
        .map(|chunk| {
            let encoded = model.bilm.token_embeddings(chunk, &device);
            let values = (encoded.try_into_data().map_err(|e| format!("{e:?}")))
                .and_then(|data| data.try_into_vec::<f32>().map_err(|e| format!("{e:?}")))
                .map_err(|e| anyhow::anyhow!("reading the token embeddings back: {e}"))?;
            bar.inc(chunk.len() as u64);
            Ok(values)
        });
    writer.add_pieces(DATASET, &[vocab.len(), width], pieces)?;
    writer
        .finish()
        .with_context(|| format!("{}: finishing output", args.output.display()))?;
    bar.finish_and_clear();
    if !args.quiet {
        eprintln!(
            "{} token embeddings of width {width} in {:.1} s -> {} (dataset `{DATASET}`)",
            vocab.len(),
            started.elapsed().as_secs_f64(),
            args.output.display()
        );
    }
    Ok(())
}
