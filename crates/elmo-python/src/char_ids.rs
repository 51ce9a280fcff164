//! `elmo_rs.batch_to_ids`: AllenNLP's `batch_to_ids` (allennlp/modules/elmo.py), the character
//! ids of tokenised sentences as a NumPy array.

use elmo_model::CharIdBatch;
use elmo_model::char_ids::MAX_CHARS_PER_TOKEN;
use pyo3::prelude::*;

use crate::arrays::array;

/// The character ids of `batch` (a list of sentences, each a list of tokens), padded to its
/// longest sentence: a `(len(batch), max_tokens, 50)` int64 array, zeros for padding, as
/// AllenNLP's `batch_to_ids` (which returns it as a torch tensor).
#[pyfunction]
pub fn batch_to_ids(py: Python<'_>, batch: Vec<Vec<String>>) -> PyResult<Bound<'_, PyAny>> {
    let ids = CharIdBatch::from_sentences(&batch);
    let shape = [ids.n_sentences, ids.n_tokens, MAX_CHARS_PER_TOKEN];
    let values: Vec<i64> = ids.ids.into_iter().map(i64::from).collect();
    array(py, &values, &shape)
}
