//! `elmo_rs.ElmoEmbedder`: AllenNLP's `ElmoEmbedder` (allennlp/commands/elmo.py) on
//! `elmo_model::Embedder`, its vectors as NumPy arrays; `embed_file` runs `elmo embed`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use clap::ValueEnum;
use elmo_cli::{Backend, HeldModel, LoadedModel, PrecisionArg};
use elmo_model::options::BiLmOptions;
use elmo_model::{Embedder, EmbedderConfig, LayerSelection, Pooling, SentenceVectors};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::arrays;
use crate::loading::ModelChoice;
use crate::padded::PaddedBatch;
use crate::sentences::{EmbedBatch, SentenceEmbeddings};
use crate::{ElmoError, to_python};

/// ELMo vectors of tokenised sentences, as AllenNLP's `ElmoEmbedder`.
///
/// `ElmoEmbedder(options_file, weight_file)` loads bilm-tf / AllenNLP weights (an `options.json`
/// and its HDF5 weights, paths or URLs, downloaded once into the cache as AllenNLP's
/// `cached_path` does: `ELMO_CACHE_DIR`, else `~/.cache/elmo-rs`); `model=DIR` a directory
/// that `elmo export` or `elmo train` wrote; `model="original"` (or `small`, `medium`,
/// `original-5.5b`) a model AllenNLP publishes; none, the small demo model built in (AllenNLP's
/// test biLM; AllenNLP downloads the `original` model instead).
///
/// Unlike AllenNLP, every sentence starts from a zero LSTM state by default, so its vectors do
/// not depend on the sentences embedded before it; `stateful=True` carries the state from batch
/// to batch as AllenNLP does (its vectors equal AllenNLP's to 1e-5 then).
///
/// `batch_size`: the sentences of one LSTM call in `embed_sentences` and `embed_file` (their
/// default), and in stateless `embed_batch` / `batch_to_embeddings` at most; stateful, those two
/// run their whole batch as one call, as AllenNLP's do (the state is kept per batch row).
///
/// `cuda_device`: -1 (the default) computes on the CPU, 0 on the GPU (through `cuda` in a build
/// with that feature, else `wgpu`; choose the GPU with `CUDA_VISIBLE_DEVICES`). `backend` names
/// one instead: `flex` (CPU, the default), `ndarray`, `wgpu`, or `vulkan` / `cuda` in builds
/// with those features. `precision="mixed"` runs a GPU's large products in 16-bit floats, and
/// on `flex` the LSTM's products and the char CNN's highways and projection in bf16 on a CPU
/// with AMX (Intel Xeon from the 4th generation) or AVX512-BF16 (AMD Zen 4 and 5).
#[pyclass(module = "elmo_rs")]
pub struct ElmoEmbedder {
    embedder: Embedder,
    device: Device,
    /// The model's architecture, for `embed_file`'s `elmo embed`.
    options: BiLmOptions,
    /// Where the model came from, for `embed_file`'s progress line and `repr`.
    description: String,
    backend: Backend,
    precision: PrecisionArg,
    /// The sentences of one call of `embed_sentences` and `embed_file` by default.
    batch_size: usize,
}

#[pymethods]
impl ElmoEmbedder {
    #[new]
    #[pyo3(signature = (
        options_file = None, weight_file = None, cuda_device = -1, *, model = None,
        backend = None, precision = "f32", batch_size = 64, stateful = false,
        token_cache_mib = 64, max_batch_positions = 8192,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        options_file: Option<PathBuf>,
        weight_file: Option<PathBuf>,
        cuda_device: i64,
        model: Option<PathBuf>,
        backend: Option<&str>,
        precision: &str,
        batch_size: usize,
        stateful: bool,
        token_cache_mib: usize,
        max_batch_positions: usize,
    ) -> PyResult<Self> {
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be positive"));
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
        let embedder = EmbedderConfig {
            layers: LayerSelection::All,
            pooling: Pooling::Tokens,
            stateful,
            // Stateful, a call's rows are state rows: a batch is not split, as in AllenNLP.
            batch_size: if stateful { usize::MAX } else { batch_size },
            max_batch_positions,
            token_cache_bytes: token_cache_mib.saturating_mul(1 << 20),
        }
        .init(loaded.bilm(), &loaded.device)
        .map_err(to_python)?;
        Ok(Self {
            embedder,
            device: loaded.device,
            options: loaded.model.options,
            description: loaded.model.description,
            backend: loaded.backend,
            precision: loaded.precision,
            batch_size,
        })
    }

    /// The vectors of one sentence (a list of tokens): a float32 array `(layers, n_tokens,
    /// dim)`, the token layer first (`(3, n, 1024)` for the `original` model).
    fn embed_sentence<'py>(
        &mut self,
        py: Python<'py>,
        sentence: Vec<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut vectors = self.embed_sentences_now(py, &[sentence])?;
        Ok(vectors.remove(0))
    }

    /// The vectors of each sentence of `batch` (a list of lists of tokens), in its order: a list
    /// of arrays as `embed_sentence` gives.
    fn embed_batch<'py>(
        &mut self,
        py: Python<'py>,
        batch: Vec<Vec<String>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.embed_sentences_now(py, &batch)
    }

    /// AllenNLP's `batch_to_embeddings`: the vectors of `batch` padded to its longest sentence,
    /// as a pair of arrays (AllenNLP's are torch tensors): the activations, float32
    /// `(len(batch), layers, max_tokens, dim)` with zeros at padded positions, and the mask,
    /// bool `(len(batch), max_tokens)`, true at real tokens.
    fn batch_to_embeddings<'py>(
        &mut self,
        py: Python<'py>,
        batch: Vec<Vec<String>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let (n_layers, dim) = (self.n_layers(), self.dim());
        let embedder = &mut self.embedder;
        let padded = py
            .detach(|| (embedder.embed(&batch)).map(|v| PaddedBatch::new(&v, n_layers, dim)))
            .map_err(to_python)?;
        let [b, _, t, _] = padded.activations_shape;
        Ok((
            arrays::array(py, &padded.activations, &padded.activations_shape)?,
            arrays::array(py, &padded.mask, &[b, t])?,
        ))
    }

    /// An iterator over the vectors of each sentence of `sentences` (any iterable of token
    /// lists), read and embedded `batch_size` sentences at a time (default: the embedder's).
    #[pyo3(signature = (sentences, batch_size = None))]
    fn embed_sentences(
        slf: Bound<'_, Self>,
        sentences: &Bound<'_, PyAny>,
        batch_size: Option<usize>,
    ) -> PyResult<SentenceEmbeddings> {
        let batch_size = batch_size.unwrap_or(slf.borrow().batch_size);
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be positive"));
        }
        let embedder = slf.unbind();
        let embed: EmbedBatch = Box::new(move |py, batch| {
            // An error, not a panic, where another thread is using the embedder.
            let arrays = embedder
                .bind(py)
                .try_borrow_mut()?
                .embed_sentences_now(py, batch)?;
            Ok(arrays.into_iter().map(Bound::unbind).collect())
        });
        SentenceEmbeddings::new(embed, sentences, batch_size)
    }

    /// Writes the vectors of every line of `input_file` (whitespace-separated tokens; a path,
    /// or an open text file as AllenNLP takes, read from where it stands) to the HDF5 file
    /// `output_file_path` exactly as `allennlp elmo` and `elmo embed` do (datasets `"0"`,
    /// `"1"`, ... and `sentence_to_index`): `output_format` `"all"`, `"top"` or `"average"`. It
    /// runs `elmo embed` in this process on the embedder's loaded model (its weights shared, not
    /// read again), backend and state mode, with what that command offers: an atomic output,
    /// checked input, progress on standard error unless `quiet`. A stateful embedder carries
    /// its state through the file, as AllenNLP's does: the file starts from the state the
    /// calls before it left, and the calls after it go on from the file's last state.
    #[pyo3(signature = (
        input_file, output_file_path, output_format = "all", batch_size = None,
        forget_sentences = false, use_sentence_keys = false, quiet = false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn embed_file(
        &mut self,
        py: Python<'_>,
        input_file: &Bound<'_, PyAny>,
        output_file_path: PathBuf,
        output_format: &str,
        batch_size: Option<usize>,
        forget_sentences: bool,
        use_sentence_keys: bool,
        quiet: bool,
    ) -> PyResult<()> {
        let input = InputFile::of(input_file)?;
        let mut arguments: Vec<OsString> = vec![
            input.path().into(),
            output_file_path.into(),
            "--layers".into(),
            output_format.into(),
            "--backend".into(),
            self.backend.name().into(),
            "--precision".into(),
            (self.precision.to_possible_value())
                .expect("every precision has a name")
                .get_name()
                .into(),
            "--batch-size".into(),
            batch_size.unwrap_or(self.batch_size).to_string().into(),
            "--token-cache-mib".into(),
            (self.embedder.config().token_cache_bytes >> 20)
                .to_string()
                .into(),
            "--max-batch-positions".into(),
            self.embedder
                .config()
                .max_batch_positions
                .to_string()
                .into(),
        ];
        let flags = [
            ("--stateful", self.embedder.config().stateful),
            ("--forget-sentences", forget_sentences),
            ("--use-sentence-keys", use_sentence_keys),
            ("--quiet", quiet),
        ];
        arguments.extend((flags.iter()).filter(|(_, on)| *on).map(|(f, _)| f.into()));
        // The module's parameters are shared between the clones, not copied.
        let model = LoadedModel {
            bilm: self.embedder.bilm().clone(),
            options: self.options.clone(),
            description: self.description.clone(),
        };
        // The file's last state once it is written, the state from before where it fails.
        let mut state = self.embedder.take_state();
        let held = HeldModel {
            model,
            state: &mut state,
        };
        let result = py.detach(|| elmo_cli::embed_command(&arguments, Some(held)));
        self.embedder.set_state(state).map_err(to_python)?;
        result.map_err(ElmoError::new_err)
    }

    /// The context-free embedding of each token alone (ELMo's token layer, one copy): a float32
    /// array `(len(tokens), dim / 2)`, as bilm-tf's `dump_token_embeddings` writes for a
    /// vocabulary.
    fn token_embeddings<'py>(
        &self,
        py: Python<'py>,
        tokens: Vec<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (values, shape) = py
            .detach(|| {
                let embeddings = self.embedder.bilm().token_embeddings(&tokens, &self.device);
                let shape = embeddings.dims().to_vec();
                let values = embeddings.into_data().try_into_vec::<f32>();
                values.map(|values| (values, shape))
            })
            .map_err(|error| {
                ElmoError::new_err(format!("reading the embeddings back: {error:?}"))
            })?;
        array(py, SentenceVectors { values, shape })
    }

    /// Forgets the carried LSTM state (`stateful=True`): the next batch starts from zero.
    fn reset_state(&mut self) {
        self.embedder.reset_state();
    }

    /// Layers per token (`L + 1`, the token layer first).
    #[getter]
    fn n_layers(&self) -> usize {
        self.embedder.n_layers()
    }

    /// Width of a vector (`2P`: 1024 for the `original` model).
    #[getter]
    fn dim(&self) -> usize {
        self.embedder.d_output()
    }

    /// Whether the LSTM state is carried from batch to batch.
    #[getter]
    fn stateful(&self) -> bool {
        self.embedder.config().stateful
    }

    fn __repr__(&self) -> String {
        format!(
            "ElmoEmbedder({}; backend {}, {} layers of width {}{})",
            self.description,
            self.backend.name(),
            self.n_layers(),
            self.dim(),
            if self.stateful() { ", stateful" } else { "" }
        )
    }
}

impl ElmoEmbedder {
    /// Embeds `sentences` with the interpreter released, as arrays in input order.
    pub(crate) fn embed_sentences_now<'py>(
        &mut self,
        py: Python<'py>,
        sentences: &[Vec<String>],
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let embedder = &mut self.embedder;
        let vectors = py.detach(|| embedder.embed(sentences)).map_err(to_python)?;
        vectors.into_iter().map(|v| array(py, v)).collect()
    }
}

/// `embed_file`'s input: a path as given, or an open text file's remaining text in a temporary
/// file (deleted when this is dropped).
enum InputFile {
    Path(PathBuf),
    Copy(tempfile::TempPath),
}

impl InputFile {
    fn of(input: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(path) = input.extract::<PathBuf>() {
            return Ok(Self::Path(path));
        }
        if !input.hasattr("read")? {
            return Err(PyTypeError::new_err(
                "input_file: a path or an open text file",
            ));
        }
        let text: String = input.call_method0("read")?.extract().map_err(|_| {
            PyTypeError::new_err("input_file: an open text file (its read() gave no str)")
        })?;
        let copy = tempfile::Builder::new()
            .prefix("elmo-rs-input-")
            .suffix(".txt")
            .tempfile()
            .and_then(|mut file| {
                std::io::Write::write_all(&mut file, text.as_bytes())?;
                Ok(file.into_temp_path())
            })
            .map_err(|error| {
                ElmoError::new_err(format!("a temporary copy of input_file: {error}"))
            })?;
        Ok(Self::Copy(copy))
    }

    fn path(&self) -> &Path {
        match self {
            Self::Path(path) => path,
            Self::Copy(copy) => copy,
        }
    }
}

/// `vectors` as a NumPy float32 array.
fn array(py: Python<'_>, vectors: SentenceVectors) -> PyResult<Bound<'_, PyAny>> {
    arrays::array(py, &vectors.values, &vectors.shape)
}
