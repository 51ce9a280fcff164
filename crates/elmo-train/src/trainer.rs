//! The training loop (bilm-tf `train`): batches → joint loss → gradients (global-norm clipped) →
//! optimizer step, carrying the LSTM state between batches with the gradient cut at the
//! boundary; metrics, validation, atomic checkpoints and exact resume.
//!
//! Exactness of resume: data order is a function of the seed and the batcher position (saved),
//! dropout is re-seeded from (seed, step) before every step, sampled negatives are drawn from an
//! RNG seeded the same way, and the optimizer state, carried LSTM state and metrics window are
//! saved, so a resumed run computes the same losses as an uninterrupted one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use elmo_kernels::KernelSettings;
use elmo_model::RunLock;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::averaging::WeightAverage;
use crate::batcher::{Batcher, LmBatch, mix_seed};
use crate::checkpoint::{
    AVERAGE_FILE, Checkpoint, LossWindow, MODEL_FILE, OPTIMIZER_FILE, RunDirectory, TrainerState,
};
use crate::config::{Averaging, LrSchedule, TrainConfig};
use crate::error::{Result, TrainError};
use crate::evaluate::{Perplexity, evaluate, perplexity};
use crate::init_from::{InitFrom, initial_model};
use crate::language_model::{BiLanguageModel, CarriedState, LmGradients, SoftmaxMode};
use crate::metrics::{MetricsLog, MetricsRecord, read_metrics};
use crate::optimizer::{build_optimizer, clip_global_norm};
use crate::run::{RunInfo, model_for};
use crate::softmax::SampledCandidates;
use crate::step_profile::StepProfile;
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

/// What [`optimizer_step`] needs besides the model, optimizer, batch and state.
#[derive(Debug, Clone, Copy)]
pub struct StepSettings<'a> {
    /// Softmax, clipping, learning rate and schedule.
    pub config: &'a TrainConfig,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Run seed (dropout masks and negatives are drawn from (seed, step)).
    pub seed: u64,
    /// 0-based step.
    pub step: u64,
    /// Factor of the plateau schedule on the learning rate (1 for the other schedules).
    pub lr_scale: f64,
    /// The autodiff device.
    pub device: &'a Device,
    /// Adds each phase's time to it, when given (the device is then synchronised per phase).
    pub profile: Option<&'a StepProfile>,
}

/// The losses of one optimizer step (host values).
#[derive(Debug, Clone, Copy)]
pub struct StepLosses {
    /// Joint loss (NaN or infinite: the update was not applied).
    pub loss: f64,
    /// Summed forward NLL and its target count.
    pub forward_nll: f64,
    /// Forward targets.
    pub n_forward: u64,
    /// Summed backward NLL.
    pub backward_nll: f64,
    /// Backward targets.
    pub n_backward: u64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Learning rate used.
    pub lr: f64,
}

/// One optimizer step on a batch: the joint loss (dropout masks and sampled negatives drawn from
/// (seed, step)), gradients, global-norm clipping, the update, and the carried LSTM state moved
/// on (detached). When the loss is not finite the model and state are returned unchanged.
pub fn optimizer_step(
    model: BiLanguageModel,
    optimizer: &mut ModuleOptimizer,
    batch: &LmBatch,
    state: &mut Option<CarriedState>,
    settings: StepSettings,
) -> (BiLanguageModel, StepLosses) {
    let StepSettings {
        config,
        n_vocab,
        seed,
        step,
        lr_scale,
        device,
        profile,
    } = settings;
    let mark = |phase| {
        if let Some(profile) = profile {
            profile.mark(device, phase);
        }
    };
    if let Some(profile) = profile {
        profile.start(device);
    }
    let candidates = config.uses_sampled_softmax(n_vocab).then(|| {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, step, 0x5A3]));
        SampledCandidates::draw(config.negatives, n_vocab, &mut rng)
    });
    let mode = candidates
        .as_ref()
        .map_or(SoftmaxMode::Full, SoftmaxMode::Sampled);
    let start = state.clone().map(|carried| {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(&[seed, step, 0x5E7]));
        let n_rows = carried.forward.first().map_or(0, |s| s.hidden.dims()[0]);
        let reset: Vec<bool> = (0..n_rows)
            .map(|_| rng.random::<f64>() < config.state_reset)
            .collect();
        carried.reset_rows(&reset)
    });
    let LmGradients { step: out, grads } = model.loss_and_gradients(
        batch,
        start,
        mode,
        Some(mix_seed(&[seed, step, 0xD80])),
        device,
        profile,
    );
    let lr = config.optimizer.lr() * config.lr_schedule.factor(step) * lr_scale;
    let mut losses = StepLosses {
        loss: f64::from(out.loss.loss.clone().into_scalar::<f32>()),
        forward_nll: 0.0,
        n_forward: out.loss.n_forward as u64,
        backward_nll: 0.0,
        n_backward: out.loss.n_backward as u64,
        grad_norm: 0.0,
        lr,
    };
    let Some(mut grads) = grads else {
        return (model, losses);
    };
    losses.forward_nll = f64::from(out.loss.forward_nll.clone().into_scalar::<f32>());
    losses.backward_nll = f64::from(out.loss.backward_nll.clone().into_scalar::<f32>());
    mark("losses to the host");
    losses.grad_norm = match config.clip_norm {
        Some(max) => clip_global_norm(&model, &mut grads, max, model.kernels),
        None => crate::optimizer::global_norm(&model, &grads, model.kernels),
    };
    mark("gradient norm and clipping");
    *state = out.state.map(CarriedState::detach);
    let model = optimizer.step(lr, model, grads);
    mark("optimizer update");
    (model, losses)
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
                "--resume with other data, seed or --init-from than the run's run.json",
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
    std::fs::create_dir_all(&run.path).map_err(crate::error::io_error(&run.path))?;
    config.to_file(run.config_file())?;
    vocab.to_file(run.vocab_file())?;
    info.to_file(&run.run_file())?;
    Ok(None)
}

/// Trains (or continues training) a biLM. `device` is the plain device; gradients are taken on
/// its autodiff counterpart.
///
/// On resume, burn-optim reads the optimizer state onto burn's *default* device (it takes no
/// device), and the first step moves it to `device`: an application that trains on another
/// device than the default should make it the default (`BURN_DEVICE`), as the `elmo` CLI does.
pub fn train(
    config: &TrainConfig,
    vocab: Vocabulary,
    options: &TrainOptions,
    device: &Device,
    observer: &mut dyn TrainObserver,
) -> Result<TrainSummary> {
    config.validate()?;
    if vocab.is_empty() {
        return Err(TrainError::InvalidConfig(
            "the vocabulary has no token besides <S>, </S>, <UNK>".into(),
        ));
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
    let run = RunDirectory::new(&options.run_dir);
    let info = RunInfo {
        train: options.train_files.clone(),
        valid: options.valid_file.clone(),
        seed: options.seed,
        init_from: options.init_from.clone(),
    };
    let train_device = device.clone().autodiff();
    // Built before the run directory is written, so that a bad --init-from leaves nothing behind.
    // On resume the checkpoint's weights replace these below (so --init-from is not read again).
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
    // One writer per run directory, held until the run returns.
    std::fs::create_dir_all(&run.path).map_err(crate::error::io_error(&run.path))?;
    let _lock = RunLock::acquire(run.lock_file(), options.break_stale_lock)?;
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
    let lstm = &config.model.lstm;
    let mut state: Option<CarriedState> = None;
    let mut trainer = TrainerState {
        step: 0,
        tokens: 0,
        batcher: batcher.state(),
        window: LossWindow::default(),
        has_lstm_state: false,
        elapsed_seconds: 0.0,
        plateau: Default::default(),
        averaging: Default::default(),
    };
    let mut last_checkpoint = None;
    let mut average: Option<WeightAverage<BiLanguageModel>> = None;
    let mut metrics = match &resume_from {
        Some(checkpoint) => {
            model = model
                .try_load_file(checkpoint.model_file())
                .map_err(|source| TrainError::Record {
                    path: checkpoint.model_file(),
                    source,
                })?;
            // Read onto `Device::default()` (see the doc comment), moved to `device` at the next step.
            optimizer = optimizer
                .load(checkpoint.optimizer_file())
                .map_err(|source| TrainError::Record {
                    path: checkpoint.optimizer_file(),
                    source,
                })?;
            trainer = checkpoint.trainer_state()?;
            if trainer.averaging.n_averaged > 0 && config.averaging != Averaging::Off {
                let path = checkpoint.average_file();
                let mean = model_for(config, &vocab, device)
                    .try_load_file(&path)
                    .map_err(|source| TrainError::Record { path, source })?;
                average = Some(WeightAverage {
                    mean,
                    n_averaged: trainer.averaging.n_averaged,
                });
            }
            batcher.restore(trainer.batcher.clone())?;
            if trainer.has_lstm_state {
                state = Some(checkpoint.lstm_state(
                    lstm.n_layers,
                    config.batch_size,
                    lstm.dim,
                    lstm.projection_dim,
                    &train_device,
                )?);
            }
            last_checkpoint = Some(checkpoint.clone());
            MetricsLog::resume(run.metrics_file(), trainer.step)?
        }
        None => MetricsLog::create(run.metrics_file())?,
    };

    let n_parameters = model.n_parameters();
    observer.started(trainer.step, options.steps, n_parameters);
    let mut window_start = Instant::now();
    let mut window_tokens = 0u64;
    let mut valid = None;
    let run_start = Instant::now();
    let elapsed_before = trainer.elapsed_seconds;

    while trainer.step < options.steps {
        let batch = batcher.next_batch()?.ok_or_else(|| {
            TrainError::Corpus("the training stream ended (it should loop forever)".into())
        })?;
        let step = trainer.step;
        let (next_model, out) = optimizer_step(
            model,
            &mut optimizer,
            &batch,
            &mut state,
            StepSettings {
                config,
                n_vocab: vocab.len(),
                seed: options.seed,
                step,
                lr_scale: trainer.plateau.factor(&config.lr_schedule),
                device: &train_device,
                profile: None,
            },
        );
        model = next_model;
        if !out.loss.is_finite() {
            return Err(TrainError::NonFiniteLoss {
                step: step + 1,
                loss: out.loss,
                last_checkpoint: last_checkpoint
                    .as_ref()
                    .map_or("none yet".into(), |c: &Checkpoint| {
                        c.dir.display().to_string()
                    }),
            });
        }
        let n_targets = out.n_forward + out.n_backward;
        trainer.step += 1;
        trainer.tokens += n_targets;
        window_tokens += n_targets;
        trainer.window.add(&out);
        if trainer.averaging.includes(&config.averaging, trainer.step) {
            match &mut average {
                Some(average) => average.add(&model),
                None => {
                    average = Some(WeightAverage::start(&model));
                    observer.averaging_started(trainer.step);
                }
            }
            trainer.averaging.n_averaged = average.as_ref().map_or(0, |a| a.n_averaged);
        } else {
            average = None;
        }
        observer.step(&StepReport {
            step: trainer.step,
            total: options.steps,
            loss: out.loss,
            forward_perplexity: perplexity(out.forward_nll, out.n_forward),
            backward_perplexity: perplexity(out.backward_nll, out.n_backward),
            tokens: n_targets,
        });

        let last = trainer.step == options.steps;
        if trainer.step.is_multiple_of(options.log_every) || last {
            let w = std::mem::take(&mut trainer.window);
            let seconds = window_start.elapsed().as_secs_f64().max(1e-9);
            let record = MetricsRecord::Train {
                step: trainer.step,
                loss: w.loss / w.steps as f64,
                forward_perplexity: perplexity(w.forward_nll, w.forward_targets),
                backward_perplexity: perplexity(w.backward_nll, w.backward_targets),
                lr: out.lr,
                grad_norm: w.grad_norm / w.steps as f64,
                tokens: trainer.tokens,
                tokens_per_second: window_tokens as f64 / seconds,
            };
            metrics.append(&record)?;
            observer.record(&record);
            window_start = Instant::now();
            window_tokens = 0;
        }
        if trainer.step.is_multiple_of(options.checkpoint_every) || last {
            if let Some(valid_file) = &options.valid_file {
                observer.validating();
                let p = evaluate(
                    &average
                        .as_ref()
                        .map_or_else(|| model.valid(), |a| a.mean.clone()),
                    vec![valid_file.clone()],
                    config.tokenize,
                    vocab.clone(),
                    shape,
                    device,
                    |_| {},
                )?;
                let record = MetricsRecord::Valid {
                    step: trainer.step,
                    forward_perplexity: p.forward,
                    backward_perplexity: p.backward,
                    perplexity: p.average,
                    averaged_steps: average.as_ref().map(|a| a.n_averaged),
                };
                metrics.append(&record)?;
                observer.record(&record);
                if trainer.plateau.observe(&config.lr_schedule, p.average) {
                    observer.lr_decayed(config.optimizer.lr() * trainer.plateau.scale);
                }
                if average.is_none() {
                    trainer.averaging.observe_validation(
                        &config.averaging,
                        p.average,
                        trainer.step,
                    );
                }
                valid = Some(p);
            }
            trainer.batcher = batcher.state();
            trainer.has_lstm_state = state.is_some();
            trainer.elapsed_seconds = elapsed_before + run_start.elapsed().as_secs_f64();
            let checkpoint = run.save_checkpoint(
                |dir| {
                    let record_error = |file: &str| {
                        let path = dir.join(file);
                        move |source| TrainError::Record { path, source }
                    };
                    model
                        .clone()
                        .save_file(dir.join(MODEL_FILE))
                        .map_err(record_error(MODEL_FILE))?;
                    optimizer
                        .save(dir.join(OPTIMIZER_FILE))
                        .map_err(record_error(OPTIMIZER_FILE))?;
                    if let Some(average) = &average {
                        average
                            .mean
                            .clone()
                            .save_file(dir.join(AVERAGE_FILE))
                            .map_err(record_error(AVERAGE_FILE))?;
                    }
                    Ok(())
                },
                state.as_ref(),
                &trainer,
                options.keep_checkpoints,
            )?;
            observer.checkpoint(&checkpoint);
            last_checkpoint = Some(checkpoint);
            // Redrawn at every checkpoint so the curves follow a long run. A plot is a
            // convenience: one that cannot be drawn (no perplexity logged yet, a full disk) is
            // reported and never stops the run.
            let plotted = read_metrics(run.metrics_file())
                .and_then(|records| crate::plot::plot_curves(&records, &run.curves_file()));
            if let Err(error) = plotted {
                observer.warning(&format!("curves not drawn: {error}"));
            }
        }
    }
    Ok(TrainSummary {
        steps: trainer.step,
        checkpoint: last_checkpoint,
        valid,
        n_parameters,
    })
}
