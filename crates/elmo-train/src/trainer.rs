//! The training loop (bilm-tf `train`) as a [`Trainer`]: opened on a new or resumed run
//! directory, it takes optimizer steps ([`crate::optimizer_step`]), writes metrics, validates
//! and writes atomic checkpoints, from which a run resumes exactly.
//!
//! Exactness of resume: data order is a function of the seed and the batcher position (saved),
//! dropout is re-seeded from (seed, step) before every step, sampled negatives are drawn from an
//! RNG seeded the same way, and the optimizer state, carried LSTM state and metrics window are
//! saved, so a resumed run computes the same losses as an uninterrupted one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::Device;
use elmo_kernels::{KernelSettings, largest_buffer_bytes};
use elmo_model::RunLock;

use crate::averaging::WeightAverage;
use crate::batcher::{BatchShape, Batcher, BatcherState};
use crate::checkpoint::{
    AVERAGE_FILE, Checkpoint, MODEL_FILE, OPTIMIZER_FILE, RunDirectory, TrainerState,
};
use crate::config::{Averaging, LrSchedule, TrainConfig};
use crate::corpus::for_each_line;
use crate::error::{Result, TrainError, io_error, record_error};
use crate::evaluate::{Perplexity, evaluate, perplexity};
use crate::init_from::{InitFrom, initial_model};
use crate::language_model::{BiLanguageModel, CarriedState};
use crate::lm_batch::LmBatch;
use crate::loss_scale::{LossScale, ScaledStep};
use crate::metrics::{MetricsLog, MetricsRecord, read_metrics};
use crate::optimizer::{TrainingOptimizer, build_optimizer};
use crate::optimizer_step::{StepSettings, optimizer_step_overlapping};
use crate::run::model_for;
use crate::run_info::RunInfo;
use crate::seeds::mix_seed;
use crate::step_input::StepInput;
use crate::step_losses::{LossWindow, StepLosses};
use crate::vocabulary::Vocabulary;

/// How to run the training (data, length, checkpoints); the model and optimisation settings are
/// in [`TrainConfig`].
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// The run directory (created; must not hold checkpoints unless `resume`).
    pub run_dir: PathBuf,
    /// Training files.
    pub train_files: Vec<PathBuf>,
    /// Validation file (perplexity at every checkpoint).
    pub valid_file: Option<PathBuf>,
    /// Stop after this many optimizer steps in total (resumed steps included).
    pub steps: u64,
    /// Checkpoint every N steps (and at the end).
    pub checkpoint_every: u64,
    /// Checkpoints kept.
    pub keep_checkpoints: usize,
    /// A metrics line every N steps.
    pub log_every: u64,
    /// Seed of initialisation, data order, dropout and sampling.
    pub seed: u64,
    /// Continue from the newest checkpoint of `run_dir`.
    pub resume: bool,
    /// Start a new run from pretrained weights or another run's (see [`InitFrom`]).
    pub init_from: Option<InitFrom>,
    /// Which custom kernels run on a CubeCL device (all by default; the same results).
    pub kernels: KernelSettings,
    /// Remove a lock on `run_dir` left by a writer that is no longer running
    /// ([`elmo_model::RunLock`]); without it such a lock is an error.
    pub break_stale_lock: bool,
    /// The device of each of the config's towers ([`TrainConfig::towers`], bilm-tf's
    /// `n_gpus`), in order: one per tower (e.g. one GPU each), or empty for every tower on
    /// the trainer's device. The model, optimizer and weight average stay on the trainer's
    /// device, where the towers' gradients are summed; each step copies the weights to the
    /// other towers' devices. Not part of a run: a resumed run may use other devices.
    pub tower_devices: Vec<Device>,
}

/// Progress of one step, for progress bars.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// Steps done.
    pub step: u64,
    /// Steps the run will do in total.
    pub total: u64,
    /// Joint loss of this step.
    pub loss: f64,
    /// Forward perplexity of this step.
    pub forward_perplexity: f64,
    /// Backward perplexity of this step.
    pub backward_perplexity: f64,
    /// Targets of this step (both directions).
    pub tokens: u64,
}

/// Receives the events of a run (progress bars, logs). Every method has an empty default.
pub trait TrainObserver {
    /// Training starts at `first_step` of `total`.
    fn started(&mut self, _first_step: u64, _total: u64, _n_parameters: usize) {}
    /// A step finished.
    fn step(&mut self, _report: &StepReport) {}
    /// A metrics line was written.
    fn record(&mut self, _record: &MetricsRecord) {}
    /// Validation is running.
    fn validating(&mut self) {}
    /// A checkpoint was written.
    fn checkpoint(&mut self, _checkpoint: &Checkpoint) {}
    /// The plateau schedule lowered the learning rate to `lr`.
    fn lr_decayed(&mut self, _lr: f64) {}
    /// A new run took its first weights from `init_from`, its softmax too if `softmax_taken`.
    fn initialised_from(&mut self, _init_from: &InitFrom, _softmax_taken: bool) {}
    /// Weight averaging started with the weights after step `step`.
    fn averaging_started(&mut self, _step: u64) {}
    /// Something went wrong that does not stop the run (a plot that could not be drawn).
    fn warning(&mut self, _message: &str) {}
}

impl TrainObserver for () {}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    /// Steps done in total.
    pub steps: u64,
    /// The final checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// Validation perplexity at the end.
    pub valid: Option<Perplexity>,
    /// Model size.
    pub n_parameters: usize,
}

fn run_error(run: &RunDirectory, message: impl Into<String>) -> TrainError {
    TrainError::RunDirectory {
        path: run.path.clone(),
        message: message.into(),
    }
}

/// A training run in progress: the model, optimizer, data position and metrics of one run
/// directory, held (locked) until it is dropped.
///
/// [`Trainer::open`] starts a new run or resumes one; [`Trainer::step`], [`Trainer::log_metrics`],
/// [`Trainer::validate`] and [`Trainer::checkpoint`] are the parts of [`Trainer::run`]'s loop, for
/// a caller that drives its own schedule.
pub struct Trainer {
    config: TrainConfig,
    options: TrainOptions,
    vocab: Arc<Vocabulary>,
    run: RunDirectory,
    device: Device,
    train_device: Device,
    /// [`TrainOptions::tower_devices`] with autodiff.
    tower_devices: Vec<Device>,
    /// `None` only while a step holds it.
    model: Option<BiLanguageModel>,
    optimizer: TrainingOptimizer,
    batcher: Batcher,
    /// The next step's batch, read from `batcher` and prepared while the last step's device
    /// work ran, and the batcher's position before it (what a checkpoint records).
    prefetched: Option<Prefetched>,
    shape: BatchShape,
    state: Option<CarriedState>,
    progress: TrainerState,
    average: Option<WeightAverage<BiLanguageModel>>,
    metrics: MetricsLog,
    last_checkpoint: Option<Checkpoint>,
    valid: Option<Perplexity>,
    last_lr: f64,
    n_parameters: usize,
    window_start: Instant,
    window_tokens: u64,
    run_start: Instant,
    elapsed_before: f64,
    _lock: RunLock,
}

/// A batch read and prepared ahead ([`Trainer::step`]) and the batcher's position before it.
struct Prefetched {
    input: Result<Option<StepInput>>,
    before: BatcherState,
}

impl Trainer {
    /// Opens the run directory of `options`: a new run (config, vocabulary and `run.json`
    /// written, the model initialised from the seed or `--init-from`) or, with `resume`, the
    /// newest checkpoint of an existing one (its config, vocabulary and data checked).
    ///
    /// `device` is the plain device of the model and optimizer; gradients are taken on its
    /// autodiff counterpart, or on the towers' devices ([`TrainOptions::tower_devices`]) and
    /// summed on it. On resume the optimizer state is read onto `device` too, whatever burn's
    /// default device is (which need not start: a CPU run resumes on a machine without a GPU in
    /// a build with wgpu or CUDA compiled in).
    pub fn open(
        config: &TrainConfig,
        vocab: Vocabulary,
        options: &TrainOptions,
        device: &Device,
        observer: &mut dyn TrainObserver,
    ) -> Result<Self> {
        check_settings(config, &vocab, options)?;
        for device in std::iter::once(device).chain(&options.tower_devices) {
            check_buffers(config, vocab.len(), device, options.kernels)?;
        }
        check_corpus(options)?;
        let run = RunDirectory::new(&options.run_dir);
        let info = RunInfo {
            train: options.train_files.clone(),
            valid: options.valid_file.clone(),
            seed: options.seed,
            init_from: options.init_from.clone(),
            precision: options.kernels.precision,
        };
        let train_device = device.clone().autodiff();
        let tower_devices = (options.tower_devices.iter())
            .map(|device| device.clone().autodiff())
            .collect();
        // Built before the run directory is written, so that a bad --init-from leaves nothing
        // behind. On resume the checkpoint's weights replace these (--init-from is not read again).
        let resuming = options.resume && run.latest_checkpoint()?.is_some();
        let init_from = options.init_from.as_ref().filter(|_| !resuming);
        let initial = initial_model(
            config,
            &vocab,
            init_from,
            mix_seed(&[options.seed, 0x1417]),
            &train_device,
        )?;
        let mut model = initial.model.with_kernels(options.kernels);
        // One writer per run directory, held until the trainer is dropped.
        std::fs::create_dir_all(&run.path).map_err(io_error(&run.path))?;
        let lock = RunLock::acquire(run.lock_file(), options.break_stale_lock)?;
        let resume_from = prepare_run(&run, config, &vocab, &info, options.resume)?;
        if let Some(from) = init_from {
            observer.initialised_from(from, initial.softmax_taken);
        }
        let mut optimizer = build_optimizer(&config.optimizer, options.kernels);
        let vocab = Arc::new(vocab);
        let shape = config.batch_shape();
        let mut batcher = Batcher::new(
            options.train_files.clone(),
            config.tokenize,
            vocab.clone(),
            shape,
            Some(options.seed),
        );
        let mut state = None;
        let mut progress = TrainerState {
            step: 0,
            tokens: 0,
            batcher: batcher.state(),
            window: LossWindow::default(),
            has_lstm_state: false,
            elapsed_seconds: 0.0,
            plateau: Default::default(),
            averaging: Default::default(),
            loss_scale: None,
        };
        let mut average = None;
        let metrics = match &resume_from {
            Some(checkpoint) => {
                model = model
                    .try_load_file(checkpoint.model_file())
                    .map_err(record_error(checkpoint.model_file()))?;
                optimizer = optimizer
                    .load(checkpoint.optimizer_file(), device)
                    .map_err(record_error(checkpoint.optimizer_file()))?;
                progress = checkpoint.trainer_state()?;
                if progress.averaging.n_averaged > 0 && config.averaging != Averaging::Off {
                    let path = checkpoint.average_file();
                    let mean = model_for(config, &vocab, device)
                        .try_load_file(&path)
                        .map_err(record_error(&path))?;
                    average = Some(WeightAverage {
                        mean,
                        n_averaged: progress.averaging.n_averaged,
                    });
                }
                batcher.restore(progress.batcher.clone())?;
                if progress.has_lstm_state {
                    let lstm = &config.model.lstm;
                    state = Some(checkpoint.lstm_state(
                        lstm.n_layers,
                        config.batch_size * config.towers,
                        lstm.dim,
                        lstm.projection_dim,
                        &train_device,
                    )?);
                }
                MetricsLog::resume(run.metrics_file(), progress.step)?
            }
            None => MetricsLog::create(run.metrics_file())?,
        };
        // Mixed precision on a GPU scales the loss from the first step (or from the
        // checkpoint's scale).
        if options.kernels.precision.scales_loss(device) && progress.loss_scale.is_none() {
            progress.loss_scale = Some(LossScale::default());
        }
        let n_parameters = model.n_parameters();
        Ok(Self {
            config: config.clone(),
            options: options.clone(),
            vocab,
            run,
            device: device.clone(),
            train_device,
            tower_devices,
            model: Some(model),
            optimizer,
            batcher,
            prefetched: None,
            shape,
            state,
            elapsed_before: progress.elapsed_seconds,
            progress,
            average,
            metrics,
            last_checkpoint: resume_from,
            valid: None,
            last_lr: config.optimizer.lr(),
            n_parameters,
            window_start: Instant::now(),
            window_tokens: 0,
            run_start: Instant::now(),
            _lock: lock,
        })
    }

    /// Optimizer steps done (resumed ones included).
    pub fn steps_done(&self) -> u64 {
        self.progress.step
    }

    /// The model being trained.
    pub fn model(&self) -> &BiLanguageModel {
        self.model
            .as_ref()
            .expect("the model is only taken during a step")
    }

    /// Trains until `options.steps`: a metrics line every `log_every` steps, validation and a
    /// checkpoint every `checkpoint_every` steps, both at the last step.
    pub fn run(mut self, observer: &mut dyn TrainObserver) -> Result<TrainSummary> {
        observer.started(self.progress.step, self.options.steps, self.n_parameters);
        while self.progress.step < self.options.steps {
            self.step(observer)?;
            let step = self.progress.step;
            let last = step == self.options.steps;
            if step.is_multiple_of(self.options.log_every) || last {
                self.log_metrics(observer)?;
            }
            if step.is_multiple_of(self.options.checkpoint_every) || last {
                self.validate(observer)?;
                self.checkpoint(observer)?;
            }
        }
        Ok(TrainSummary {
            steps: self.progress.step,
            checkpoint: self.last_checkpoint,
            valid: self.valid,
            n_parameters: self.n_parameters,
        })
    }

    /// One optimizer step on the next batch, then the weight average moved on. The batch after
    /// it is read and prepared ([`StepInput`]: its char ids, distinct tokens and negatives)
    /// while the device runs the step, before the step waits for its losses; a checkpoint
    /// records the data position before that batch, and an error reading it is returned by
    /// the step that uses it. A non-finite loss is an error naming the last checkpoint (the
    /// model is left as it was). After a failed device ([`TrainError::Device`]) the trainer
    /// holds no model: drop it and resume from the run's last checkpoint.
    pub fn step(&mut self, observer: &mut dyn TrainObserver) -> Result<StepLosses> {
        let step = self.progress.step;
        let (config, n_vocab, seed) = (&self.config, self.vocab.len(), self.options.seed);
        let prepare = |batch: Option<LmBatch>, step| {
            batch.map(|batch| StepInput::prepare(&batch, config, n_vocab, seed, step))
        };
        let input = match self.prefetched.take() {
            Some(prefetched) => prefetched.input,
            None => self.batcher.next_batch().map(|batch| prepare(batch, step)),
        }?
        .ok_or_else(|| {
            TrainError::Corpus("the training stream ended (it should loop forever)".into())
        })?;
        let model = self
            .model
            .take()
            .expect("the model is only taken during a step");
        // A failed device leaves no model to go on with: the run stops, its checkpoints intact.
        // The next batch is read and prepared while the device runs this step.
        let (batcher, prefetched) = (&mut self.batcher, &mut self.prefetched);
        let (model, out) = optimizer_step_overlapping(
            model,
            &mut self.optimizer,
            &input,
            &mut self.state,
            StepSettings {
                config,
                n_vocab,
                seed,
                step,
                lr_scale: self.progress.plateau.factor(&self.config.lr_schedule),
                device: &self.train_device,
                tower_devices: &self.tower_devices,
                loss_scale: self.progress.loss_scale.map(|s| s.scale),
                profile: None,
            },
            || {
                let before = batcher.state();
                let input = batcher.next_batch().map(|batch| prepare(batch, step + 1));
                *prefetched = Some(Prefetched { input, before });
            },
        )?;
        self.model = Some(model);
        if let Some(loss_scale) = &mut self.progress.loss_scale {
            loss_scale.update(ScaledStep::of(&out));
        }
        if !out.loss.is_finite() {
            return Err(TrainError::NonFiniteLoss {
                step: step + 1,
                loss: out.loss,
                last_checkpoint: self
                    .last_checkpoint
                    .as_ref()
                    .map_or("none yet".into(), |c| c.dir.display().to_string()),
            });
        }
        let n_targets = out.n_forward + out.n_backward;
        self.progress.step += 1;
        self.progress.tokens += n_targets;
        self.window_tokens += n_targets;
        self.progress.window.add(&out);
        self.last_lr = out.lr;
        let step = self.progress.step;
        if self
            .progress
            .averaging
            .includes(&self.config.averaging, step)
        {
            let model = self
                .model
                .as_ref()
                .expect("the model is back after the step");
            match &mut self.average {
                Some(average) => average.add(model),
                None => {
                    self.average = Some(WeightAverage::start(model));
                    observer.averaging_started(step);
                }
            }
            self.progress.averaging.n_averaged = self.average.as_ref().map_or(0, |a| a.n_averaged);
        } else {
            self.average = None;
        }
        observer.step(&StepReport {
            step,
            total: self.options.steps,
            loss: out.loss,
            forward_perplexity: perplexity(out.forward_nll, out.n_forward),
            backward_perplexity: perplexity(out.backward_nll, out.n_backward),
            tokens: n_targets,
        });
        Ok(out)
    }

    /// Appends a `train` metrics line: the means over the steps since the previous one.
    pub fn log_metrics(&mut self, observer: &mut dyn TrainObserver) -> Result<()> {
        let w = std::mem::take(&mut self.progress.window);
        if w.steps == 0 {
            return Ok(());
        }
        let seconds = self.window_start.elapsed().as_secs_f64().max(1e-9);
        let record = MetricsRecord::Train {
            step: self.progress.step,
            loss: w.loss / w.steps as f64,
            forward_perplexity: perplexity(w.forward_nll, w.forward_targets),
            backward_perplexity: perplexity(w.backward_nll, w.backward_targets),
            lr: self.last_lr,
            grad_norm: w.mean_grad_norm(),
            tokens: self.progress.tokens,
            tokens_per_second: self.window_tokens as f64 / seconds,
            loss_scale: self.progress.loss_scale.map(|s| s.scale),
            skipped_steps: w.skipped,
        };
        self.metrics.append(&record)?;
        observer.record(&record);
        self.window_start = Instant::now();
        self.window_tokens = 0;
        Ok(())
    }

    /// The validation perplexity of the model (of the weight average once it has started), as a
    /// `valid` metrics line; it drives the plateau schedule and the start of averaging. `None`
    /// when the run has no validation file.
    pub fn validate(&mut self, observer: &mut dyn TrainObserver) -> Result<Option<Perplexity>> {
        let Some(valid_file) = &self.options.valid_file else {
            return Ok(None);
        };
        observer.validating();
        let p = evaluate(
            &self
                .average
                .as_ref()
                .map_or_else(|| self.model().valid(), |a| a.mean.clone()),
            vec![valid_file.clone()],
            self.config.tokenize,
            self.vocab.clone(),
            self.shape,
            &self.device,
            |_| {},
        )?;
        let record = MetricsRecord::Valid {
            step: self.progress.step,
            forward_perplexity: p.forward,
            backward_perplexity: p.backward,
            perplexity: p.average,
            averaged_steps: self.average.as_ref().map(|a| a.n_averaged),
        };
        self.metrics.append(&record)?;
        observer.record(&record);
        let schedule = &self.config.lr_schedule;
        if self.progress.plateau.observe(schedule, p.average) {
            observer.lr_decayed(self.config.optimizer.lr() * self.progress.plateau.scale);
        }
        if self.average.is_none() {
            self.progress.averaging.observe_validation(
                &self.config.averaging,
                p.average,
                self.progress.step,
            );
        }
        self.valid = Some(p);
        Ok(Some(p))
    }

    /// Writes a checkpoint (model, optimizer, weight average, carried state, data position,
    /// metrics window) atomically, keeping the newest `keep_checkpoints`, and redraws the curves.
    pub fn checkpoint(&mut self, observer: &mut dyn TrainObserver) -> Result<Checkpoint> {
        self.progress.batcher = match &self.prefetched {
            Some(prefetched) => prefetched.before.clone(),
            None => self.batcher.state(),
        };
        self.progress.has_lstm_state = self.state.is_some();
        self.progress.elapsed_seconds =
            self.elapsed_before + self.run_start.elapsed().as_secs_f64();
        let model = self
            .model
            .as_ref()
            .expect("the model is only taken during a step");
        let (optimizer, average) = (&self.optimizer, &self.average);
        let checkpoint = self.run.save_checkpoint(
            |dir| {
                let file = |name: &str| dir.join(name);
                model
                    .clone()
                    .save_file(file(MODEL_FILE))
                    .map_err(record_error(file(MODEL_FILE)))?;
                optimizer
                    .save(file(OPTIMIZER_FILE))
                    .map_err(record_error(file(OPTIMIZER_FILE)))?;
                if let Some(average) = average {
                    average
                        .mean
                        .clone()
                        .save_file(file(AVERAGE_FILE))
                        .map_err(record_error(file(AVERAGE_FILE)))?;
                }
                Ok(())
            },
            self.state.as_ref(),
            &self.progress,
            self.options.keep_checkpoints,
        )?;
        observer.checkpoint(&checkpoint);
        self.last_checkpoint = Some(checkpoint.clone());
        // Redrawn at every checkpoint so the curves follow a long run. A plot is a convenience:
        // one that cannot be drawn (no perplexity logged yet, a full disk) is reported and never
        // stops the run.
        let plotted = read_metrics(self.run.metrics_file())
            .and_then(|records| crate::plot::plot_curves(&records, &self.run.curves_file()));
        if let Err(error) = plotted {
            observer.warning(&format!("curves not drawn: {error}"));
        }
        Ok(checkpoint)
    }
}

/// Settings that no run can use, refused before anything is written.
fn check_settings(config: &TrainConfig, vocab: &Vocabulary, options: &TrainOptions) -> Result<()> {
    config.validate()?;
    if vocab.is_empty() {
        return Err(TrainError::InvalidConfig(
            "the vocabulary has no token besides <S>, </S>, <UNK>".into(),
        ));
    }
    if !options.tower_devices.is_empty() && options.tower_devices.len() != config.towers {
        return Err(TrainError::InvalidConfig(format!(
            "{} tower devices for the config's {} towers: give one device per tower, or none",
            options.tower_devices.len(),
            config.towers
        )));
    }
    if options.checkpoint_every == 0 || options.log_every == 0 {
        return Err(TrainError::InvalidConfig(
            "--checkpoint-every and --log-every must be positive".into(),
        ));
    }
    if matches!(config.lr_schedule, LrSchedule::Plateau { .. }) && options.valid_file.is_none() {
        return Err(TrainError::InvalidConfig(
            "the plateau learning-rate schedule needs a validation file".into(),
        ));
    }
    if matches!(config.averaging, Averaging::WhenFlat { .. }) && options.valid_file.is_none() {
        return Err(TrainError::InvalidConfig(
            "averaging from a flat validation perplexity needs a validation file".into(),
        ));
    }
    Ok(())
}

/// Reads every line of the training and validation files once, before anything is built or
/// written: invalid UTF-8 is an error naming its file and line now, not when the batcher
/// reaches that file hours into the run.
fn check_corpus(options: &TrainOptions) -> Result<()> {
    for path in options.train_files.iter().chain(&options.valid_file) {
        for_each_line(path, |_, _| Ok(()))?;
    }
    Ok(())
}

/// The buffers of a training step that do not run in pieces, against the largest buffer
/// `device` allocates ([`largest_buffer_bytes`]: 2 GiB − 1 through wgpu on Vulkan, 128 MiB on
/// lavapipe, unbounded on a CPU): the LSTM's record of every step's gates (`[T, B, 4C]` in
/// `f32`, both directions' rows together where they run paired) and the softmax's weight. A
/// batch too large for the device is refused here, before anything is allocated or written,
/// rather than failing an allocation in the middle of the first step.
fn check_buffers(
    config: &TrainConfig,
    n_vocab: usize,
    device: &Device,
    kernels: KernelSettings,
) -> Result<()> {
    let limit = largest_buffer_bytes(device) as u128;
    let lstm = &config.model.lstm;
    let directions = match kernels.run_on(device) && kernels.paired_directions {
        true => 2,
        false => 1,
    };
    let steps = (config.batch_size * config.unroll_steps) as u128;
    let gates = steps * directions * 4 * lstm.dim as u128 * 4;
    let softmax = n_vocab as u128 * lstm.projection_dim as u128 * 4;
    let mib = |bytes: u128| bytes.div_ceil(1 << 20);
    let too_large = |what: &str, bytes: u128, fix: &str| {
        TrainError::InvalidConfig(format!(
            "{what} needs a buffer of {} MiB, more than the {} MiB this device allocates at \
             once: {fix}",
            mib(bytes),
            limit >> 20
        ))
    };
    if gates > limit {
        return Err(too_large(
            &format!(
                "the LSTM's record of its gates (batch_size {} × unroll_steps {} × 4 · lstm.dim \
                 {} in f32{})",
                config.batch_size,
                config.unroll_steps,
                lstm.dim,
                if directions == 2 {
                    ", both directions"
                } else {
                    ""
                }
            ),
            gates,
            "lower --batch-size or --unroll-steps",
        ));
    }
    if softmax > limit {
        return Err(too_large(
            &format!(
                "the softmax's weight ({n_vocab} words × lstm.projection_dim {} in f32)",
                lstm.projection_dim
            ),
            softmax,
            "use a smaller vocabulary",
        ));
    }
    Ok(())
}

/// Prepares the run directory: writes config, vocabulary and run info for a new run, checks them
/// for a resumed one. Returns the checkpoint to resume from.
fn prepare_run(
    run: &RunDirectory,
    config: &TrainConfig,
    vocab: &Vocabulary,
    info: &RunInfo,
    resume: bool,
) -> Result<Option<Checkpoint>> {
    if resume && run.config_file().is_file() {
        let saved = TrainConfig::from_file(run.config_file())?;
        if saved != *config {
            if !saved.differs_only_in_schedules(config) {
                return Err(run_error(
                    run,
                    "--resume with a config that differs from the run's config.json \
                     (only the learning rate, its schedule and the weight averaging may change)",
                ));
            }
            // A new rate, schedule or averaging from here on: the run's config says so.
            config.to_file(run.config_file())?;
        }
        if Vocabulary::from_file(run.vocab_file())? != *vocab {
            return Err(run_error(
                run,
                "--resume with a vocabulary that differs from the run's vocab.txt",
            ));
        }
        if RunInfo::from_file(&run.run_file())? != *info {
            return Err(run_error(
                run,
                "--resume with other data, seed, --init-from or --precision than the run's \
                 run.json",
            ));
        }
        run.remove_partial_checkpoints()?;
        return run.latest_checkpoint();
    }
    if run.latest_checkpoint()?.is_some() {
        return Err(run_error(
            run,
            "already holds checkpoints: pass --resume to continue it, or choose another --out",
        ));
    }
    std::fs::create_dir_all(&run.path).map_err(io_error(&run.path))?;
    config.to_file(run.config_file())?;
    vocab.to_file(run.vocab_file())?;
    info.to_file(&run.run_file())?;
    Ok(None)
}

/// Trains (or continues training) a biLM: [`Trainer::open`] then [`Trainer::run`].
pub fn train(
    config: &TrainConfig,
    vocab: Vocabulary,
    options: &TrainOptions,
    device: &Device,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary> {
    Trainer::open(config, vocab, options, device, observer)?.run(observer)
}
