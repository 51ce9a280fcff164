//! Training a task model with the biLM frozen: Adam, one pass over shuffled length-bucketed
//! batches per epoch, dev evaluation after every epoch, the best model kept (atomically), early
//! stopping after `patience` epochs without improvement, a JSONL line per epoch.

use std::io::Write;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::batch::{GoldIds, TaskBatch, length_batches};
use crate::dataset::Example;
use crate::elmo_features::BiLmFeatures;
use crate::error::{Result, TaskError, io_error};
use crate::metrics::{Scorer, Scores, is_span_tagging};
use crate::model::TaskModel;
use crate::task_dir::{BestEpoch, TaskDirectory, TaskSpec};

/// Settings of a training run.
#[derive(Debug, Clone)]
pub struct TaskTrainOptions {
    /// Most epochs.
    pub epochs: usize,
    /// Stop after this many epochs without a better dev score.
    pub patience: usize,
    /// Examples per batch.
    pub batch_size: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// `λ` of the `λ ‖s‖²` penalty on the ELMo mix weights (0: none).
    pub lambda: f64,
    /// Seed of initialisation, order and dropout.
    pub seed: u64,
    /// Remove a lock on the task directory left by a writer that is no longer running.
    pub break_stale_lock: bool,
}

impl TaskTrainOptions {
    /// Checks the settings: at least one epoch and one example a batch, a positive finite
    /// learning rate and a finite `λ ≥ 0`.
    ///
    /// # Errors
    /// [`TaskError::InvalidConfig`], naming the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |message: String| Err(TaskError::InvalidConfig(message));
        if self.epochs == 0 || self.batch_size == 0 {
            return bad("epochs and batch size must be positive".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!(
                "the learning rate is {}; it must be positive",
                self.lr
            ));
        }
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return bad(format!(
                "lambda (of the penalty λ‖s‖²) is {}; it must be 0 or more",
                self.lambda
            ));
        }
        Ok(())
    }
}

/// Progress callbacks (the CLI draws bars).
pub trait TaskObserver {
    /// An epoch of `n_batches` batches begins.
    fn epoch_started(&mut self, _epoch: usize, _n_batches: usize) {}
    /// A batch of `n_examples` was trained on.
    fn batch_done(&mut self, _loss: f64, _n_examples: usize) {}
    /// An epoch ended with these dev scores.
    fn epoch_done(&mut self, _report: &EpochReport) {}
}

/// The observer that reports nothing.
impl TaskObserver for () {}

/// One epoch's results.
#[derive(Debug, Clone, Serialize)]
pub struct EpochReport {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss.
    pub loss: f64,
    /// Dev accuracy (%).
    pub dev_accuracy: f64,
    /// Dev span F1 (%), BIO tagging.
    pub dev_span_f1: Option<f64>,
    /// Whether this epoch is the new best.
    pub best: bool,
    /// Wall time of the epoch (training and dev evaluation), seconds.
    pub seconds: f64,
}

/// The score early stopping maximises: span F1 where there is one, else accuracy.
pub fn headline(scores: &Scores) -> f64 {
    scores.span_f1.unwrap_or(scores.accuracy)
}

/// Whether span F1 is reported for these labels.
pub fn uses_span_f1(spec: &TaskSpec) -> bool {
    spec.format.kind == crate::dataset::TaskKind::Tag
        && is_span_tagging(spec.labels.names.iter().map(String::as_str))
}

/// Predicted label names for every example, in order.
///
/// # Errors
/// Where `features` cannot read back layers they keep in their temporary file.
pub fn predict(
    model: &TaskModel,
    spec: &TaskSpec,
    examples: &[Example],
    features: Option<&BiLmFeatures>,
    device: &Device,
) -> Result<Vec<Vec<String>>> {
    let mut predictions = vec![Vec::new(); examples.len()];
    for batch in length_batches(examples, 64, None) {
        let chosen: Vec<&Example> = batch.iter().map(|&i| &examples[i]).collect();
        let inputs = TaskBatch::new(&chosen, &spec.words, spec.uses_chars(), features, device)?;
        for (&i, ids) in batch.iter().zip(model.predict(&inputs)) {
            predictions[i] = ids
                .into_iter()
                .map(|id| spec.labels.name(id).to_string())
                .collect();
        }
    }
    Ok(predictions)
}

/// Scores of `model` on `examples` (labels unseen in training count as errors).
///
/// # Errors
/// As [`predict`].
pub fn evaluate(
    model: &TaskModel,
    spec: &TaskSpec,
    examples: &[Example],
    features: Option<&BiLmFeatures>,
    device: &Device,
) -> Result<Scores> {
    let span_f1 = uses_span_f1(spec);
    let mut scorer = Scorer::default();
    for (example, predicted) in examples
        .iter()
        .zip(predict(model, spec, examples, features, device)?)
    {
        // `span_f1` is only ever true for tagging, so one call serves tags and labels.
        scorer.add(example.labels(), &predicted, span_f1);
    }
    Ok(scorer.finish(span_f1))
}

/// Trains a task model in `dir` (which receives `task.json`, `model.bpk`, `best.json`,
/// `metrics.jsonl`); returns the best epoch.
#[allow(clippy::too_many_arguments)]
pub fn train_task(
    spec: &TaskSpec,
    train: &[Example],
    dev: &[Example],
    features: Option<&BiLmFeatures>,
    options: &TaskTrainOptions,
    dir: &TaskDirectory,
    device: &Device,
    observer: &mut dyn TaskObserver,
) -> Result<BestEpoch> {
    // Before the task directory is made: a refused run writes nothing.
    options.validate()?;
    spec.model.validate()?;
    let _lock = dir.lock(options.break_stale_lock)?;
    dir.create(spec)?;
    let metrics_path = dir.metrics_file();
    let mut metrics = std::fs::File::create(&metrics_path).map_err(io_error(&metrics_path))?;
    let train_device = device.clone().autodiff();
    let mut model = elmo_model::seeded_init(&train_device, options.seed, || {
        spec.model.init(&train_device)
    });
    let mut optimizer = AdamConfig::new().init();
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let mut best: Option<BestEpoch> = None;
    let mut since_best = 0;
    for epoch in 1..=options.epochs {
        let started = std::time::Instant::now();
        let batches = length_batches(train, options.batch_size, Some(&mut rng));
        observer.epoch_started(epoch, batches.len());
        let (mut loss_sum, mut n_batches) = (0.0, 0usize);
        for (index, batch) in batches.iter().enumerate() {
            let chosen: Vec<&Example> = batch.iter().map(|&i| &train[i]).collect();
            let gold = GoldIds::new(&chosen, &spec.labels).ok_or_else(|| {
                TaskError::InvalidConfig("a training label is missing from the label set".into())
            })?;
            let inputs = TaskBatch::new(
                &chosen,
                &spec.words,
                spec.uses_chars(),
                features,
                &train_device,
            )?;
            let loss = model.loss(&inputs, &gold, options.lambda);
            let value = f64::from(loss.clone().into_scalar::<f32>());
            if !value.is_finite() {
                return Err(TaskError::NonFinite {
                    epoch,
                    batch: index,
                });
            }
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optimizer.step(options.lr, model, grads);
            loss_sum += value;
            n_batches += 1;
            observer.batch_done(value, chosen.len());
        }
        let plain = model.valid();
        let scores = evaluate(&plain, spec, dev, features, device)?;
        let improved = best
            .as_ref()
            .is_none_or(|b| headline(&scores) > b.headline());
        let report = EpochReport {
            epoch,
            loss: loss_sum / n_batches.max(1) as f64,
            dev_accuracy: scores.accuracy,
            dev_span_f1: scores.span_f1,
            best: improved,
            seconds: started.elapsed().as_secs_f64(),
        };
        let line = serde_json::to_string(&report).map_err(|source| TaskError::Json {
            path: metrics_path.clone(),
            source,
        })?;
        writeln!(metrics, "{line}").map_err(io_error(&metrics_path))?;
        observer.epoch_done(&report);
        if improved {
            let record = BestEpoch {
                epoch,
                accuracy: scores.accuracy,
                span_f1: scores.span_f1,
                mix_weights: plain.mix_weights(),
            };
            dir.save_best(&plain, &record)?;
            best = Some(record);
            since_best = 0;
        } else {
            since_best += 1;
            if since_best >= options.patience {
                break;
            }
        }
    }
    best.ok_or_else(|| TaskError::InvalidConfig("no epoch was trained".into()))
}
