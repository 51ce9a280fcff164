//! The `elmo` command line as a library: its commands, the one place that picks a burn backend
//! (`Backend`), where a pretrained biLM comes from (`ModelArgs`; files named by URL and
//! AllenNLP's published models through `FileCache`), and `elmo embed`'s HDF5 output
//! for other front ends (the Python module of `crates/elmo-python`). The binary is `main.rs`.

mod backend;
mod embed;
mod eval_cmd;
mod export_cmd;
mod hdf5_layout;
mod hdf5_output;
mod hdf5_walk;
mod input;
mod kernel_cache;
mod merge_cmd;
mod model_files;
mod model_source;
mod plot_cmd;
mod progress;
mod sentence_index;
mod sentence_keys;
mod task_cmd;
mod tokens_cmd;
mod train_cmd;
mod vocab_cmd;

use std::num::NonZeroUsize;

pub use backend::{Backend, PrecisionArg};
pub use model_files::{FileCache, PUBLISHED_MODELS, PublishedModel};
pub use model_source::{HeldModel, LoadedModel, ModelArgs};

use clap::{Parser, Subcommand};

/// ELMo (deep contextualized word representations) on burn.
#[derive(Debug, Parser)]
#[command(
    name = "elmo",
    version,
    about,
    after_help = "Examples:\n  elmo embed --options options.json --weights weights.hdf5 input.txt output.hdf5\n  \
                  elmo embed --model original input.txt output.hdf5\n  \
                  elmo tokens --options options.json --weights weights.hdf5 vocab.txt tokens.hdf5\n  \
                  elmo vocab --out vocab.txt train.txt\n  \
                  elmo train --preset small --train train.txt --vocab vocab.txt --out runs/small\n  \
                  elmo eval --model runs/small --data test.txt\n  \
                  elmo export --model runs/small --out exported/\n  \
                  elmo task train --task tag --train pos.conll --dev dev.conll --out tasks/pos --model exported/"
)]
struct Cli {
    /// CPU threads: the pool that burn's CPU backends and the host kernels share (default:
    /// `RAYON_NUM_THREADS`, else one per core). With one, a biLM's two directions run one
    /// after the other.
    #[arg(long, global = true, value_name = "N")]
    threads: Option<NonZeroUsize>,
    /// The GPU of a GPU backend, 0-based (default: the first): for `cuda` the N-th device that
    /// `CUDA_VISIBLE_DEVICES` leaves visible, for `wgpu` and `vulkan` the N-th discrete GPU.
    /// E.g. one `elmo embed --backend cuda --gpu K --shard K/N` per GPU of a machine.
    #[arg(long, global = true, value_name = "N")]
    gpu: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write ELMo vectors for every line of a text file (AllenNLP `elmo` command layout).
    Embed(embed::EmbedArgs),
    /// Join the parts of `elmo embed --shard K/N` (or `--lines A:B`) into one output.
    Merge(merge_cmd::MergeArgs),
    /// Build the output vocabulary of a corpus (frequency-sorted, one token per line).
    Vocab(vocab_cmd::VocabArgs),
    /// Write the context-free token embeddings of a vocabulary (bilm-tf's
    /// `dump_token_embeddings`).
    Tokens(tokens_cmd::TokensArgs),
    /// Train (or fine-tune, or resume) a biLM on text.
    Train(Box<train_cmd::TrainArgs>),
    /// Full-softmax perplexity of a trained run on a text file, per direction.
    Eval(eval_cmd::EvalArgs),
    /// Write a trained run as bilm-tf / AllenNLP options.json + weights.hdf5.
    Export(export_cmd::ExportArgs),
    /// Draw the perplexity curves of a run (SVG).
    Plot(plot_cmd::PlotArgs),
    /// Downstream tasks on frozen ELMo: train, evaluate and apply taggers and classifiers.
    Task(task_cmd::TaskArgs),
}

impl Command {
    /// The backend this command computes on (`--backend`), if it computes.
    fn backend(&self) -> Option<backend::Backend> {
        match self {
            Command::Embed(args) => Some(args.backend()),
            Command::Train(args) => Some(args.backend),
            Command::Eval(args) => Some(args.backend),
            Command::Tokens(args) => Some(args.backend),
            Command::Task(args) => Some(args.backend()),
            // Export reads the run on flex.
            Command::Export(_) => Some(backend::Backend::Flex),
            Command::Vocab(_) | Command::Plot(_) | Command::Merge(_) => None,
        }
    }
}

/// The `elmo` program: parses the process's arguments, sets up the backend, GPU and thread
/// pool they ask for, and runs the command.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The environment is set before `--threads` starts the thread pool.
    let backend = cli.command.backend();
    if let Some(backend) = backend {
        backend.pin_as_default();
    }
    let gpu = match (cli.gpu, &cli.command) {
        (Some(_), Command::Embed(args)) if args.cuda_device.is_some() => {
            eprintln!("error: --gpu and --cuda-device both name a device; give one");
            return std::process::ExitCode::FAILURE;
        }
        (Some(_), Command::Train(args)) if args.gpus.is_some() => {
            eprintln!("error: --gpu and --gpus both name GPUs; give one (--gpus N for one)");
            return std::process::ExitCode::FAILURE;
        }
        (None, Command::Embed(args)) => args.cuda_gpu(),
        (gpu, _) => gpu,
    };
    if let Some(index) = gpu {
        let pinned = match backend {
            Some(backend) => backend.pin_gpu(index),
            None => Err(anyhow::anyhow!(
                "--gpu {index}: this command does not compute on a GPU"
            )),
        };
        if let Err(error) = pinned {
            eprintln!("error: {error}");
            return std::process::ExitCode::FAILURE;
        }
    }
    if let Some(threads) = cli.threads
        && let Err(error) =
            (rayon::ThreadPoolBuilder::new().num_threads(threads.get())).build_global()
    {
        eprintln!("error: --threads {threads}: {error}");
        return std::process::ExitCode::FAILURE;
    }
    let result = match &cli.command {
        Command::Embed(args) => embed::run(args, None),
        Command::Merge(args) => merge_cmd::run(args),
        Command::Vocab(args) => vocab_cmd::run(args),
        Command::Tokens(args) => tokens_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Eval(args) => eval_cmd::run(args),
        Command::Export(args) => export_cmd::run(args),
        Command::Plot(args) => plot_cmd::run(args),
        Command::Task(args) => task_cmd::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_chain(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs `elmo embed` in this process with `arguments` (what follows `elmo embed` on a command
/// line), for front ends that write files as the command does (the Python module's
/// `embed_file`). `held`, where given, is embedded with instead of loading a model (the model
/// flags are then refused), a `--stateful` run starting from its state. Nothing
/// process-wide changes: `--threads`, `--gpu` and a `--cuda-device` other than -1 or 0 are
/// refused, as the caller's process owns its thread pool and environment.
///
/// # Errors
/// The command line's error as clap renders it, or the command's error and its causes.
pub fn embed_command(
    arguments: &[std::ffi::OsString],
    held: Option<HeldModel<'_>>,
) -> Result<(), String> {
    let argv = ["elmo", "embed"].into_iter().map(std::ffi::OsString::from);
    let cli = Cli::try_parse_from(argv.chain(arguments.iter().cloned()))
        .map_err(|error| error.render().to_string().trim_end().to_string())?;
    let Command::Embed(args) = &cli.command else {
        unreachable!("the command line starts `elmo embed`")
    };
    if cli.threads.is_some() || cli.gpu.is_some() || args.cuda_gpu().is_some_and(|gpu| gpu > 0) {
        return Err(
            "--threads, --gpu and --cuda-device N > 0 set up a whole process: set \
                    RAYON_NUM_THREADS or CUDA_VISIBLE_DEVICES before the process starts"
                .into(),
        );
    }
    let flags = &args.model;
    if held.is_some()
        && (flags.options.is_some() || flags.weights.is_some() || flags.model.is_some())
    {
        return Err("a model is given, so --options, --weights and --model are not taken".into());
    }
    embed::run(args, held).map_err(|error| error_chain(&error))
}

/// The error and its causes, `: `-separated, each said once (how `elmo` and the Python module
/// report an error): our errors keep their cause as
/// `source()` without repeating it, but some libraries' errors (hdf5-pure's) also print their
/// source in their own message, which anyhow's `{:#}` would then show twice.
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if !text.ends_with(&message) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&message);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("unexpected EOF")]
    struct Eof;

    /// Like hdf5-pure's format error: prints its source and returns it too.
    #[derive(Debug, thiserror::Error)]
    #[error("format error: {0}")]
    struct Format(#[source] Eof);

    #[test]
    fn each_cause_is_said_once() {
        let error = anyhow::Error::new(Format(Eof)).context("weights.hdf5: not readable");
        assert_eq!(
            error_chain(&error),
            "weights.hdf5: not readable: format error: unexpected EOF"
        );
        let error = anyhow::Error::new(Eof).context("a.txt: I/O error");
        assert_eq!(error_chain(&error), "a.txt: I/O error: unexpected EOF");
    }

    /// A given model and model flags would leave it unclear which model embeds: refused before
    /// anything is read or written.
    #[cfg(feature = "flex")]
    #[test]
    fn a_given_model_refuses_model_flags() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        std::fs::write(&input, "a b\n").unwrap();
        let output = dir.path().join("out.hdf5");
        let model = crate::ModelArgs {
            options: None,
            weights: None,
            model: None,
        }
        .load(&burn::tensor::Device::flex(), true)
        .unwrap();
        let arguments = [
            input.as_os_str(),
            output.as_os_str(),
            "--model".as_ref(),
            dir.path().as_os_str(),
        ]
        .map(std::ffi::OsString::from);
        let mut state = None;
        let held = crate::HeldModel {
            model,
            state: &mut state,
        };
        let error = super::embed_command(&arguments, Some(held)).unwrap_err();
        assert!(error.contains("--model"), "{error}");
        assert!(!output.exists());
    }
}
