//! Batches of task examples: word ids, character ids, lengths, the frozen biLM's layers and the
//! gold ids.

use burn::tensor::{Device, Int, Tensor, TensorData};
use elmo_model::CharIdBatch;
use elmo_model::bilm::char_ids_tensor;

use crate::dataset::{Example, Target};
use crate::elmo_features::BiLmFeatures;
use crate::encoder::SentenceBatch;
use crate::error::Result;
use crate::index::Index;

/// The inputs of a batch: one sentence batch, or two for pairs.
#[derive(Debug, Clone)]
pub struct TaskBatch {
    /// The (first) sentences.
    pub first: SentenceBatch,
    /// The second sentences of pairs.
    pub second: Option<SentenceBatch>,
}

fn sentence_batch(
    sentences: &[&[String]],
    words: &Index,
    with_chars: bool,
    features: Option<&BiLmFeatures>,
    device: &Device,
) -> Result<SentenceBatch> {
    let n_steps = sentences.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut ids = vec![0i64; sentences.len() * n_steps];
    for (row, sentence) in sentences.iter().enumerate() {
        for (t, token) in sentence.iter().enumerate() {
            ids[row * n_steps + t] = words.id(token).unwrap_or(crate::index::UNKNOWN_ID) as i64;
        }
    }
    Ok(SentenceBatch {
        words: Tensor::<2, Int>::from_data(
            TensorData::new(ids, [sentences.len(), n_steps]),
            device,
        ),
        chars: with_chars.then(|| char_ids_tensor(&CharIdBatch::from_sentences(sentences), device)),
        lengths: sentences.iter().map(|s| s.len()).collect(),
        elmo: features.map(|f| f.batch(sentences, device)).transpose()?,
    })
}

impl TaskBatch {
    /// The inputs of `examples`: word ids from `words`, character ids when `with_chars` (a model
    /// with a character CNN), the biLM's layers when `features` is given.
    ///
    /// # Errors
    /// Where `features` cannot read back layers they keep in their temporary file.
    pub fn new(
        examples: &[&Example],
        words: &Index,
        with_chars: bool,
        features: Option<&BiLmFeatures>,
        device: &Device,
    ) -> Result<Self> {
        let first: Vec<&[String]> = examples.iter().map(|e| e.tokens.as_slice()).collect();
        let second: Option<Vec<&[String]>> = examples
            .iter()
            .map(|e| e.second.as_deref())
            .collect::<Option<Vec<_>>>();
        Ok(Self {
            first: sentence_batch(&first, words, with_chars, features, device)?,
            second: (second.map(|s| sentence_batch(&s, words, with_chars, features, device)))
                .transpose()?,
        })
    }
}

/// Gold ids of a batch (training data: every label is in `labels`).
#[derive(Debug, Clone, PartialEq)]
pub enum GoldIds {
    /// Tag ids per sentence.
    Tags(Vec<Vec<usize>>),
    /// One label id per example.
    Labels(Vec<usize>),
}

impl GoldIds {
    /// The gold ids of `examples`; `None` when a label is not in `labels`.
    pub fn new(examples: &[&Example], labels: &Index) -> Option<Self> {
        match examples.first().map(|e| &e.target) {
            Some(Target::Tags(_)) => examples
                .iter()
                .map(|e| match &e.target {
                    Target::Tags(tags) => tags.iter().map(|t| labels.id(t)).collect(),
                    Target::Label(_) => None,
                })
                .collect::<Option<Vec<Vec<usize>>>>()
                .map(Self::Tags),
            _ => examples
                .iter()
                .map(|e| match &e.target {
                    Target::Label(label) => labels.id(label),
                    Target::Tags(_) => None,
                })
                .collect::<Option<Vec<usize>>>()
                .map(Self::Labels),
        }
    }
}

/// Examples grouped into batches of similar length (little padding), in a seeded random order.
pub fn length_batches(
    examples: &[Example],
    batch_size: usize,
    rng: Option<&mut rand_chacha::ChaCha8Rng>,
) -> Vec<Vec<usize>> {
    use rand::seq::SliceRandom;
    let mut order: Vec<usize> = (0..examples.len()).collect();
    let mut rng = rng;
    if let Some(rng) = rng.as_deref_mut() {
        order.shuffle(rng);
    }
    // Sort within windows of 50 batches: similar lengths together, still a random epoch.
    let window = batch_size.max(1) * 50;
    for chunk in order.chunks_mut(window) {
        chunk.sort_by_key(|&i| {
            let e = &examples[i];
            e.tokens.len().max(e.second.as_ref().map_or(0, Vec::len))
        });
    }
    let mut batches: Vec<Vec<usize>> = order
        .chunks(batch_size.max(1))
        .map(<[usize]>::to_vec)
        .collect();
    if let Some(rng) = rng {
        batches.shuffle(rng);
    }
    batches
}
