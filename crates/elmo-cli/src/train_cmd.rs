//! `elmo train`: pretrain or fine-tune a biLM (bilm-tf's recipe), with checkpoints, `--resume`,
//! a metrics log and perplexity curves.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use elmo_model::KernelSettings;
use elmo_train::checkpoint::{Checkpoint, RunDirectory};
use elmo_train::config::{Averaging, LrSchedule, OptimizerConfig, TrainConfig};
use elmo_train::corpus::expand_patterns;
use elmo_train::metrics::MetricsRecord;
use elmo_train::trainer::StepReport;
use elmo_train::{InitFrom, TrainObserver, TrainOptions, TrainedRun, Vocabulary, train};
use indicatif::ProgressBar;

use crate::backend::{Backend, PrecisionArg};
use crate::model_files::{Download, PublishedModel, local_path, naming_downloads, published_model};

/// Optimizers selectable on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerKind {
    /// Adagrad with initial accumulator 1.0 (bilm-tf).
    Adagrad,
    /// Adam.
    Adam,
    /// Plain SGD (Kim et al. 2016's PTB recipe; their rate 1 is --lr 70 here, see the docs).
    Sgd,
}

/// Arguments of `elmo train`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: elmo train --preset small --train 'data/train/*.txt' \
    --vocab vocab.txt --out runs/small --valid data/valid.txt --steps 100000"
)]
pub struct TrainArgs {
    /// tiny | small | medium | original, or a JSON config file (as saved in a run's config.json).
    /// Optional with --resume (the run's config.json is used).
    #[arg(long, value_name = "PRESET|CONFIG.json")]
    pub preset: Option<String>,
    /// Training files or glob patterns (one sentence per line).
    #[arg(long, required = true, num_args = 1.., value_name = "FILE_OR_GLOB")]
    pub train: Vec<String>,
    /// The output vocabulary (`elmo vocab`).
    #[arg(long, value_name = "VOCAB")]
    pub vocab: PathBuf,
    /// The run directory (config, vocabulary, checkpoints, metrics.jsonl, curves.svg).
    #[arg(long, value_name = "RUN_DIR")]
    pub out: PathBuf,
    /// Validation file: full-softmax perplexity at every checkpoint.
    #[arg(long, value_name = "FILE")]
    pub valid: Option<PathBuf>,
    /// Stop after N optimizer steps in total (steps before a resume count).
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub steps: u64,
    /// Write a checkpoint every N steps (and at the end).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub checkpoint_every: u64,
    /// Keep the newest K checkpoints.
    #[arg(long, default_value_t = 3, value_name = "K")]
    pub keep_checkpoints: usize,
    /// Write a metrics line every N steps.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub log_every: u64,
    /// Seed of initialisation, data order, dropout and negative sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Continue the run in --out from its newest checkpoint (same arguments as the first call;
    /// --lr, --warmup-steps, --plateau-decay and --constant-lr may change the rate from there on).
    #[arg(long)]
    pub resume: bool,
    /// Start a new run from trained weights: pretrained OPTIONS_JSON WEIGHTS_HDF5 (paths or
    /// URLs; the architecture comes from them; the softmax is new), the NAME of a model
    /// AllenNLP publishes (as `embed --model`: small, medium, original, original-5.5b), or a
    /// RUN_DIR of `elmo train` (its
    /// newest checkpoint; its softmax too when --vocab is the run's vocabulary; with no --preset
    /// its config.json, overrides applied: its rate schedule too, unless --constant-lr,
    /// --warmup-steps or --plateau-decay replaces it). Optimizer state, step and data position
    /// start anew, e.g. to continue an Adam run with SGD, or on domain text.
    #[arg(
        long,
        num_args = 1..=2,
        value_names = ["RUN_DIR|NAME|OPTIONS_JSON", "WEIGHTS_HDF5"]
    )]
    pub init_from: Option<Vec<PathBuf>>,
    /// Compute backend.
    #[arg(long, value_enum, default_value_t = Backend::Flex)]
    pub backend: Backend,
    /// On wgpu, run burn's own operations instead of elmo-rs's fused kernels and split products
    /// (the same results; for comparisons and as a workaround).
    #[arg(long)]
    pub no_fused_kernels: bool,
    /// Precision of the large products: `mixed` runs their operands (forward and backward) in
    /// 16-bit floats (tensor cores through `--backend vulkan` or `cuda`), with `f32` weights,
    /// LSTM state, softmax statistics and optimizer state and a dynamic loss scale; GPU
    /// backends only. A run resumes in the precision it started with.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
    /// With `--backend cuda`: the products through CubeCL's kernels instead of NVIDIA's cuBLAS
    /// (the same values to float rounding; for comparisons and as a workaround).
    #[cfg(feature = "cuda-runtime")]
    #[arg(long)]
    pub no_cublas: bool,
    /// Remove a lock on --out left by an `elmo` process that is no longer running (another
    /// process writing the run is always refused).
    #[arg(long)]
    pub break_stale_lock: bool,
    /// Split raw text with the built-in tokenizer.
    #[arg(long)]
    pub tokenize: bool,
    /// Rows per batch, per tower (overrides the preset).
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,
    /// Towers (bilm-tf's `n_gpus`): a step reads K × --batch-size rows, one slice per tower,
    /// each tower with its own negatives, dropout masks and mean loss, and applies the mean of
    /// the towers' gradients. On one device the towers run one after another (bilm-tf's batch on
    /// fewer GPUs); with --gpus each on its GPU. Default: the number of --gpus, else the preset's
    /// (1). A run resumes with the towers it started with.
    #[arg(long, value_name = "K")]
    pub towers: Option<usize>,
    /// GPUs of the towers, one per tower, in order (e.g. `--gpus 0,1,2`, bilm-tf's three): for
    /// `--backend cuda` the N-th device that `CUDA_VISIBLE_DEVICES` leaves visible, for `wgpu`
    /// and `vulkan` the N-th discrete GPU; a GPU named twice runs two towers. The model, the
    /// optimizer and the update stay on the first, which sends the weights to the others at
    /// every step. A resumed run may use other GPUs.
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "N,N,...")]
    pub gpus: Option<Vec<usize>>,
    /// Time steps per batch (overrides the preset).
    #[arg(long, value_name = "N")]
    pub unroll_steps: Option<usize>,
    /// One sentence per row from a zero state, instead of bilm-tf's stateful packing.
    #[arg(long)]
    pub sentences: bool,
    /// Stateful batching over the corpus in file order, unshuffled, cut into one contiguous part
    /// per batch row (Zaremba et al.'s and Kim et al.'s PTB batching): the carried LSTM state then
    /// holds the preceding sentences of the same document. For corpora whose lines are in
    /// document order (PTB, WikiText); the run's `elmo eval` reads text the same way. Holds the
    /// whole corpus in memory.
    #[arg(long, conflicts_with = "sentences")]
    pub contiguous: bool,
    /// Stateful mode: probability that a row's carried LSTM state is zeroed before a batch
    /// (overrides the preset's 0.05; 0 = bilm-tf, never reset).
    #[arg(long, value_name = "P")]
    pub state_reset: Option<f64>,
    /// Corpus files read at once, their sentences interleaved at random (overrides the
    /// preset's 16; 1 = bilm-tf, one file after another). Memory: their raw text.
    #[arg(long, value_name = "N")]
    pub mixed_shards: Option<usize>,
    /// Dropout on every LSTM input and on the top output (overrides the preset).
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Locked (variational) dropout: one mask per row and feature for all the steps of a batch.
    #[arg(long)]
    pub locked_dropout: bool,
    /// Weight drop: probability of dropping each recurrent LSTM weight, one mask per layer and
    /// batch (overrides the preset; 0 = off).
    #[arg(long, value_name = "P")]
    pub weight_drop: Option<f64>,
    /// Negative samples of the sampled softmax (used when the vocabulary has more than twice
    /// this many entries).
    #[arg(long, value_name = "N")]
    pub negatives: Option<usize>,
    /// Optimizer (overrides the preset).
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerKind>,
    /// Learning rate (overrides the preset).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Clip the global gradient norm to NORM (overrides the preset's 10, bilm-tf's).
    #[arg(long, value_name = "NORM")]
    pub clip_norm: Option<f64>,
    /// Linear warm-up over N steps, then linear decay to zero at --steps (default: a constant
    /// rate, as bilm-tf).
    #[arg(long, value_name = "N")]
    pub warmup_steps: Option<u64>,
    /// Multiply the learning rate by FACTOR whenever the validation perplexity stops improving
    /// (Kim et al. 2016 halve it: 0.5). Needs --valid; validation runs at every checkpoint.
    #[arg(long, value_name = "FACTOR", conflicts_with = "warmup_steps")]
    pub plateau_decay: Option<f64>,
    /// With --plateau-decay: a validation that beats the last perplexity that made progress by
    /// less than this fraction makes none [default: 0.01].
    #[arg(long, value_name = "FRACTION", requires = "plateau_decay")]
    pub plateau_threshold: Option<f64>,
    /// With --plateau-decay: validations in a row without progress tolerated before the rate
    /// is lowered [default: 0].
    #[arg(long, value_name = "N", requires = "plateau_decay")]
    pub plateau_patience: Option<u32>,
    /// A constant learning rate from here on (--lr, or the config's rate, undecayed), dropping
    /// the schedule that the preset, the run's config.json (--resume) or --init-from RUN_DIR's
    /// config.json would otherwise bring.
    #[arg(long, conflicts_with_all = ["warmup_steps", "plateau_decay"])]
    pub constant_lr: bool,
    /// Average the weights from step N on (Polyak averaging; with --optimizer sgd, ASGD): the
    /// mean of the weights after every step since is what validation, `elmo eval`, `export`,
    /// `embed` and `--init-from` use. May be given or changed with --resume.
    #[arg(long, value_name = "N", conflicts_with = "average_when_flat")]
    pub average_from: Option<u64>,
    /// Start averaging the weights at the first validation worse than the best one before the
    /// last N validations (Merity et al. 2018's NT-ASGD trigger, their N = 5). Needs --valid.
    #[arg(long, value_name = "N")]
    pub average_when_flat: Option<u32>,
    /// With --resume: stop averaging and forget the mean (the trained weights are the result
    /// again).
    #[arg(long, conflicts_with_all = ["average_from", "average_when_flat"])]
    pub no_averaging: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

impl TrainArgs {
    /// `--init-from`: two paths (or URLs) are pretrained files, one a run directory or a
    /// published model's name; with the downloads among the files, for messages about them.
    fn init_from(&self) -> Result<(Option<InitFrom>, Vec<Download>)> {
        let pretrained = |options: &Path, weights: &Path| -> Result<_> {
            let local = (
                local_path(options, self.quiet)?,
                local_path(weights, self.quiet)?,
            );
            let downloads = [(options, &local.0), (weights, &local.1)]
                .into_iter()
                .filter_map(|(source, local)| Download::of(source, local))
                .collect();
            Ok((Some(InitFrom::Weights(local.0, local.1)), downloads))
        };
        match self.init_from.as_deref() {
            None => Ok((None, Vec::new())),
            Some([options, weights]) => pretrained(options, weights),
            Some([dir]) if TrainedRun::is_run_directory(dir) => {
                Ok((Some(InitFrom::Run(dir.clone())), Vec::new()))
            }
            Some([name]) if let Some(published) = published_model(name) => {
                let (options, weights) = (published.options_url(), published.weights_url());
                pretrained(options.as_ref(), weights.as_ref())
            }
            Some(paths) => bail!(
                "--init-from {}: not a run directory of `elmo train` (config.json and \
                 checkpoints/) nor the name of a model AllenNLP publishes ({}); pretrained \
                 weights take two paths or URLs, OPTIONS_JSON WEIGHTS_HDF5",
                paths[0].display(),
                PublishedModel::names()
            ),
        }
    }

    /// The effective configuration: preset or file, pretrained architecture, then the overrides.
    fn config(&self, init_from: Option<&InitFrom>, downloads: &[Download]) -> Result<TrainConfig> {
        let run = RunDirectory::new(&self.out);
        let mut config = match (&self.preset, self.resume, init_from) {
            (Some(spec), _, _) => TrainConfig::from_preset_or_file(spec)?,
            (None, true, _) => TrainConfig::from_file(run.config_file())
                .context("--resume without --preset needs the run's config.json")?,
            (None, false, Some(InitFrom::Run(dir))) => {
                TrainConfig::from_file(RunDirectory::new(dir).config_file())?
            }
            (None, false, _) => {
                bail!("--preset is required (tiny, small, medium, original or a JSON config)")
            }
        };
        if let Some(from) = init_from {
            config.model = (from.options()).map_err(|e| naming_downloads(e.into(), downloads))?;
        }
        if let Some(v) = self.batch_size {
            config.batch_size = v;
        }
        if let Some(v) = self.unroll_steps {
            config.unroll_steps = v;
        }
        match (self.towers, &self.gpus) {
            (Some(towers), Some(gpus)) if towers != gpus.len() => bail!(
                "--towers {towers} with {} --gpus: give one GPU per tower",
                gpus.len()
            ),
            (Some(towers), _) => config.towers = towers,
            (None, Some(gpus)) => config.towers = gpus.len(),
            (None, None) => {}
        }
        if self.sentences {
            config.stateful = false;
        }
        if self.contiguous {
            config.contiguous = true;
        }
        if let Some(v) = self.dropout {
            config.dropout = v;
        }
        if self.locked_dropout {
            config.locked_dropout = true;
        }
        if let Some(v) = self.weight_drop {
            config.weight_drop = v;
        }
        if let Some(v) = self.state_reset {
            config.state_reset = v;
        }
        if let Some(v) = self.mixed_shards {
            config.n_mixed_shards = v;
        }
        if let Some(v) = self.negatives {
            config.negatives = v;
        }
        if let Some(v) = self.clip_norm {
            config.clip_norm = Some(v);
        }
        if self.tokenize {
            config.tokenize = true;
        }
        if let Some(warmup_steps) = self.warmup_steps {
            config.lr_schedule = LrSchedule::Linear {
                warmup_steps,
                total_steps: self.steps,
            };
        }
        if let Some(decay) = self.plateau_decay {
            config.lr_schedule = LrSchedule::Plateau {
                decay,
                threshold: self.plateau_threshold.unwrap_or(0.01),
                patience: self.plateau_patience.unwrap_or(0),
            };
        }
        if self.constant_lr {
            config.lr_schedule = LrSchedule::Constant;
        }
        if let Some(start) = self.average_from {
            config.averaging = Averaging::FromStep { start };
        }
        if let Some(patience) = self.average_when_flat {
            config.averaging = Averaging::WhenFlat { patience };
        }
        if self.no_averaging {
            config.averaging = Averaging::Off;
        }
        // --optimizer switches the kind, --lr the rate; anything not given keeps the preset's.
        let lr = self.lr.unwrap_or(config.optimizer.lr());
        let kind = self.optimizer.unwrap_or(match config.optimizer {
            OptimizerConfig::Adagrad { .. } => OptimizerKind::Adagrad,
            OptimizerConfig::Adam { .. } => OptimizerKind::Adam,
            OptimizerConfig::Sgd { .. } => OptimizerKind::Sgd,
        });
        config.optimizer = match (kind, &config.optimizer) {
            (OptimizerKind::Adam, _) => OptimizerConfig::Adam { lr },
            (OptimizerKind::Sgd, _) => OptimizerConfig::Sgd { lr },
            (
                OptimizerKind::Adagrad,
                OptimizerConfig::Adagrad {
                    initial_accumulator,
                    ..
                },
            ) => OptimizerConfig::Adagrad {
                lr,
                initial_accumulator: *initial_accumulator,
            },
            (OptimizerKind::Adagrad, _) => OptimizerConfig::Adagrad {
                lr,
                initial_accumulator: 1.0,
            },
        };
        // The run's tower count fixes the rows a step reads and the state it carries.
        if self.resume
            && let Ok(saved) = TrainConfig::from_file(run.config_file())
            && saved.towers != config.towers
        {
            bail!(
                "--resume: the run in {} trains {} tower(s); this command gives {} (--towers, \
                 or one --gpus entry per tower: a GPU may be named twice)",
                self.out.display(),
                saved.towers,
                config.towers
            );
        }
        config.validate()?;
        Ok(config)
    }
}

/// Progress bar and log lines.
struct Progress {
    bar: ProgressBar,
    quiet: bool,
    last_valid: Option<f64>,
}

impl Progress {
    /// A log line above the bar; straight to stderr when the bar is not drawn (stderr is not a
    /// terminal, e.g. a run in the background with its output in a file), unless `--quiet`.
    fn log(&self, line: String) {
        if !self.bar.is_hidden() {
            self.bar.println(line);
        } else if !self.quiet {
            eprintln!("{line}");
        }
    }
}

impl TrainObserver for Progress {
    fn started(&mut self, first_step: u64, total: u64, n_parameters: usize) {
        self.bar.set_length(total);
        self.bar.set_position(first_step);
        self.bar.reset_eta();
        self.log(format!(
            "{:.2}M parameters; {} from step {first_step} to {total}",
            n_parameters as f64 / 1e6,
            if first_step > 0 {
                "resuming"
            } else {
                "training"
            }
        ));
    }

    fn step(&mut self, report: &StepReport) {
        self.bar.set_position(report.step);
    }

    fn record(&mut self, record: &MetricsRecord) {
        match *record {
            MetricsRecord::Train {
                step,
                loss,
                forward_perplexity,
                backward_perplexity,
                lr,
                tokens_per_second,
                ..
            } => {
                let valid = self
                    .last_valid
                    .map_or(String::new(), |v| format!(" valid ppl {v:.1}"));
                let message = format!(
                    "loss {loss:.3} ppl fwd {forward_perplexity:.1} bwd {backward_perplexity:.1}{valid} {tokens_per_second:.0} tok/s"
                );
                if self.bar.is_hidden() {
                    // No bar to carry the message: one line per metrics record instead.
                    self.log(format!("step {step}: {message} lr {lr:.3e}"));
                } else {
                    self.bar.set_message(message);
                }
            }
            MetricsRecord::Valid {
                step,
                forward_perplexity,
                backward_perplexity,
                perplexity,
                averaged_steps,
            } => {
                self.last_valid = Some(perplexity);
                let weights = averaged_steps.map_or(String::new(), |n| {
                    format!(" (mean of the last {n} steps' weights)")
                });
                self.log(format!(
                    "step {step}: valid perplexity forward {forward_perplexity:.2} backward {backward_perplexity:.2} average {perplexity:.2}{weights}"
                ));
            }
        }
    }

    fn validating(&mut self) {
        self.bar.set_message("validating…");
    }

    fn checkpoint(&mut self, checkpoint: &Checkpoint) {
        self.log(format!("checkpoint {}", checkpoint.dir.display()));
    }

    fn warning(&mut self, message: &str) {
        self.log(format!("warning: {message}"));
    }

    fn lr_decayed(&mut self, lr: f64) {
        self.log(format!(
            "validation perplexity stopped improving: learning rate lowered to {lr:.3e}"
        ));
    }

    fn initialised_from(&mut self, init_from: &InitFrom, softmax_taken: bool) {
        if let (InitFrom::Run(dir), false) = (init_from, softmax_taken) {
            self.log(format!(
                "note: --vocab is not the vocabulary of {}: the softmax starts new",
                dir.display()
            ));
        }
    }

    fn averaging_started(&mut self, step: u64) {
        self.log(format!(
            "weight averaging started at step {step}: validation and checkpoints use the mean"
        ));
    }
}

/// Runs `elmo train`.
pub fn run(args: &TrainArgs) -> Result<()> {
    let (init_from, downloads) = args.init_from()?;
    let config = args.config(init_from.as_ref(), &downloads)?;
    let vocab = Vocabulary::from_file(&args.vocab)?;
    let train_files = expand_patterns(&args.train)?;
    // With --gpus the trainer's device is the first tower's.
    let (device, tower_devices) = match &args.gpus {
        Some(gpus) => {
            let devices = args.backend.gpu_devices(gpus)?;
            (devices[0].clone(), devices)
        }
        None => (args.backend.device()?, Vec::new()),
    };
    for device in std::iter::once(&device).chain(&tower_devices) {
        args.precision.check_device(args.backend, device)?;
    }
    let options = TrainOptions {
        run_dir: args.out.clone(),
        train_files,
        valid_file: args.valid.clone(),
        steps: args.steps,
        checkpoint_every: args.checkpoint_every,
        keep_checkpoints: args.keep_checkpoints,
        log_every: args.log_every,
        seed: args.seed,
        resume: args.resume,
        init_from,
        kernels: KernelSettings {
            precision: args.precision.into(),
            #[cfg(feature = "cuda-runtime")]
            vendor_blas: !args.no_cublas,
            ..match args.no_fused_kernels {
                true => KernelSettings::COMPOSED,
                false => KernelSettings::default(),
            }
        },
        break_stale_lock: args.break_stale_lock,
        tower_devices,
    };
    let mut progress = Progress {
        bar: crate::progress::bar(
            args.steps,
            args.quiet,
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} steps {msg} ETA {eta}",
        ),
        quiet: args.quiet,
        last_valid: None,
    };
    let summary = train(&config, vocab, &options, &device, &mut progress)
        .map_err(|e| naming_downloads(e.into(), &downloads))?;
    progress.bar.finish_and_clear();
    let run = RunDirectory::new(&args.out);
    let valid = summary
        .valid
        .map_or(String::new(), |p| format!("; validation {p}"));
    eprintln!(
        "trained {} steps{valid}; metrics in {}, curves in {}",
        summary.steps,
        run.metrics_file().display(),
        run.curves_file().display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Progress, TrainArgs};
    use clap::Parser;
    use elmo_train::TrainObserver;
    use elmo_train::config::{LrSchedule, TrainConfig};
    use indicatif::{ProgressBar, ProgressDrawTarget, TermLike};
    use std::io;
    use std::sync::{Arc, Mutex};

    /// A terminal that keeps the lines written to it.
    #[derive(Debug, Default, Clone)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            120
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, line: &str) -> io::Result<()> {
            self.write_str(line)
        }
        fn write_str(&self, text: &str) -> io::Result<()> {
            let mut lines = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            lines.push(text.to_string());
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Parses `elmo train ARGS` with the real command line and returns its arguments.
    fn train_args(args: &[&str]) -> anyhow::Result<TrainArgs> {
        let cli = crate::Cli::try_parse_from(["elmo", "train"].iter().chain(args))?;
        match cli.command {
            crate::Command::Train(args) => Ok(*args),
            other => anyhow::bail!("parsed as {other:?}"),
        }
    }

    /// `--constant-lr` drops a plateau schedule that a config file brings (as `--init-from
    /// RUN_DIR` does with the run's config.json); without it the schedule is kept.
    #[test]
    fn constant_lr_drops_an_inherited_schedule() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut config = TrainConfig::from_preset_or_file("tiny")?;
        config.lr_schedule = LrSchedule::Plateau {
            decay: 0.5,
            threshold: 0.01,
            patience: 2,
        };
        let file = dir.path().join("config.json");
        config.to_file(&file)?;
        let preset = file.to_str().unwrap_or_default();
        let parse = |extra: &[&str]| -> anyhow::Result<TrainConfig> {
            let mut args = vec!["--preset", preset, "--train", "t.txt", "--vocab", "v.txt"];
            args.extend(["--out", "run"]);
            args.extend(extra);
            train_args(&args)?.config(None, &[])
        };
        assert_eq!(parse(&[])?.lr_schedule, config.lr_schedule);
        assert_eq!(parse(&["--constant-lr"])?.lr_schedule, LrSchedule::Constant);
        assert!(parse(&["--constant-lr", "--plateau-decay", "0.5"]).is_err());
        Ok(())
    }

    /// With a bar on a terminal, log lines are printed above it (this once recursed forever).
    #[test]
    fn log_lines_go_above_a_drawn_bar() {
        let screen = Screen::default();
        let bar = ProgressBar::with_draw_target(
            Some(10),
            ProgressDrawTarget::term_like(Box::new(screen.clone())),
        );
        assert!(!bar.is_hidden());
        let mut progress = Progress {
            bar,
            quiet: false,
            last_valid: None,
        };
        progress.started(4, 10, 2_500_000);
        progress.lr_decayed(0.001);
        let lines = screen.0.lock().expect("screen").join("\n");
        assert!(
            lines.contains("2.50M parameters; resuming from step 4 to 10"),
            "{lines}"
        );
        assert!(
            lines.contains("learning rate lowered to 1.000e-3"),
            "{lines}"
        );
    }
}
