//! ELMo inside a user's burn model (Peters et al. 2018, §3.3: `[x_k; ELMo_k]` into a task model,
//! the biLM frozen): a `#[derive(Module)]` tagger that holds `elmo_model::Elmo` and a linear
//! head, trained with burn-train's `Learner` on a tiny part-of-speech task. It checks what a
//! user relies on: the loss falls, ELMo's scalar mix learns (its weights move), and the biLM's
//! weights stay as loaded.
//!
//! `cargo run -p elmo-tagger-example` (flex, CPU); `cargo xtask ci` runs it as a test of
//! `cargo test --workspace`, so it shares the workspace's build of burn. With real weights,
//! replace the embedded demo model by `ElmoConfig::default().from_pretrained(options, weights,
//! &device)`.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn::train::logger::InMemoryMetricLogger;
use burn::train::{
    ClassificationOutput, InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep,
};
use elmo_model::options::BiLmOptions;
use elmo_model::weights::{WeightFile, load_bilm_from};
use elmo_model::{Elmo, ElmoConfig};

/// AllenNLP's small test biLM (Apache-2.0, see fixtures/README.md), the `elmo` binary's demo.
const OPTIONS: &str = include_str!("../../../fixtures/allennlp/options.json");
const WEIGHTS: &[u8] = include_bytes!("../../../fixtures/allennlp/lm_weights.hdf5");

/// The tags of the task.
const TAGS: [&str; 4] = ["DET", "NOUN", "VERB", "PUNCT"];

/// A user's model: ELMo (frozen biLM, one trainable scalar mix) and a linear tag classifier.
#[derive(Module, Debug)]
struct Tagger {
    elmo: Elmo,
    head: Linear,
}

/// Sentences and their tags, one tag id per token.
#[derive(Debug, Clone)]
struct TaggedBatch {
    sentences: Vec<Vec<String>>,
    /// `[n_tokens]`: the tags of every real token, row by row.
    tags: Tensor<1, Int>,
}

impl Tagger {
    /// Tag scores of every real token (row by row) and the loss against `batch.tags`.
    fn forward(&self, batch: &TaggedBatch) -> ClassificationOutput {
        let device = batch.tags.device();
        let out = self.elmo.forward_sentences(&batch.sentences, &device);
        let [rows, width, d] = out.representations[0].dims();
        let flat = out.representations[0].clone().reshape([rows * width, d]);
        // The real tokens' rows (ELMo pads every sentence to the longest).
        let keep: Vec<i64> = batch
            .sentences
            .iter()
            .enumerate()
            .flat_map(|(r, s)| (0..s.len()).map(move |t| (r * width + t) as i64))
            .collect();
        let n = keep.len();
        let rows = Tensor::<1, Int>::from_data(TensorData::new(keep, [n]), &device);
        let scores = self.head.forward(flat.select(0, rows));
        let loss = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(scores.clone(), batch.tags.clone());
        ClassificationOutput::new(loss, scores, batch.tags.clone())
    }
}

impl TrainStep for Tagger {
    type Input = TaggedBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: TaggedBatch) -> TrainOutput<ClassificationOutput> {
        let output = self.forward(&batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for Tagger {
    type Input = TaggedBatch;
    type Output = ClassificationOutput;

    fn step(&self, batch: TaggedBatch) -> ClassificationOutput {
        self.forward(&batch)
    }
}

/// One example: `(tokens, tag ids)`.
type Example = (Vec<String>, Vec<i64>);

struct TagBatcher;

impl Batcher<Example, TaggedBatch> for TagBatcher {
    fn batch(&self, items: Vec<Example>, device: &Device) -> TaggedBatch {
        let tags: Vec<i64> = items.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        let n = tags.len();
        TaggedBatch {
            sentences: items.into_iter().map(|(s, _)| s).collect(),
            tags: Tensor::from_data(TensorData::new(tags, [n]), device),
        }
    }
}

/// `n` sentences `DET NOUN VERB DET NOUN .` from a small lexicon, words chosen by a fixed rule.
fn examples(n: usize, offset: usize) -> Vec<Example> {
    let lexicon: [&[&str]; 4] = [
        &["the", "a", "this", "every"],
        &["dog", "bank", "river", "teacher", "apple", "city"],
        &["sees", "likes", "crossed", "paints", "finds"],
        &["."],
    ];
    let pattern = [0usize, 1, 2, 0, 1, 3];
    (0..n)
        .map(|i| {
            let words = pattern
                .iter()
                .enumerate()
                .map(|(k, &tag)| {
                    let choices = lexicon[tag];
                    choices[(7 * (i + offset) + 3 * k * k + k) % choices.len()].to_string()
                })
                .collect();
            (words, pattern.iter().map(|&t| t as i64).collect())
        })
        .collect()
}

fn loader(items: Vec<Example>, seed: Option<u64>) -> Arc<dyn DataLoader<TaggedBatch>> {
    // The loader's device is burn's `Device::default()` unless set: with several backends
    // compiled into one program (a workspace with wgpu) that need not be the model's.
    let builder = DataLoaderBuilder::new(TagBatcher)
        .batch_size(8)
        .set_device(Device::flex());
    match seed {
        Some(seed) => builder.shuffle(seed).build(InMemDataset::new(items)),
        None => builder.build(InMemDataset::new(items)),
    }
}

/// The mean validation loss of `model` over `data`.
fn mean_loss(model: &Tagger, data: &Arc<dyn DataLoader<TaggedBatch>>) -> f32 {
    let losses: Vec<f32> = data
        .iter()
        .map(|batch| {
            let batch = batch.expect("the in-memory dataset reads");
            InferenceStep::step(model, batch).loss.into_scalar::<f32>()
        })
        .collect();
    losses.iter().sum::<f32>() / losses.len() as f32
}

/// Every float value of a module, in order.
fn values<M: Module>(module: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl burn::module::ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
            let data = param.val().into_data().try_to_vec::<f32>().expect("f32");
            self.0.extend(data);
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

/// What a training run changed.
struct Outcome {
    loss_before: f32,
    loss_after: f32,
    mix_before: Vec<f32>,
    mix_after: Vec<f32>,
    bilm_before: Vec<f32>,
    bilm_after: Vec<f32>,
}

impl Outcome {
    /// The largest change of a scalar-mix parameter.
    fn mix_moved(&self) -> f32 {
        (self.mix_before.iter().zip(&self.mix_after))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max)
    }

    /// What a user relies on: the tagger learns, ELMo's mix learns, the biLM stays as loaded.
    fn check(&self) {
        assert!(
            self.loss_after < 0.5 * self.loss_before,
            "the tagger did not learn"
        );
        assert!(self.mix_moved() > 1e-3, "ELMo's scalar mix did not learn");
        assert!(
            self.bilm_before == self.bilm_after,
            "the frozen biLM changed"
        );
    }
}

/// Builds the tagger on the embedded demo biLM and trains it with burn-train's `Learner`.
fn train_tagger() -> Outcome {
    let device = Device::flex().autodiff();
    let options = BiLmOptions::from_json_str(OPTIONS, "demo options.json").expect("options");
    let mut weights = WeightFile::from_bytes(WEIGHTS.to_vec(), "demo weights").expect("weights");
    let bilm = load_bilm_from(&options, &mut weights, &device).expect("biLM");
    let elmo = ElmoConfig {
        dropout: 0.0,
        ..ElmoConfig::default()
    }
    .init_with(bilm, &device)
    .expect("ELMo's settings");
    let head = LinearConfig::new(options.d_output(), TAGS.len()).init(&device);
    let model = Tagger { elmo, head };
    let (mix_before, bilm_before) = (
        values(&model.elmo.scalar_mixes[0]),
        values(&model.elmo.bilm),
    );

    let train = loader(examples(48, 0), Some(1));
    let valid = loader(examples(16, 1000), None);
    let loss_before = mean_loss(&model.valid(), &valid);
    let learner = Learner::new(model, AdamConfig::new().init(), 0.05);
    let dir = std::env::temp_dir().join(format!(
        "elmo-tagger-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let result = SupervisedTraining::new(&dir, train, valid.clone())
        .num_epochs(6)
        .with_metric_logger(InMemoryMetricLogger::new())
        .with_application_logger(None)
        .launch(learner);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(error) = result.error {
        panic!("training failed: {error}");
    }
    let model = result.model;
    Outcome {
        loss_before,
        loss_after: mean_loss(&model, &valid),
        mix_before,
        mix_after: values(&model.elmo.scalar_mixes[0]),
        bilm_before,
        bilm_after: values(&model.elmo.bilm),
    }
}

fn main() {
    let outcome = train_tagger();
    let (before, after) = (outcome.loss_before, outcome.loss_after);
    println!("validation loss {before:.4} -> {after:.4}");
    println!(
        "scalar mix (softmax weights and gamma) {:?} -> {:?}",
        outcome.mix_before, outcome.mix_after
    );
    outcome.check();
    println!(
        "ok: the tagger learned, the scalar mix moved by {:.4}, the biLM is unchanged",
        outcome.mix_moved()
    );
}

#[cfg(test)]
mod tests {
    /// The example's run as a test: `cargo test --workspace` builds it with the workspace's one
    /// feature resolution (no second build of burn) and runs it in CI.
    #[test]
    fn the_tagger_learns_and_the_bilm_stays_frozen() {
        super::train_tagger().check();
    }
}
