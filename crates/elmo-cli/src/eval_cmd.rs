//! `elmo eval`: full-softmax perplexity of a trained run on a text file, per direction.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, bail};
use elmo_train::batcher::{BatchMode, BatchShape};
use elmo_train::{TrainedRun, evaluate};

use crate::backend::Backend;

/// Arguments of `elmo eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// A training run directory (`elmo train --out`).
    #[arg(long, value_name = "RUN_DIR")]
    pub model: PathBuf,
    /// Text to evaluate on (one sentence per line, tokenized like the training data).
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Rows per batch (default: the run's batch size).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: Option<u32>,
    /// How to lay the text out in batches (default: as the run was trained). `packed` gives each
    /// row every B-th sentence, so the carried state holds unrelated sentences; `contiguous`
    /// gives each row one contiguous part of the text, so it holds the document's previous
    /// sentences; `sentences` starts every sentence from a zero state.
    #[arg(long, value_enum, value_name = "MODE")]
    pub batching: Option<Batching>,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Flex)]
    pub backend: Backend,
    /// Evaluate the trained weights of a run that averages its weights, not their mean.
    #[arg(long)]
    pub trained_weights: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--batching`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Batching {
    /// bilm-tf's packing (what `elmo train` does by default).
    Packed,
    /// The text cut into one contiguous part per row (`elmo train --contiguous`).
    Contiguous,
    /// One sentence per row (`elmo train --sentences`).
    Sentences,
}

impl Batching {
    fn mode(self) -> BatchMode {
        match self {
            Self::Packed => BatchMode::Packed,
            Self::Contiguous => BatchMode::Contiguous,
            Self::Sentences => BatchMode::Sentences,
        }
    }
}

/// Runs `elmo eval`.
pub fn run(args: &EvalArgs) -> Result<()> {
    if !args.data.is_file() {
        bail!("{}: no such file", args.data.display());
    }
    let device = args.backend.device()?;
    let run = if args.trained_weights {
        TrainedRun::load_trained_weights(&args.model, &device)?
    } else {
        TrainedRun::load(&args.model, &device)?
    };
    if !args.quiet {
        let weights = run.averaged_steps.map_or(String::new(), |n| {
            format!(", the mean of the weights of its last {n} steps")
        });
        eprintln!(
            "model: {} at step {} (its newest checkpoint{weights})",
            args.model.display(),
            run.step
        );
    }
    let config = &run.config;
    let trained = config.batch_shape();
    let shape = BatchShape {
        n_rows: args.batch_size.map_or(config.batch_size, |n| n as usize),
        mode: args.batching.map_or(trained.mode, Batching::mode),
        ..trained
    };
    let bar = crate::progress::bar(
        0,
        args.quiet,
        "{spinner} [{elapsed_precise}] {pos} targets ({per_sec})",
    );
    let perplexity = evaluate(
        &run.model,
        vec![args.data.clone()],
        config.tokenize,
        Arc::new(run.vocab),
        shape,
        &device,
        |n| bar.inc(n),
    )?;
    bar.finish_and_clear();
    println!("{perplexity}");
    Ok(())
}
