//! The training configuration (serde JSON, saved as `config.json` in every run directory) and the
//! presets matching the published ELMo shapes.

use std::path::Path;

use elmo_model::options::{
    BiLmOptions, CharCnnOptions, CharEmbeddingOptions, CnnActivation, LstmOptions,
};
use serde::{Deserialize, Serialize};

use crate::batcher::{BatchMode, BatchShape, MAX_STEP_POSITIONS};
use crate::error::{Result, TrainError, io_error};

/// Everything that defines a training run except the data paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// The biLM architecture, in bilm-tf's `options.json` layout (what `elmo export` writes).
    pub model: BiLmOptions,
    /// Rows per batch (`B`), per tower.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: usize,
    /// Towers (bilm-tf's `n_gpus`): a step reads `towers × batch_size` rows, cut into one slice
    /// of `batch_size` rows per tower; each tower draws its own negatives and dropout masks and
    /// takes its own mean loss, and the step applies the mean of the towers' gradients
    /// (bilm-tf's `average_gradients`). Which device runs each tower is
    /// [`crate::TrainOptions::tower_devices`].
    #[serde(default = "defaults::towers")]
    pub towers: usize,
    /// Time steps per batch in the stateful mode (`T`, bilm-tf's `unroll_steps`).
    #[serde(default = "defaults::unroll_steps")]
    pub unroll_steps: usize,
    /// bilm-tf's stateful batching (sentences packed end to end, LSTM state carried from batch to
    /// batch, the backward LM on its own reversed stream). `false`: one sentence per row, every
    /// batch from a zero state.
    #[serde(default = "defaults::yes")]
    pub stateful: bool,
    /// Stateful mode over the corpus in file order, unshuffled, cut into one contiguous part per
    /// batch row (Zaremba et al. 2014; Kim et al. 2016 on PTB), so that the carried state holds
    /// the preceding sentences of the same document; for corpora whose lines are in document
    /// order. Holds the whole corpus in memory. `false`: bilm-tf's shuffled sentences.
    #[serde(default)]
    pub contiguous: bool,
    /// Stateful mode: probability that a row's carried LSTM state is zeroed before a batch. bilm-tf
    /// never resets, and a model trained so (seen with Adam) can come to depend on slowly drifting
    /// cells that only the carried state holds: from a zero state, as evaluation and `elmo embed`
    /// start, it is then useless. Occasional resets keep it usable from a zero state.
    #[serde(default = "defaults::state_reset")]
    pub state_reset: f64,
    /// In the sentence mode, longer sentences are cut into pieces of this many tokens.
    #[serde(default = "defaults::max_sentence_tokens")]
    pub max_sentence_tokens: usize,
    /// Shards (files) a stream holds at once and interleaves, sentence by sentence, at random.
    /// bilm-tf reads one shard at a time (`1`), which is right for shards cut from one corpus
    /// (the 1B Word Benchmark's); a corpus of files from different sources read one file at a
    /// time trains on one source after another, each direction on another one. Memory: the raw
    /// text of this many files.
    #[serde(default = "defaults::n_mixed_shards")]
    pub n_mixed_shards: usize,
    /// Dropout on every LSTM input and on the top output (bilm-tf: 0.1).
    #[serde(default = "defaults::dropout")]
    pub dropout: f64,
    /// Locked (variational) dropout: one mask per row and feature for all the steps of a batch
    /// instead of one per step (Gal & Ghahramani 2016; off in bilm-tf).
    #[serde(default)]
    pub locked_dropout: bool,
    /// Weight drop: DropConnect on every LSTM's recurrent weights (`h_{t−1} → gates`), one mask
    /// per layer and batch (Merity et al. 2018; 0 = off, as bilm-tf).
    #[serde(default)]
    pub weight_drop: f64,
    /// Negative samples of the sampled softmax; the full softmax is used when the vocabulary has
    /// no more than twice this many entries. Evaluation always uses the full softmax.
    #[serde(default = "defaults::negatives")]
    pub negatives: usize,
    /// The optimizer.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// Global gradient-norm clipping (none when absent).
    #[serde(default = "defaults::clip_norm")]
    pub clip_norm: Option<f64>,
    /// Learning-rate schedule.
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Weight averaging: when to start the running mean of the weights that validation,
    /// checkpoints and everything reading the run use (off when absent).
    #[serde(default)]
    pub averaging: Averaging,
    /// Split raw text with the built-in tokenizer (otherwise split on whitespace).
    #[serde(default)]
    pub tokenize: bool,
}

/// Which optimizer, with its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum OptimizerConfig {
    /// Adagrad as in bilm-tf (TensorFlow's: accumulator starts at `initial_accumulator`, no epsilon).
    Adagrad {
        /// Learning rate.
        lr: f64,
        /// Initial value of the squared-gradient accumulator.
        initial_accumulator: f64,
    },
    /// Adam.
    Adam {
        /// Learning rate.
        lr: f64,
    },
    /// Plain stochastic gradient descent, `θ ← θ − lr · g` (Zaremba et al. 2014 and Kim et al.
    /// 2016 train their PTB models so, with rate halving). Their loss sums the 35 steps of a
    /// batch and each direction is its own model; here the loss is the mean over targets of both
    /// directions, so their rate 1 is `lr` = 35 · 2 = 70 here, and their gradient-norm clip 5 is
    /// `clip_norm` ≈ 5 / (35 · √2) ≈ 0.1.
    Sgd {
        /// Learning rate.
        lr: f64,
    },
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self::Adagrad {
            lr: 0.2,
            initial_accumulator: 1.0,
        }
    }
}

impl OptimizerConfig {
    /// The base learning rate.
    pub fn lr(&self) -> f64 {
        match self {
            Self::Adagrad { lr, .. } | Self::Adam { lr } | Self::Sgd { lr } => *lr,
        }
    }

    /// The same optimizer with the learning rate `lr`.
    pub fn with_lr(&self, lr: f64) -> Self {
        match *self {
            Self::Adagrad {
                initial_accumulator,
                ..
            } => Self::Adagrad {
                lr,
                initial_accumulator,
            },
            Self::Adam { .. } => Self::Adam { lr },
            Self::Sgd { .. } => Self::Sgd { lr },
        }
    }
}

/// Learning-rate schedule, a factor on the optimizer's rate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum LrSchedule {
    /// The same rate throughout (bilm-tf).
    #[default]
    Constant,
    /// Linear warm-up over `warmup_steps`, then linear decay to zero at `total_steps`.
    Linear {
        /// Steps of warm-up from 0.
        warmup_steps: u64,
        /// Step at which the rate reaches zero.
        total_steps: u64,
    },
    /// Multiply the rate by `decay` when the validation perplexity stops improving (Kim et al.
    /// 2016 halve it): after more than `patience` validations in a row that did not beat the
    /// last one that did by at least the fraction `threshold`. Needs a validation file; the current factor
    /// lives in the checkpoint ([`crate::plateau::PlateauState`]).
    Plateau {
        /// Factor in (0, 1) applied at each decay.
        decay: f64,
        /// Relative improvement over the best perplexity that counts as progress.
        threshold: f64,
        /// Validations without progress tolerated before a decay.
        patience: u32,
    },
}

/// When a run starts averaging its weights (Polyak & Juditsky 1992; with SGD, Merity et al.
/// 2018's ASGD). From its first step on, the run keeps the mean of the weights after every step
/// (the last ones still train); validation, `elmo eval`, `export`, `embed` and `--init-from` use
/// the mean. Can be switched on or changed by `--resume`; once started it goes on unless `Off`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Averaging {
    /// The last weights are the result.
    #[default]
    Off,
    /// The weights after step `start` (1-based, as the logs count) and after every step since.
    FromStep {
        /// The first step averaged.
        start: u64,
    },
    /// Merity et al.'s non-monotone trigger (NT-ASGD, their `nonmono` 5): from the first
    /// validation whose perplexity is worse than the best of those before the last `patience`
    /// validations. Needs a validation file.
    WhenFlat {
        /// Validations looked back past.
        patience: u32,
    },
}

impl LrSchedule {
    /// The factor at (0-based) step `step` (for `Plateau`, 1: its factor depends on the
    /// validations, not the step).
    pub fn factor(&self, step: u64) -> f64 {
        match *self {
            Self::Constant | Self::Plateau { .. } => 1.0,
            Self::Linear {
                warmup_steps,
                total_steps,
            } => {
                let s = step as f64 + 1.0;
                if s <= warmup_steps as f64 {
                    s / warmup_steps as f64
                } else {
                    let span = total_steps.saturating_sub(warmup_steps).max(1) as f64;
                    (1.0 - (s - warmup_steps as f64) / span).max(0.0)
                }
            }
        }
    }
}

mod defaults {
    pub fn batch_size() -> usize {
        128
    }
    pub fn towers() -> usize {
        1
    }
    pub fn unroll_steps() -> usize {
        20
    }
    pub fn yes() -> bool {
        true
    }
    pub fn max_sentence_tokens() -> usize {
        200
    }
    pub fn n_mixed_shards() -> usize {
        16
    }
    pub fn state_reset() -> f64 {
        0.05
    }
    pub fn dropout() -> f64 {
        0.1
    }
    pub fn negatives() -> usize {
        8192
    }
    pub fn clip_norm() -> Option<f64> {
        Some(10.0)
    }
}

/// The published ELMo character CNN: 2048 filters of widths 1 to 7.
const ELMO_FILTERS: [[usize; 2]; 7] = [
    [1, 32],
    [2, 32],
    [3, 64],
    [4, 128],
    [5, 256],
    [6, 512],
    [7, 1024],
];

fn options(
    d_char: usize,
    filters: &[[usize; 2]],
    n_highway: usize,
    d_cell: usize,
    d_projection: usize,
) -> BiLmOptions {
    BiLmOptions {
        lstm: LstmOptions {
            dim: d_cell,
            projection_dim: d_projection,
            n_layers: 2,
            cell_clip: Some(3.0),
            proj_clip: Some(3.0),
            use_skip_connections: true,
        },
        char_cnn: CharCnnOptions {
            embedding: CharEmbeddingOptions { dim: d_char },
            filters: filters.to_vec(),
            n_highway,
            n_characters: elmo_model::char_ids::N_CHARACTERS,
            max_characters_per_token: elmo_model::char_ids::MAX_CHARS_PER_TOKEN,
            activation: CnnActivation::Relu,
        },
    }
}

/// Names accepted by [`TrainConfig::preset`].
pub const PRESETS: [&str; 4] = ["tiny", "small", "medium", "original"];

impl TrainConfig {
    /// A configuration with every training setting at its default.
    pub fn with_model(model: BiLmOptions) -> Self {
        Self {
            model,
            batch_size: defaults::batch_size(),
            towers: defaults::towers(),
            unroll_steps: defaults::unroll_steps(),
            stateful: true,
            contiguous: false,
            state_reset: defaults::state_reset(),
            max_sentence_tokens: defaults::max_sentence_tokens(),
            n_mixed_shards: defaults::n_mixed_shards(),
            dropout: defaults::dropout(),
            locked_dropout: false,
            weight_drop: 0.0,
            negatives: defaults::negatives(),
            optimizer: OptimizerConfig::default(),
            clip_norm: defaults::clip_norm(),
            lr_schedule: LrSchedule::Constant,
            averaging: Averaging::Off,
            tokenize: false,
        }
    }

    /// The presets: `small` (LSTM 1024 → 128), `medium` (2048 → 256) and `original`
    /// (4096 → 512, 2 highway layers) are the published ELMo shapes; `tiny` is for tests and
    /// smoke runs.
    pub fn preset(name: &str) -> Option<Self> {
        let model = match name {
            "tiny" => options(8, &[[1, 16], [2, 16], [3, 32]], 1, 64, 32),
            "small" => options(16, &ELMO_FILTERS, 1, 1024, 128),
            "medium" => options(16, &ELMO_FILTERS, 1, 2048, 256),
            "original" => options(16, &ELMO_FILTERS, 2, 4096, 512),
            _ => return None,
        };
        let mut config = Self::with_model(model);
        if name == "tiny" {
            config.batch_size = 16;
            config.unroll_steps = 10;
        }
        Some(config)
    }

    /// A preset name or the path of a JSON config.
    pub fn from_preset_or_file(spec: &str) -> Result<Self> {
        match Self::preset(spec) {
            Some(config) => Ok(config),
            None if Path::new(spec).is_file() => Self::from_file(spec),
            None => Err(TrainError::InvalidConfig(format!(
                "`{spec}` is neither a preset ({}) nor a config file",
                PRESETS.join(", ")
            ))),
        }
    }

    /// Reads and validates a JSON config.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(io_error(path))?;
        let config: Self = serde_json::from_str(&text).map_err(|source| TrainError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Writes the config as pretty JSON (atomically).
    pub fn to_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let text = serde_json::to_string_pretty(self).map_err(|source| TrainError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        elmo_model::write_atomic(path, text.as_bytes()).map_err(io_error(path))
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        let bad = |m: &str| Err(TrainError::InvalidConfig(m.to_string()));
        if self.batch_size == 0 || self.unroll_steps == 0 || self.max_sentence_tokens < 2 {
            return bad("batch_size and unroll_steps must be positive, max_sentence_tokens >= 2");
        }
        if self.towers == 0 {
            return bad("towers must be positive");
        }
        // Checked before the batcher allocates its rows: a step's positions, bounded.
        let (length, length_name) = match self.stateful {
            true => (self.unroll_steps, "unroll_steps"),
            false => (self.max_sentence_tokens, "max_sentence_tokens"),
        };
        let positions = (self.batch_size)
            .checked_mul(self.towers)
            .and_then(|rows| rows.checked_mul(length));
        if positions.is_none_or(|n| n > MAX_STEP_POSITIONS) {
            return Err(TrainError::InvalidConfig(format!(
                "a step of batch_size {} × towers {} × {length_name} {length} positions is more \
                 than {MAX_STEP_POSITIONS}: lower --batch-size, --towers or --unroll-steps",
                self.batch_size, self.towers
            )));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad("dropout must be in [0, 1)");
        }
        if !(0.0..1.0).contains(&self.weight_drop) {
            return bad("weight_drop must be in [0, 1)");
        }
        if self.contiguous && !self.stateful {
            return bad(
                "contiguous batching is stateful: it cannot be combined with sentence mode",
            );
        }
        if self.n_mixed_shards == 0 {
            return bad("n_mixed_shards must be positive");
        }
        if !(0.0..=1.0).contains(&self.state_reset) {
            return bad("state_reset must be in [0, 1]");
        }
        if self.optimizer.lr() <= 0.0 || !self.optimizer.lr().is_finite() {
            return bad("the learning rate must be positive");
        }
        if let OptimizerConfig::Adagrad {
            initial_accumulator,
            ..
        } = self.optimizer
            && initial_accumulator <= 0.0
        {
            return bad("adagrad's initial_accumulator must be positive");
        }
        if self.clip_norm.is_some_and(|c| c.is_nan() || c <= 0.0) {
            return bad("clip_norm must be positive");
        }
        if self.negatives == 0 {
            return bad("negatives must be positive");
        }
        if let LrSchedule::Plateau {
            decay, threshold, ..
        } = self.lr_schedule
            && !(decay > 0.0 && decay < 1.0 && (0.0..1.0).contains(&threshold))
        {
            return bad("the plateau schedule needs a decay in (0, 1) and a threshold in [0, 1)");
        }
        Ok(())
    }

    /// Whether `other` is this config with at most another learning rate, schedule and weight
    /// averaging (what `--resume` lets a run change).
    pub fn differs_only_in_schedules(&self, other: &Self) -> bool {
        let other = Self {
            optimizer: other.optimizer.with_lr(self.optimizer.lr()),
            lr_schedule: self.lr_schedule.clone(),
            averaging: self.averaging.clone(),
            ..other.clone()
        };
        other == *self
    }

    /// How this config batches text (training, and evaluation of its runs): `towers ×
    /// batch_size` rows.
    pub fn batch_shape(&self) -> BatchShape {
        BatchShape {
            n_rows: self.batch_size * self.towers,
            n_steps: self.unroll_steps,
            mode: match (self.stateful, self.contiguous) {
                (false, _) => BatchMode::Sentences,
                (true, false) => BatchMode::Packed,
                (true, true) => BatchMode::Contiguous,
            },
            max_sentence_tokens: self.max_sentence_tokens,
            n_mixed_shards: self.n_mixed_shards,
        }
    }

    /// Whether a vocabulary of `n_vocab` entries is trained with the sampled softmax.
    pub fn uses_sampled_softmax(&self, n_vocab: usize) -> bool {
        n_vocab > 2 * self.negatives
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        for name in PRESETS {
            let config = TrainConfig::preset(name).unwrap();
            config.validate().unwrap();
            let path = dir.path().join(format!("{name}.json"));
            config.to_file(&path).unwrap();
            assert_eq!(TrainConfig::from_file(&path).unwrap(), config);
        }
        assert_eq!(TrainConfig::preset("small").unwrap().model.lstm.dim, 1024);
        assert!(TrainConfig::from_preset_or_file("huge").is_err());
    }

    #[test]
    fn only_the_rate_schedule_and_averaging_may_change_on_resume() {
        let config = TrainConfig::preset("tiny").unwrap();
        let mut faster = config.clone();
        faster.optimizer = config.optimizer.with_lr(0.05);
        faster.lr_schedule = LrSchedule::Plateau {
            decay: 0.5,
            threshold: 0.01,
            patience: 2,
        };
        assert!(config.differs_only_in_schedules(&faster));
        assert!(config.differs_only_in_schedules(&config));
        let averaged = TrainConfig {
            averaging: Averaging::WhenFlat { patience: 5 },
            ..faster.clone()
        };
        assert!(config.differs_only_in_schedules(&averaged));
        let mut other = faster.clone();
        other.dropout = 0.3;
        assert!(!config.differs_only_in_schedules(&other));
        other = config.clone();
        other.weight_drop = 0.2;
        assert!(!config.differs_only_in_schedules(&other));
        other = config.clone();
        other.locked_dropout = true;
        assert!(!config.differs_only_in_schedules(&other));
        other = config.clone();
        other.optimizer = OptimizerConfig::Adam {
            lr: config.optimizer.lr(),
        };
        assert!(!config.differs_only_in_schedules(&other));
    }

    /// Regression: a huge `batch_size` aborted the run on an allocation of its rows (after its
    /// directory was written), and `batch_size × towers` overflowed; both are refused by
    /// `validate`.
    #[test]
    fn a_step_too_large_to_allocate_is_refused() {
        let config = TrainConfig::preset("tiny").unwrap();
        let too_large = [
            (1 << 40, 1, true),
            (1 << 40, 1 << 40, true),
            (usize::MAX, 2, true),
            (1 << 20, 1, false),
        ];
        for (batch_size, towers, stateful) in too_large {
            let config = TrainConfig {
                batch_size,
                towers,
                stateful,
                ..config.clone()
            };
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains("lower --batch-size"), "{error}");
        }
        let largest = TrainConfig {
            batch_size: MAX_STEP_POSITIONS / config.unroll_steps / 2,
            towers: 2,
            ..config.clone()
        };
        largest.validate().unwrap();
    }

    #[test]
    fn linear_schedule() {
        let s = LrSchedule::Linear {
            warmup_steps: 10,
            total_steps: 110,
        };
        assert!((s.factor(0) - 0.1).abs() < 1e-12);
        assert!((s.factor(9) - 1.0).abs() < 1e-12);
        assert!((s.factor(59) - 0.5).abs() < 1e-12);
        assert_eq!(s.factor(500), 0.0);
    }
}
