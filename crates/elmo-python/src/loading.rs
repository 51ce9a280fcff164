//! The model, backend and device of `ElmoEmbedder(...)` and `Elmo(...)` from their shared
//! constructor arguments (AllenNLP's `options_file`, `weight_file` and `cuda_device`, and this
//! module's `model`, `backend` and `precision`), loaded through `elmo_cli`'s model sources.

use std::path::PathBuf;

use burn::tensor::Device;
use clap::ValueEnum;
use elmo_cli::{Backend, LoadedModel, ModelArgs, PrecisionArg};
use elmo_model::{BiLm, KernelSettings};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::to_python;

/// Where a model comes from and where it computes, as a constructor names them.
pub struct ModelChoice {
    /// bilm-tf's `options.json`, with `weight_file`.
    pub options_file: Option<PathBuf>,
    /// Its HDF5 weights.
    pub weight_file: Option<PathBuf>,
    /// Or a directory of `elmo export` / `elmo train`; none of the three: the demo model.
    pub model: Option<PathBuf>,
    /// AllenNLP's device: -1 the CPU, 0 the GPU.
    pub cuda_device: i64,
    /// A backend by name instead (`flex`, `wgpu`, ...).
    pub backend: Option<String>,
    /// `f32` or `mixed`.
    pub precision: String,
}

/// A model loaded on its device.
pub struct Loaded {
    /// The biLM, its options and where it came from.
    pub model: LoadedModel,
    /// Where it computes.
    pub device: Device,
    /// The backend of `device`.
    pub backend: Backend,
    /// The precision of its large products.
    pub precision: PrecisionArg,
}

impl Loaded {
    /// The biLM with the chosen precision's kernel settings.
    pub fn bilm(&self) -> BiLm {
        self.model.bilm.clone().with_kernels(KernelSettings {
            precision: self.precision.into(),
            ..KernelSettings::default()
        })
    }
}

impl ModelChoice {
    /// Checks the choice (a `ValueError` naming the argument) and loads the model (an
    /// `ElmoError` naming the file or field).
    pub fn load(self) -> PyResult<Loaded> {
        let backend = match (self.backend.as_deref(), self.cuda_device) {
            (None, -1 | 0) => Backend::of_cuda_device(self.cuda_device),
            (None, n) if n > 0 => {
                return Err(PyValueError::new_err(format!(
                    "cuda_device={n}: this process computes on its first GPU (0); set \
                     CUDA_VISIBLE_DEVICES before Python starts to choose which one that is"
                )));
            }
            (None, n) => {
                return Err(PyValueError::new_err(format!(
                    "cuda_device={n}: -1 is the CPU, 0 the GPU"
                )));
            }
            (Some(name), -1) => parse::<Backend>("backend", name)?,
            (Some(_), _) => {
                return Err(PyValueError::new_err(
                    "give backend or cuda_device, not both",
                ));
            }
        };
        let precision = parse::<PrecisionArg>("precision", &self.precision)?;
        let source = match (self.options_file, self.weight_file, self.model) {
            (Some(options), Some(weights), None) => ModelArgs {
                options: Some(options),
                weights: Some(weights),
                model: None,
            },
            (None, None, model) => ModelArgs {
                options: None,
                weights: None,
                model,
            },
            _ => {
                return Err(PyValueError::new_err(
                    "give options_file and weight_file together, or model, or neither (the \
                     demo model)",
                ));
            }
        };
        let device = backend.device().map_err(to_python)?;
        precision
            .check_device(backend, &device)
            .map_err(to_python)?;
        let model = source.load(&device, false).map_err(to_python)?;
        Ok(Loaded {
            model,
            device,
            backend,
            precision,
        })
    }
}

/// `value` as one of `T`'s names (case-insensitive), else a `ValueError` listing them.
fn parse<T: ValueEnum>(what: &str, value: &str) -> PyResult<T> {
    T::from_str(value, true).map_err(|_| {
        let names: Vec<String> = (T::value_variants().iter())
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
            .collect();
        PyValueError::new_err(format!(
            "{what}={value:?}: expected one of {}",
            names.join(", ")
        ))
    })
}
