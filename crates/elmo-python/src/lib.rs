//! The `elmo_rs` Python module: AllenNLP's `ElmoEmbedder` (allennlp/commands/elmo.py), its
//! `Elmo` module as it computes in eval mode and `batch_to_ids` (allennlp/modules/elmo.py) on
//! elmo-rs, returning NumPy arrays, so that a script written for AllenNLP runs with
//! `from elmo_rs import ElmoEmbedder` (or `Elmo`, `batch_to_ids`) and no PyTorch.

mod arrays;
mod char_ids;
mod elmo;
mod embedder;
mod loading;
mod padded;
mod sentences;

use pyo3::prelude::*;

pub use elmo::Elmo;
pub use embedder::ElmoEmbedder;
pub use sentences::SentenceEmbeddings;

pyo3::create_exception!(
    elmo_rs,
    ElmoError,
    pyo3::exceptions::PyException,
    "A model that cannot be loaded or run, or input it refuses; the message names the file, \
     field or sentence."
);

/// The module: `ElmoEmbedder`, `Elmo`, `batch_to_ids`, `ElmoError`.
#[pymodule]
fn elmo_rs(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<ElmoEmbedder>()?;
    module.add_class::<Elmo>()?;
    module.add_class::<SentenceEmbeddings>()?;
    module.add_function(wrap_pyfunction!(char_ids::batch_to_ids, module)?)?;
    module.add("ElmoError", module.py().get_type::<ElmoError>())?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// An error of the model or of a backend as `elmo_rs.ElmoError`, its causes `: `-separated.
fn to_python(error: impl Into<anyhow::Error>) -> PyErr {
    ElmoError::new_err(elmo_cli::error_chain(&error.into()))
}
