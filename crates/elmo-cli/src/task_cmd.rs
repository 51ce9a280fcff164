//! `elmo task train|eval|predict`: downstream task models on frozen ELMo (crates/elmo-tasks).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use elmo_tasks::encoder::{CharCnnSettings, ElmoSettings, SentenceEncoderConfig};
use elmo_tasks::index::Index;
use elmo_tasks::train::EpochReport;
use elmo_tasks::{
    BiLmFeatures, DataFormat, ElmoPlace, ElmoSource, Example, MixKind, TaskDirectory, TaskKind,
    TaskModelConfig, TaskObserver, TaskSpec, TaskTrainOptions,
};
use indicatif::ProgressBar;

use crate::backend::Backend;
use crate::model_files::{published_model, url_of};
use crate::model_source::ModelArgs;

/// `elmo task ...`.
#[derive(Debug, clap::Args)]
pub struct TaskArgs {
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TaskCommand {
    /// Train a tagger, classifier or pair classifier on frozen ELMo (or without, the baseline).
    Train(Box<TaskTrainArgs>),
    /// Score a trained task model on labelled data: prints `accuracy X` (and `span-f1 Y` for
    /// BIO/BIOES tags).
    Eval(TaskEvalArgs),
    /// Label data with a trained task model (tags as CoNLL columns, labels one per line).
    Predict(TaskPredictArgs),
}

/// `--task`: elmo-tasks' [`TaskKind`] as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TaskArg {
    /// Sequence tagging (POS, NER): BiLSTM + CRF.
    Tag,
    /// Sentence classification (sentiment): BiLSTM + max/mean pooling.
    Classify,
    /// Sentence-pair classification: ESIM-like alignment.
    Pair,
}

impl From<TaskArg> for TaskKind {
    fn from(arg: TaskArg) -> Self {
        match arg {
            TaskArg::Tag => TaskKind::Tag,
            TaskArg::Classify => TaskKind::Classify,
            TaskArg::Pair => TaskKind::Pair,
        }
    }
}

/// `--mix`: `all`, `top`, `average` or a layer's number, as elmo-tasks' [`MixKind`].
fn mix_kind(text: &str) -> std::result::Result<MixKind, String> {
    match text {
        "all" => Ok(MixKind::All),
        "top" => Ok(MixKind::Top),
        "average" => Ok(MixKind::Average),
        _ => text.parse().map(MixKind::Layer).map_err(|_| {
            format!("`{text}`: all, top, average or a layer's number (0 the token layer)")
        }),
    }
}

/// `--features-memory-mib`, of `task train`, `eval` and `predict`.
#[derive(Debug, clap::Args)]
struct FeatureMemoryArg {
    /// Host memory for the biLM layers of the data's sentences, computed once (for all epochs);
    /// the sentences beyond it are kept in an unnamed temporary file beside the task directory
    /// (removed at exit) and read back per batch.
    #[arg(
        long = "features-memory-mib",
        value_name = "MIB",
        default_value_t = 4096
    )]
    mib: usize,
}

/// `--elmo-at`: elmo-tasks' [`ElmoPlace`] as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PlaceArg {
    /// `[x_k; ELMo_k]` into the task RNN.
    Input,
    /// `[h_k; ELMo_k]` after the task RNN.
    Output,
    /// Both, with separate mixes.
    Both,
}

impl From<PlaceArg> for ElmoPlace {
    fn from(arg: PlaceArg) -> Self {
        match arg {
            PlaceArg::Input => ElmoPlace::Input,
            PlaceArg::Output => ElmoPlace::Output,
            PlaceArg::Both => ElmoPlace::Both,
        }
    }
}

/// Arguments of `elmo task train`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Formats: tag = CoNLL columns (token<TAB>tag, blank line between \
    sentences, `#` lines ignored); classify = TSV with a header (--text-column, \
    --label-column), or `label<TAB>text` lines with --no-header; pair = TSV with text_a, \
    text_b, label, or `label<TAB>text_a<TAB>text_b` lines with --no-header.\n\nExample:\n  \
    elmo task train --task tag --train pos.train.conll --dev pos.dev.conll --out tasks/pos \
    --model runs/lm"
)]
pub struct TaskTrainArgs {
    /// The kind of task (fixes the file format and the head).
    #[arg(long, value_enum)]
    task: TaskArg,
    /// Training data.
    #[arg(long, value_name = "FILE")]
    train: PathBuf,
    /// Development data (model selection and early stopping).
    #[arg(long, value_name = "FILE")]
    dev: PathBuf,
    /// Task directory to write (task.json, model.bpk, best.json, metrics.jsonl).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The biLM (--options/--weights, or --model DIR); the embedded demo biLM without them.
    #[command(flatten)]
    elmo: ModelArgs,
    /// Train the baseline: the same head without ELMo.
    #[arg(long, conflicts_with_all = ["options", "weights", "model"])]
    no_elmo: bool,
    /// Which biLM layers the task's scalar mix uses: `all` (learned softmax weights over all
    /// layers: ELMo), `top` (the top layer only), `average` (a fixed equal average), or a
    /// layer's number alone (0 the token layer, 1 the first LSTM layer, ...: the paper's probes
    /// of each layer, §5.3)
    #[arg(long, value_name = "all|top|average|N", default_value = "all", value_parser = mix_kind)]
    mix: MixKind,
    /// Where ELMo is concatenated: the task RNN's input, output, or both (separate mixes).
    #[arg(long, value_enum, default_value_t = PlaceArg::Input)]
    elmo_at: PlaceArg,
    /// Dropout on ELMo.
    #[arg(long, default_value_t = 0.5, value_parser = probability)]
    elmo_dropout: f64,
    /// Layer-normalise each biLM layer before the mix (the paper's §3.2 option, AllenNLP's
    /// `do_layer_norm`).
    #[arg(long)]
    layer_norm: bool,
    /// λ of the λ‖s‖² penalty on the mix weights.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    lambda: f64,
    /// Seed of initialisation, data order and dropout.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Remove a lock on --out left by an `elmo` process that is no longer running (another
    /// process writing the task directory is always refused).
    #[arg(long)]
    break_stale_lock: bool,
    /// Most epochs.
    #[arg(long, default_value_t = 20)]
    epochs: usize,
    /// Stop after this many epochs without a better dev score.
    #[arg(long, default_value_t = 3)]
    patience: usize,
    /// Examples per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 0.001, value_parser = positive)]
    lr: f64,
    /// Task word embedding width.
    #[arg(long, default_value_t = 100)]
    d_word: usize,
    /// Join a character CNN to the task's word embedding in x_k (16-wide characters, 25 filters
    /// of each width 1-5, one highway layer, 50 outputs), trained with the head.
    #[arg(long)]
    char_cnn: bool,
    /// Task BiLSTM width per direction.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    d_hidden: u32,
    /// Dropout in the task model.
    #[arg(long, default_value_t = 0.3, value_parser = probability)]
    dropout: f64,
    /// Task words seen fewer times are unknown.
    #[arg(long, default_value_t = 1)]
    min_count: usize,
    /// Most task words.
    #[arg(long, default_value_t = 50_000)]
    max_words: usize,
    /// TSV column with the text: a name in the header line or a 1-based number (pairs: the
    /// columns `NAME_a` and `NAME_b`, or `N` and `N + 1`) [default: `text`, or 2 with
    /// --no-header]
    #[arg(long, value_name = "NAME|N")]
    text_column: Option<String>,
    /// TSV column with the label: a name in the header line or a 1-based number [default:
    /// `label`, or 1 with --no-header]
    #[arg(long, value_name = "NAME|N")]
    label_column: Option<String>,
    /// The TSV files have no header line: every line is an example and columns are numbers
    /// (by default `label<TAB>text`, as SentEval's and Pang & Lee's files; pairs
    /// `label<TAB>text_a<TAB>text_b`). Kept in the task directory for `eval` and `predict`
    #[arg(long)]
    no_header: bool,
    /// Split TSV text with the built-in tokenizer (otherwise on whitespace).
    #[arg(long)]
    tokenize: bool,
    /// Longer sentences are cut (tagging) or truncated.
    #[arg(long, default_value_t = 200)]
    max_tokens: usize,
    #[command(flatten)]
    features_memory: FeatureMemoryArg,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Flex)]
    backend: Backend,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

/// Arguments of `elmo task eval`.
#[derive(Debug, clap::Args)]
pub struct TaskEvalArgs {
    /// A task directory (`elmo task train --out`).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// Labelled data in the task's format.
    #[arg(long, value_name = "FILE")]
    data: PathBuf,
    /// Also print per-type span scores and the most frequent confusions.
    #[arg(long)]
    details: bool,
    #[command(flatten)]
    features_memory: FeatureMemoryArg,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Flex)]
    backend: Backend,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

/// Arguments of `elmo task predict`.
#[derive(Debug, clap::Args)]
pub struct TaskPredictArgs {
    /// A task directory (`elmo task train --out`).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// Data in the task's format (the gold labels are ignored).
    #[arg(long, value_name = "FILE")]
    data: PathBuf,
    /// Output file, written whole or not at all (standard output without).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    features_memory: FeatureMemoryArg,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Flex)]
    backend: Backend,
    /// No progress bars.
    #[arg(long, short)]
    quiet: bool,
}

impl TaskArgs {
    /// The backend of the subcommand (`--backend`).
    pub fn backend(&self) -> Backend {
        match &self.command {
            TaskCommand::Train(a) => a.backend,
            TaskCommand::Eval(a) => a.backend,
            TaskCommand::Predict(a) => a.backend,
        }
    }
}

/// Runs `elmo task ...`.
pub fn run(args: &TaskArgs) -> Result<()> {
    match &args.command {
        TaskCommand::Train(a) => train(a),
        TaskCommand::Eval(a) => eval(a),
        TaskCommand::Predict(a) => predict(a),
    }
}

/// A finite number for which `holds` is true, else `what` it must be (clap's value parser).
fn finite_where(
    text: &str,
    holds: fn(f64) -> bool,
    what: &str,
) -> std::result::Result<f64, String> {
    let value: f64 = text.parse().map_err(|e| format!("{e}"))?;
    match value.is_finite() && holds(value) {
        true => Ok(value),
        false => Err(what.into()),
    }
}

/// A dropout probability (`--dropout`, `--elmo-dropout`): finite, in `[0, 1)`.
fn probability(text: &str) -> std::result::Result<f64, String> {
    finite_where(
        text,
        |v| (0.0..1.0).contains(&v),
        "a dropout probability is in [0, 1)",
    )
}

/// A positive finite number (`--lr`).
fn positive(text: &str) -> std::result::Result<f64, String> {
    finite_where(text, |v| v > 0.0, "a positive number")
}

/// A finite number ≥ 0 (`--lambda`).
fn non_negative(text: &str) -> std::result::Result<f64, String> {
    finite_where(text, |v| v >= 0.0, "a number ≥ 0")
}

fn read(format: &DataFormat, path: &Path, what: &str) -> Result<Vec<Example>> {
    if !path.is_file() {
        bail!("{}: no such {what} file", path.display());
    }
    Ok(format.read(path)?)
}

/// The biLM layers of every sentence of `sets`, with a progress bar; beyond `memory_mib` they
/// go to a temporary file in `spill_dir`. `training`: for a training run's epochs.
fn features(
    elmo: &ElmoSource,
    (sets, training): (&[&[Example]], bool),
    (device, backend): (&Device, Backend),
    (memory_mib, spill_dir): (usize, &Path),
    quiet: bool,
) -> Result<BiLmFeatures> {
    let loaded = model_args(elmo).load(device, quiet)?;
    let sentences: Vec<&[String]> = sets
        .iter()
        .flat_map(|set| set.iter())
        .flat_map(Example::sentences)
        .collect();
    let bar = crate::progress::bar(
        sentences.len() as u64,
        quiet,
        "biLM {bar:30} {pos}/{len} sentences ({per_sec}, ETA {eta})",
    );
    let start = std::time::Instant::now();
    let (batch_size, max_positions) = backend.stateless_batches();
    let batches = BiLmFeatures::with_batches(&loaded.bilm, device, batch_size, max_positions)?;
    let mut cache = batches.spilling(
        memory_mib.saturating_mul(1 << 20),
        std::path::absolute(spill_dir).unwrap_or_else(|_| spill_dir.to_path_buf()),
    );
    cache.add(sentences, || bar.inc(1))?;
    bar.finish_and_clear();
    if !quiet {
        let spilled = cache.spilled().map_or(String::new(), |(bytes, dir)| {
            format!(
                " and {:.0} MiB in a temporary file in {} (--features-memory-mib)",
                bytes as f64 / (1 << 20) as f64,
                dir.display()
            )
        });
        let epochs = if training {
            ", computed once for all epochs"
        } else {
            ""
        };
        eprintln!(
            "biLM features of {} sentences from {} in {:.1} s ({:.0} MiB in memory{spilled}){epochs}",
            cache.len(),
            loaded.description,
            start.elapsed().as_secs_f64(),
            cache.n_bytes() as f64 / (1 << 20) as f64
        );
    }
    Ok(cache)
}

fn model_args(source: &ElmoSource) -> ModelArgs {
    let (options, weights, model) = match source {
        ElmoSource::Files { options, weights } => {
            (Some(options.clone()), Some(weights.clone()), None)
        }
        ElmoSource::Directory(dir) => (None, None, Some(dir.clone())),
        ElmoSource::Demo => (None, None, None),
    };
    ModelArgs {
        options,
        weights,
        model,
    }
}

/// `path` made absolute, for the task directory's record to find it from any folder; a URL, or
/// the name of a model AllenNLP publishes where no such folder exists, as it is.
fn absolute(path: &Path) -> PathBuf {
    if url_of(path).is_some() || published_model(path).is_some() {
        return path.to_path_buf();
    }
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

struct Bars {
    bar: ProgressBar,
    quiet: bool,
    loss: f64,
    seen: usize,
}

impl TaskObserver for Bars {
    fn epoch_started(&mut self, epoch: usize, n_batches: usize) {
        self.bar = crate::progress::bar(
            n_batches as u64,
            self.quiet,
            "epoch {prefix} {bar:30} {pos}/{len} batches, {msg} ({per_sec}, ETA {eta})",
        );
        self.bar.set_prefix(epoch.to_string());
        (self.loss, self.seen) = (0.0, 0);
    }
    fn batch_done(&mut self, loss: f64, _n_examples: usize) {
        self.loss += loss;
        self.seen += 1;
        self.bar
            .set_message(format!("loss {:.4}", self.loss / self.seen as f64));
        self.bar.inc(1);
    }
    fn epoch_done(&mut self, report: &EpochReport) {
        self.bar.finish_and_clear();
        if !self.quiet {
            let f1 = report
                .dev_span_f1
                .map_or(String::new(), |f| format!(" span-f1 {f:.2}"));
            eprintln!(
                "epoch {}: loss {:.4}, dev accuracy {:.2}{f1} ({:.1} s){}",
                report.epoch,
                report.loss,
                report.dev_accuracy,
                report.seconds,
                if report.best { " (best)" } else { "" }
            );
        }
    }
}

fn train(args: &TaskTrainArgs) -> Result<()> {
    let device = args.backend.device()?;
    let format = DataFormat {
        kind: args.task.into(),
        text_column: (args.text_column.clone())
            .unwrap_or_else(|| if args.no_header { "2" } else { "text" }.into()),
        label_column: (args.label_column.clone())
            .unwrap_or_else(|| if args.no_header { "1" } else { "label" }.into()),
        header: !args.no_header,
        tokenize: args.tokenize,
        max_tokens: args.max_tokens,
    };
    let train = read(&format, &args.train, "training")?;
    let dev = read(&format, &args.dev, "dev")?;
    let words = Index::words(
        train
            .iter()
            .flat_map(Example::sentences)
            .flatten()
            .map(String::as_str),
        args.min_count,
        args.max_words,
    );
    let labels = Index::labels(train.iter().flat_map(Example::labels).map(String::as_str));
    if labels.len() < 2 {
        bail!("{}: fewer than two distinct labels", args.train.display());
    }
    let elmo =
        (!args.no_elmo).then(
            || match (&args.elmo.options, &args.elmo.weights, &args.elmo.model) {
                (Some(o), Some(w), _) => ElmoSource::Files {
                    options: absolute(o),
                    weights: absolute(w),
                },
                (_, _, Some(dir)) => ElmoSource::Directory(absolute(dir)),
                _ => ElmoSource::Demo,
            },
        );
    if elmo == Some(ElmoSource::Demo) && !args.quiet {
        eprintln!("note: no --options/--weights or --model: using the small embedded demo biLM");
    }
    let cache = match &elmo {
        Some(source) => {
            let memory = (args.features_memory.mib, existing_folder(&args.out));
            Some(features(
                source,
                (&[&train, &dev], true),
                (&device, args.backend),
                memory,
                args.quiet,
            )?)
        }
        None => None,
    };
    let spec = TaskSpec {
        model: TaskModelConfig {
            kind: args.task.into(),
            encoder: SentenceEncoderConfig {
                n_words: words.len(),
                d_word: args.d_word,
                d_hidden: args.d_hidden as usize,
                dropout: args.dropout,
                elmo: cache.as_ref().map(|c| ElmoSettings {
                    n_layers: c.n_layers,
                    d_layer: c.d_layer,
                    mix: args.mix,
                    place: args.elmo_at.into(),
                    dropout: args.elmo_dropout,
                    layer_norm: args.layer_norm,
                }),
                chars: args.char_cnn.then(CharCnnSettings::default),
            },
            n_labels: labels.len(),
        },
        format,
        words,
        labels,
        elmo,
    };
    let options = TaskTrainOptions {
        epochs: args.epochs,
        patience: args.patience,
        batch_size: args.batch_size,
        lr: args.lr,
        lambda: args.lambda,
        seed: args.seed,
        break_stale_lock: args.break_stale_lock,
    };
    let mut bars = Bars {
        bar: ProgressBar::hidden(),
        quiet: args.quiet,
        loss: 0.0,
        seen: 0,
    };
    let dir = TaskDirectory::new(&args.out);
    let best = elmo_tasks::train_task(
        &spec,
        &train,
        &dev,
        cache.as_ref(),
        &options,
        &dir,
        &device,
        &mut bars,
    )?;
    let f1 = best
        .span_f1
        .map_or(String::new(), |f| format!(" span-f1 {f:.2}"));
    println!(
        "best epoch {}: dev accuracy {:.2}{f1}; model in {}",
        best.epoch,
        best.accuracy,
        args.out.display()
    );
    if let Some(weights) = &best.mix_weights {
        let shown: Vec<String> = weights.iter().map(|w| format!("{w:.3}")).collect();
        println!("ELMo layer weights softmax(s): [{}]", shown.join(", "));
    }
    Ok(())
}

/// `path` where it is a folder, else the nearest folder above it that exists (`.` for a
/// relative path none of whose folders exist yet).
fn existing_folder(path: &Path) -> &Path {
    (path.ancestors())
        .find(|folder| folder.is_dir())
        .unwrap_or(Path::new("."))
}

/// The spec, model and (with ELMo) features of a task directory for `data`, keeping at most
/// `memory_mib` of them in memory.
fn open(
    dir: &Path,
    data: &Path,
    (device, backend): (&Device, Backend),
    memory_mib: usize,
    quiet: bool,
) -> Result<(
    TaskSpec,
    elmo_tasks::TaskModel,
    Vec<Example>,
    Option<BiLmFeatures>,
)> {
    let task = TaskDirectory::new(dir);
    let spec = task.spec()?;
    let model = task
        .load_model(&spec, device)
        .with_context(|| format!("{}: no trained model yet?", dir.display()))?;
    let examples = read(&spec.format, data, "data")?;
    let cache = match &spec.elmo {
        Some(source) => Some(features(
            source,
            (&[&examples], false),
            (device, backend),
            (memory_mib, dir),
            quiet,
        )?),
        None => None,
    };
    Ok((spec, model, examples, cache))
}

fn eval(args: &TaskEvalArgs) -> Result<()> {
    let device = args.backend.device()?;
    let (memory, on) = (args.features_memory.mib, (&device, args.backend));
    let (spec, model, examples, cache) = open(&args.model, &args.data, on, memory, args.quiet)?;
    let scores = elmo_tasks::evaluate(&model, &spec, &examples, cache.as_ref(), &device)?;
    println!("{scores}");
    if args.details {
        for (kind, s) in &scores.per_type {
            println!(
                "  {kind}: precision {:.2} recall {:.2} f1 {:.2} ({} gold)",
                s.precision(),
                s.recall(),
                s.f1(),
                s.gold
            );
        }
        for (gold, predicted, n) in &scores.confusions {
            println!("  {gold} -> {predicted}: {n}");
        }
    }
    Ok(())
}

fn predict(args: &TaskPredictArgs) -> Result<()> {
    let device = args.backend.device()?;
    let (memory, on) = (args.features_memory.mib, (&device, args.backend));
    let (spec, model, examples, cache) = open(&args.model, &args.data, on, memory, args.quiet)?;
    let predictions = elmo_tasks::predict(&model, &spec, &examples, cache.as_ref(), &device)?;
    let mut text = Vec::new();
    for (example, predicted) in examples.iter().zip(&predictions) {
        match spec.format.kind {
            TaskKind::Tag => {
                for (token, tag) in example.tokens.iter().zip(predicted) {
                    writeln!(text, "{token}\t{tag}")?;
                }
                writeln!(text)?;
            }
            TaskKind::Classify | TaskKind::Pair => {
                writeln!(text, "{}", predicted.first().map_or("", String::as_str))?;
            }
        }
    }
    match &args.out {
        // Whole or not at all: an interrupted run leaves no partial file.
        Some(path) => elmo_model::write_atomic(path, &text)
            .with_context(|| format!("{}: could not write the predictions", path.display()))?,
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&text)?;
            stdout.flush()?;
        }
    }
    Ok(())
}
