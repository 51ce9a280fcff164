//! `elmo_rs.Elmo`: AllenNLP's `Elmo` module (allennlp/modules/elmo.py) as it computes in eval
//! mode, on `elmo_model::Elmo`: character ids in, its scalar mixes of the biLM layers (Peters et
//! al. 2018, eq. 1) out as NumPy arrays.

use std::path::PathBuf;

use burn::tensor::Device;
use elmo_cli::Backend;
use elmo_model::char_ids::{MAX_CHARS_PER_TOKEN, token_to_char_ids};
use elmo_model::{BiLmState, CharIdBatch, ElmoConfig, TokenEmbeddingCache};
use pyo3::exceptions::{PyUserWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyDict};

use crate::arrays;
use crate::loading::ModelChoice;
use crate::{ElmoError, to_python};

/// ELMo representations of character ids, as AllenNLP's `Elmo` module computes them in eval
/// mode: `num_output_representations` scalar mixes of the biLM's layers (`γ · Σ_j softmax(s)_j
/// · h_j`), each `(batch, tokens, dim)`, with the `<S>` and `</S>` positions removed unless
/// `keep_sentence_boundaries`.
///
/// Without PyTorch there is no training: the mixes are AllenNLP's initial ones (an equal average,
/// `γ = 1`) or the fixed `scalar_mix_parameters` (pre-softmax weights, one per layer, as
/// AllenNLP takes them), `dropout` is accepted and not applied (AllenNLP's `eval()` mode), and
/// `requires_grad=True` is refused. `vocab_to_cache` and `word_inputs` work as in AllenNLP: the
/// words of `word_inputs` (ids into `vocab_to_cache`, 0 for padding) are embedded instead of
/// `inputs`, which serve where an id is not in the vocabulary. This module caches token
/// embeddings on its own (`token_cache_mib`), vocabulary or not.
///
/// Unlike AllenNLP, every sentence starts from a zero LSTM state by default; `stateful=True`
/// carries the state from call to call per batch row, as AllenNLP's module always does.
/// `model`, `cuda_device`, `backend` and `precision` are `ElmoEmbedder`'s.
#[pyclass(module = "elmo_rs")]
pub struct Elmo {
    elmo: elmo_model::Elmo,
    device: Device,
    stateful: bool,
    /// Stateful: the carried state (`None` before the first call).
    state: Option<BiLmState>,
    cache: Option<TokenEmbeddingCache>,
    /// `vocab_to_cache`: the words that `word_inputs` ids name.
    vocab: Option<Vec<String>>,
    /// Where the model came from, for `repr`.
    description: String,
    backend: Backend,
}

#[pymethods]
impl Elmo {
    #[new]
    #[pyo3(signature = (
        options_file = None, weight_file = None, num_output_representations = 1,
        requires_grad = false, do_layer_norm = false, dropout = 0.5, vocab_to_cache = None,
        keep_sentence_boundaries = false, scalar_mix_parameters = None, module = None, *,
        model = None, cuda_device = -1, backend = None, precision = "f32", stateful = false,
        token_cache_mib = 64,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        options_file: Option<PathBuf>,
        weight_file: Option<PathBuf>,
        num_output_representations: usize,
        requires_grad: bool,
        do_layer_norm: bool,
        dropout: f64,
        vocab_to_cache: Option<Vec<String>>,
        keep_sentence_boundaries: bool,
        scalar_mix_parameters: Option<Vec<f32>>,
        module: Option<&Bound<'_, PyAny>>,
        model: Option<PathBuf>,
        cuda_device: i64,
        backend: Option<&str>,
        precision: &str,
        stateful: bool,
        token_cache_mib: usize,
    ) -> PyResult<Self> {
        if requires_grad {
            return Err(PyValueError::new_err(
                "requires_grad=True fine-tunes the biLM, which needs PyTorch's autograd; \
                 elmo_rs computes the representations only",
            ));
        }
        if module.is_some_and(|module| !module.is_none()) {
            return Err(PyValueError::new_err(
                "module: elmo_rs loads the biLM itself (options_file and weight_file, or model)",
            ));
        }
        if num_output_representations == 0 {
            return Err(PyValueError::new_err(
                "num_output_representations must be positive",
            ));
        }
        if !(0.0..=1.0).contains(&dropout) {
            return Err(PyValueError::new_err(format!(
                "dropout={dropout}: a probability, between 0 and 1"
            )));
        }
        let loaded = ModelChoice {
            options_file,
            weight_file,
            model,
            cuda_device,
            backend: backend.map(str::to_string),
            precision: precision.to_string(),
        }
        .load()?;
        let bilm = loaded.bilm();
        let cache = TokenEmbeddingCache::with_memory(
            token_cache_mib.saturating_mul(1 << 20),
            bilm.token_encoder.d_output(),
        );
        let elmo = ElmoConfig {
            n_outputs: num_output_representations,
            // AllenNLP's module in eval mode: its dropout is the identity.
            dropout: 0.0,
            do_layer_norm,
            keep_sentence_boundaries,
            scalar_mix_parameters,
            bilm_requires_grad: false,
        }
        .init_with(bilm, &loaded.device)
        .map_err(|error| match error {
            // The fixed mix weights' count and values, named as the argument.
            elmo_model::ElmoError::InvalidConfig(message) => PyValueError::new_err(message),
            other => to_python(other),
        })?;
        Ok(Self {
            elmo,
            device: loaded.device,
            stateful,
            state: None,
            cache,
            vocab: vocab_to_cache,
            description: loaded.model.description,
            backend: loaded.backend,
        })
    }

    /// AllenNLP's `Elmo.forward`: `inputs` are character ids `(batch, tokens, 50)` (or with
    /// more leading dimensions), as `batch_to_ids` gives them; the result is a dict with
    /// `"elmo_representations"`, a list of float32 arrays `(batch, tokens, dim)` (one per
    /// output representation, zero at padding), and `"mask"`, bool `(batch, tokens)`.
    #[pyo3(signature = (inputs, word_inputs = None))]
    fn forward<'py>(
        &mut self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
        word_inputs: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (ids, shape) = arrays::integers("inputs", inputs)?;
        let [.., n_tokens, n_chars] = shape[..] else {
            return Err(wrong_shape(&shape));
        };
        if shape.len() < 3 || n_chars != MAX_CHARS_PER_TOKEN {
            return Err(wrong_shape(&shape));
        }
        let leading = &shape[..shape.len() - 2];
        let n_rows = leading.iter().product::<usize>();
        let mut batch = CharIdBatch::from_ids(&ids, n_rows, n_tokens).map_err(to_python)?;
        match (word_inputs, &self.vocab) {
            (Some(words), Some(vocab)) => {
                if let Some(words) = word_batch(words, &shape, n_rows, vocab)? {
                    batch = words;
                }
            }
            (Some(_), None) => PyErr::warn(
                py,
                &py.get_type::<PyUserWarning>(),
                c"word_inputs without vocab_to_cache: the character ids are embedded",
                1,
            )?,
            (None, _) => {}
        }

        let n_out = if self.elmo.keep_sentence_boundaries {
            n_tokens + 2
        } else {
            n_tokens
        };
        let (elmo, device, cache) = (&self.elmo, &self.device, self.cache.as_mut());
        let state = self.stateful.then_some(&mut self.state);
        let computed = py.detach(|| {
            let out = elmo.forward_batch_cached(&batch, device, state, cache)?;
            let representations = (out.representations.into_iter())
                .map(|r| r.into_data().try_into_vec::<f32>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| elmo_model::ElmoError::TensorData(format!("{e:?}")))?;
            Ok::<_, elmo_model::ElmoError>((representations, out.bilm.lengths))
        });
        let (representations, lengths) = computed.map_err(to_python)?;

        let dim = self.get_output_dim();
        let inner = |length: usize| {
            if self.elmo.keep_sentence_boundaries {
                length
            } else {
                length.saturating_sub(2)
            }
        };
        let mask: Vec<bool> = (lengths.iter())
            .flat_map(|&l| (0..n_out).map(move |t| t < inner(l)))
            .collect();
        let mut mask_shape = leading.to_vec();
        mask_shape.push(n_out);
        let mut out_shape = mask_shape.clone();
        out_shape.push(dim);
        let representations = (representations.iter())
            .map(|values| arrays::array(py, values, &out_shape))
            .collect::<PyResult<Vec<_>>>()?;
        let result = PyDict::new(py);
        result.set_item("elmo_representations", representations)?;
        result.set_item("mask", arrays::array(py, &mask, &mask_shape)?)?;
        Ok(result)
    }

    /// `forward`, as calling a torch module runs it.
    #[pyo3(signature = (inputs, word_inputs = None))]
    fn __call__<'py>(
        &mut self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
        word_inputs: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.forward(py, inputs, word_inputs)
    }

    /// Width of a representation (`2P`: 1024 for the `original` model), as AllenNLP's method.
    fn get_output_dim(&self) -> usize {
        2 * (self.elmo.bilm.forward_layers.first()).map_or(0, |layer| layer.d_projection())
    }

    /// Forgets the carried LSTM state (`stateful=True`): the next call starts from zero.
    fn reset_state(&mut self) {
        self.state = None;
    }

    /// Whether the LSTM state is carried from call to call.
    #[getter]
    fn stateful(&self) -> bool {
        self.stateful
    }

    fn __repr__(&self) -> String {
        format!(
            "Elmo({}; backend {}, {} output representation{} of width {}{})",
            self.description,
            self.backend.name(),
            self.elmo.scalar_mixes.len(),
            if self.elmo.scalar_mixes.len() == 1 {
                ""
            } else {
                "s"
            },
            self.get_output_dim(),
            if self.stateful { ", stateful" } else { "" }
        )
    }
}

/// A `ValueError` for character ids of `shape`.
fn wrong_shape(shape: &[usize]) -> PyErr {
    PyValueError::new_err(format!(
        "inputs: character ids of shape (batch, tokens, {MAX_CHARS_PER_TOKEN}) as batch_to_ids \
         gives them, not {shape:?}"
    ))
}

/// The character ids of `words` (`inputs`' shape without its last dimension, `n_rows` sentences:
/// ids into `vocab`, 0 for padding), or `None` where an id is not in `vocab` (AllenNLP then embeds `inputs`).
fn word_batch(
    words: &Bound<'_, PyAny>,
    shape: &[usize],
    n_rows: usize,
    vocab: &[String],
) -> PyResult<Option<CharIdBatch>> {
    let (ids, word_shape) = arrays::integers("word_inputs", words)?;
    if word_shape != shape[..shape.len() - 1] {
        return Err(PyValueError::new_err(format!(
            "word_inputs: shape {word_shape:?}, where inputs of {shape:?} need {:?}",
            &shape[..shape.len() - 1]
        )));
    }
    let Some(words) = (ids.iter())
        .map(|&id| {
            usize::try_from(id)
                .ok()
                .and_then(|i| vocab.get(i).map(|_| i))
        })
        .collect::<Option<Vec<usize>>>()
    else {
        return Ok(None);
    };
    let mut chars = vec![0u16; words.len() * MAX_CHARS_PER_TOKEN];
    for (word, slots) in words
        .iter()
        .zip(chars.chunks_exact_mut(MAX_CHARS_PER_TOKEN))
    {
        if *word != 0 {
            slots.copy_from_slice(&token_to_char_ids(&vocab[*word]));
        }
    }
    let n_tokens = shape[shape.len() - 2];
    CharIdBatch::from_ids(&chars, n_rows, n_tokens)
        .map(Some)
        .map_err(|error| ElmoError::new_err(format!("word_inputs: {error}")))
}
