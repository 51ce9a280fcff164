//! A task model: one of the three heads over the shared sentence encoder, chosen by the task.

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::batch::{GoldIds, TaskBatch};
use crate::classifier::Classifier;
use crate::dataset::TaskKind;
use crate::encoder::SentenceEncoderConfig;
use crate::error::{Result, TaskError};
use crate::pair::PairClassifier;
use crate::tagger::Tagger;

/// The architecture of a task model (saved in the task directory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskModelConfig {
    /// Which head.
    pub kind: TaskKind,
    /// The sentence encoder (word embedding, ELMo, BiLSTM).
    pub encoder: SentenceEncoderConfig,
    /// Tags or classes.
    pub n_labels: usize,
}

impl TaskModelConfig {
    /// Checks the settings [`Self::init`] builds from: the encoder's
    /// ([`SentenceEncoderConfig::validate`]) and at least one label.
    ///
    /// # Errors
    /// [`TaskError::InvalidConfig`], naming the setting.
    pub fn validate(&self) -> Result<()> {
        self.encoder.validate()?;
        if self.n_labels == 0 {
            return Err(TaskError::InvalidConfig(
                "n_labels is 0: a task has at least one label".into(),
            ));
        }
        Ok(())
    }

    /// Creates the model with random weights.
    ///
    /// # Panics
    /// Where [`Self::validate`] fails.
    pub fn init(&self, device: &Device) -> TaskModel {
        match self.kind {
            TaskKind::Tag => TaskModel::Tagger(Tagger::init(&self.encoder, self.n_labels, device)),
            TaskKind::Classify => {
                TaskModel::Classifier(Classifier::init(&self.encoder, self.n_labels, device))
            }
            TaskKind::Pair => {
                TaskModel::Pair(PairClassifier::init(&self.encoder, self.n_labels, device))
            }
        }
    }
}

/// A tagger, a sentence classifier or a pair classifier.
// One model per run: the size difference between variants costs nothing worth a `Box`.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum TaskModel {
    /// Sequence tagging.
    Tagger(Tagger),
    /// Sentence classification.
    Classifier(Classifier),
    /// Sentence-pair classification.
    Pair(PairClassifier),
}

impl TaskModel {
    /// The training loss of a batch (mean per example) plus `λ ‖s‖²` of the ELMo mixes.
    ///
    /// # Panics
    /// When the gold ids do not fit the head, or a pair batch lacks its second sentences.
    pub fn loss(&self, batch: &TaskBatch, gold: &GoldIds, lambda: f64) -> Tensor<1> {
        let device = batch.first.words.device();
        let (loss, encoder) = match (self, gold) {
            (Self::Tagger(m), GoldIds::Tags(tags)) => (m.loss(&batch.first, tags), &m.encoder),
            (Self::Classifier(m), GoldIds::Labels(labels)) => {
                (m.loss(&batch.first, labels), &m.encoder)
            }
            (Self::Pair(m), GoldIds::Labels(labels)) => {
                let second = batch
                    .second
                    .as_ref()
                    .expect("a pair batch has second sentences");
                (m.loss(&batch.first, second, labels), &m.encoder)
            }
            _ => panic!("gold ids of another task kind"),
        };
        if lambda > 0.0 {
            loss + encoder.penalty(lambda, &device)
        } else {
            loss
        }
    }

    /// Predicted label ids: one per token (tagging) or one per example.
    pub fn predict(&self, batch: &TaskBatch) -> Vec<Vec<usize>> {
        match self {
            Self::Tagger(m) => m.predict(&batch.first),
            Self::Classifier(m) => m
                .predict(&batch.first)
                .into_iter()
                .map(|l| vec![l])
                .collect(),
            Self::Pair(m) => {
                let second = batch
                    .second
                    .as_ref()
                    .expect("a pair batch has second sentences");
                m.predict(&batch.first, second)
                    .into_iter()
                    .map(|l| vec![l])
                    .collect()
            }
        }
    }

    /// The normalised ELMo mix weights (input mix), for reports.
    pub fn mix_weights(&self) -> Option<Vec<f32>> {
        let encoder = match self {
            Self::Tagger(m) => &m.encoder,
            Self::Classifier(m) => &m.encoder,
            Self::Pair(m) => &m.encoder,
        };
        let mixer = encoder.input_mix.as_ref().or(encoder.output_mix.as_ref())?;
        mixer
            .mix
            .normalized_weights()
            .into_data()
            .try_to_vec::<f32>()
            .ok()
    }
}
