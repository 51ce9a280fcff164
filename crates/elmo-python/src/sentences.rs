//! `ElmoEmbedder.embed_sentences`' iterator: AllenNLP's generator of the same name
//! (allennlp/commands/elmo.py), reading its sentences a batch at a time.

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::{PyAny, PyIterator};

/// Embeds a batch of sentences, one array each in their order (the embedder's
/// `embed_sentences_now`, made where the embedder is known).
pub(crate) type EmbedBatch =
    Box<dyn Fn(Python<'_>, &[Vec<String>]) -> PyResult<Vec<Py<PyAny>>> + Send + Sync>;

/// The vectors of each sentence of an iterable, in its order (`ElmoEmbedder.embed_sentences`):
/// `batch_size` sentences are read, embedded together and handed out one by one.
#[pyclass(module = "elmo_rs")]
pub struct SentenceEmbeddings {
    embed: EmbedBatch,
    source: Py<PyIterator>,
    batch_size: usize,
    /// The embedded batch's arrays not handed out yet.
    ready: VecDeque<Py<PyAny>>,
    /// Sentences read so far, to name a bad one.
    read: usize,
}

impl SentenceEmbeddings {
    /// Iterates over `sentences`, `embed` embedding each batch.
    pub(crate) fn new(
        embed: EmbedBatch,
        sentences: &Bound<'_, PyAny>,
        batch_size: usize,
    ) -> PyResult<Self> {
        Ok(Self {
            embed,
            source: sentences.try_iter()?.unbind(),
            batch_size,
            ready: VecDeque::new(),
            read: 0,
        })
    }
}

#[pymethods]
impl SentenceEmbeddings {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.ready.is_empty() {
            let mut batch: Vec<Vec<String>> = Vec::with_capacity(self.batch_size);
            let source = self.source.bind(py);
            while batch.len() < self.batch_size {
                let Some(item) = source.clone().next() else {
                    break;
                };
                let sentence = item?.extract::<Vec<String>>().map_err(|error| {
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "sentence {} (0-based) is not a list of str tokens: {error}",
                        self.read
                    ))
                })?;
                self.read += 1;
                batch.push(sentence);
            }
            if batch.is_empty() {
                return Ok(None);
            }
            self.ready.extend((self.embed)(py, &batch)?);
        }
        Ok(self.ready.pop_front())
    }
}
