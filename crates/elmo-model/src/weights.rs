//! Import of bilm-tf / AllenNLP ELMo weights (`options.json` + HDF5 in the official layout; see
//! docs/weights.md), the inverse transforms of AllenNLP's `_ElmoCharacterEncoder._load_*` and
//! `ElmoLstm.load_weights`: zero padding row of `char_embed`, TF gate order `i, j, f, o` to
//! `i, f, j, o`, and TensorFlow's implicit forget bias `+1` added once here.
//!
//! Every dataset is checked for presence and shape against the options, and a dataset that no
//! part of the model uses is an error: nothing is ignored silently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Device, Tensor, TensorData};

use crate::bilm::{BiLm, BiLmConfig};
use crate::error::{ElmoError, Result};
use crate::options::BiLmOptions;

/// An opened HDF5 weight file and the names of the datasets not read yet.
pub struct WeightFile {
    file: hdf5_pure::File,
    path: PathBuf,
    unread: BTreeSet<String>,
}

/// HDF5 path of an LSTM dataset: `direction` 0 = forward, 1 = backward.
pub fn lstm_dataset(direction: usize, layer: usize, name: &str) -> String {
    format!("RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/{name}")
}

/// Groups nested deeper than this are refused: bilm-tf's deepest dataset is 5 groups down
/// (`RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0`), and a crafted file can link a group into
/// itself.
const MAX_GROUP_DEPTH: usize = 16;
/// The most datasets a weight file may name (bilm-tf's `original` has 25).
const MAX_DATASETS: usize = 10_000;

/// Why listing a weight file's datasets failed.
enum ListError {
    Hdf5(hdf5_pure::Error),
    TooDeep(String),
    TooMany,
}

fn list_datasets(
    group: &hdf5_pure::Group,
    prefix: &str,
    depth: usize,
    out: &mut BTreeSet<String>,
) -> std::result::Result<(), ListError> {
    if depth > MAX_GROUP_DEPTH {
        return Err(ListError::TooDeep(prefix.to_string()));
    }
    for name in group.datasets().map_err(ListError::Hdf5)? {
        out.insert(format!("{prefix}{name}"));
        if out.len() > MAX_DATASETS {
            return Err(ListError::TooMany);
        }
    }
    for name in group.groups().map_err(ListError::Hdf5)? {
        let sub = group.group(&name).map_err(ListError::Hdf5)?;
        list_datasets(&sub, &format!("{prefix}{name}/"), depth + 1, out)?;
    }
    Ok(())
}

impl WeightFile {
    /// Opens a weight file from disk. Datasets are read from the file as they are asked for,
    /// not from a copy of the whole file in memory.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        // hdf5-pure reports a missing or unreadable file as an I/O error of its own.
        std::fs::File::open(path).map_err(|source| ElmoError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let file = hdf5_pure::File::open_streaming(path).map_err(|source| ElmoError::Hdf5 {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_file(file, path)
    }

    /// Opens a weight file held in memory; `name` is used in error messages.
    pub fn from_bytes(bytes: Vec<u8>, name: impl AsRef<Path>) -> Result<Self> {
        let path = name.as_ref();
        let file = hdf5_pure::File::from_bytes(bytes).map_err(|source| ElmoError::Hdf5 {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_file(file, path)
    }

    /// A weight file of `file`, with its datasets listed; `path` names it in messages.
    fn from_file(file: hdf5_pure::File, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let hdf5 = |source| ElmoError::Hdf5 {
            path: path.clone(),
            source,
        };
        let mut unread = BTreeSet::new();
        match list_datasets(&file.root(), "", 0, &mut unread) {
            Ok(()) => Ok(Self { file, path, unread }),
            Err(ListError::Hdf5(source)) => Err(hdf5(source)),
            Err(ListError::TooDeep(group)) => Err(ElmoError::InvalidWeights {
                path,
                reason: format!(
                    "groups nested more than {MAX_GROUP_DEPTH} deep at `{group}` (a group linked into itself?)"
                ),
            }),
            Err(ListError::TooMany) => Err(ElmoError::InvalidWeights {
                path,
                reason: format!("more than {MAX_DATASETS} datasets"),
            }),
        }
    }

    /// The names of all datasets not read so far.
    pub fn unread(&self) -> Vec<String> {
        self.unread.iter().cloned().collect()
    }

    /// Whether the file has a dataset of that name.
    pub fn contains(&self, name: &str) -> bool {
        self.unread.contains(name) || self.file.dataset(name).is_ok()
    }

    /// Reads a float32 dataset, checking its shape.
    pub fn read(&mut self, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
        let path = self.path.clone();
        let dataset = self
            .file
            .dataset(name)
            .map_err(|_| ElmoError::MissingDataset {
                path: path.clone(),
                dataset: name.to_string(),
            })?;
        let read_error = |source| ElmoError::DatasetRead {
            path: path.clone(),
            dataset: name.to_string(),
            source,
        };
        let found: Vec<usize> = dataset
            .shape()
            .map_err(read_error)?
            .into_iter()
            .map(|d| d as usize)
            .collect();
        if found != expected {
            return Err(ElmoError::ShapeMismatch {
                path,
                dataset: name.to_string(),
                expected: expected.to_vec(),
                found,
            });
        }
        let values = dataset.read_f32().map_err(read_error)?;
        if values.len() != expected.iter().product::<usize>() {
            return Err(ElmoError::ShapeMismatch {
                path,
                dataset: name.to_string(),
                expected: expected.to_vec(),
                found: vec![values.len()],
            });
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(ElmoError::NonFinite {
                path,
                dataset: name.to_string(),
            });
        }
        self.unread.remove(name);
        Ok(values)
    }

    /// Fails when some dataset was never read.
    pub fn finish(self) -> Result<()> {
        if self.unread.is_empty() {
            Ok(())
        } else {
            Err(ElmoError::UnusedDatasets {
                path: self.path,
                datasets: self.unread.into_iter().collect(),
            })
        }
    }
}

fn tensor2(values: Vec<f32>, shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn tensor1(values: Vec<f32>, device: &Device) -> Tensor<1> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n]), device)
}

fn set_linear(linear: &mut Linear, weight: Tensor<2>, bias: Tensor<1>) {
    linear.weight = Param::from_tensor(weight);
    linear.bias = Some(Param::from_tensor(bias));
}

/// Reorders the four gate blocks of the last axis from TensorFlow's `i, j, f, o` to `i, f, j, o`.
/// The permutation swaps two blocks, so it is its own inverse (used by the exporter too).
pub fn swap_gate_blocks(values: &mut [f32], d_cell: usize) {
    for row in values.chunks_mut(4 * d_cell) {
        let (_, rest) = row.split_at_mut(d_cell);
        let (j, rest) = rest.split_at_mut(d_cell);
        let (f, _) = rest.split_at_mut(d_cell);
        j.swap_with_slice(f);
    }
}

/// Loads a biLM from `options.json` and an HDF5 weight file.
pub fn load_bilm(
    options_file: impl AsRef<Path>,
    weight_file: impl AsRef<Path>,
    device: &Device,
) -> Result<BiLm> {
    let options = BiLmOptions::from_file(options_file)?;
    load_bilm_weights(&options, weight_file, device)
}

/// [`load_bilm`] with its options read already: the biLM of `options` with the weights of
/// `weight_file`, every dataset of which it reads.
pub fn load_bilm_weights(
    options: &BiLmOptions,
    weight_file: impl AsRef<Path>,
    device: &Device,
) -> Result<BiLm> {
    let mut weights = WeightFile::open(weight_file)?;
    let bilm = load_bilm_from(options, &mut weights, device)?;
    weights.finish()?;
    Ok(bilm)
}

/// Loads the biLM datasets of `weights` (leaving any other dataset unread for the caller).
pub fn load_bilm_from(
    options: &BiLmOptions,
    weights: &mut WeightFile,
    device: &Device,
) -> Result<BiLm> {
    options.validate()?;
    let mut bilm = BiLmConfig {
        options: options.clone(),
    }
    .init(device);
    let cnn = &options.char_cnn;
    let d_char = cnn.embedding.dim;
    let n_filters = options.n_filters();
    let d_proj = options.lstm.projection_dim;
    let d_cell = options.lstm.dim;

    // Character embedding: the file has no row for the padding id 0.
    let n_stored = crate::char_ids::N_CHARACTERS - 1;
    let stored = weights.read("char_embed", &[n_stored, d_char])?;
    let mut table = vec![0.0f32; d_char];
    table.extend(stored);
    let encoder = &mut bilm.token_encoder;
    encoder.char_embedding = Param::from_tensor(tensor2(table, [n_stored + 1, d_char], device));

    for (i, (conv, &[width, n])) in encoder
        .convolutions
        .iter_mut()
        .zip(&cnn.filters)
        .enumerate()
    {
        // (1, width, d_char, n) in row-major order is already [width * d_char, n].
        let w = weights.read(&format!("CNN/W_cnn_{i}"), &[1, width, d_char, n])?;
        let b = weights.read(&format!("CNN/b_cnn_{i}"), &[n])?;
        conv.weight = Param::from_tensor(tensor2(w, [width * d_char, n], device));
        conv.bias = Param::from_tensor(tensor1(b, device));
    }
    for (k, highway) in encoder.highways.iter_mut().enumerate() {
        let group = format!("CNN_high_{k}");
        let w_carry = weights.read(&format!("{group}/W_carry"), &[n_filters, n_filters])?;
        let b_carry = weights.read(&format!("{group}/b_carry"), &[n_filters])?;
        let w_transform = weights.read(&format!("{group}/W_transform"), &[n_filters, n_filters])?;
        let b_transform = weights.read(&format!("{group}/b_transform"), &[n_filters])?;
        set_linear(
            &mut highway.carry,
            tensor2(w_carry, [n_filters, n_filters], device),
            tensor1(b_carry, device),
        );
        set_linear(
            &mut highway.transform,
            tensor2(w_transform, [n_filters, n_filters], device),
            tensor1(b_transform, device),
        );
    }
    let w_proj = weights.read("CNN_proj/W_proj", &[n_filters, d_proj])?;
    let b_proj = weights.read("CNN_proj/b_proj", &[d_proj])?;
    set_linear(
        &mut encoder.projection,
        tensor2(w_proj, [n_filters, d_proj], device),
        tensor1(b_proj, device),
    );

    for (direction, layers) in [&mut bilm.forward_layers, &mut bilm.backward_layers]
        .into_iter()
        .enumerate()
    {
        for (layer_index, layer) in layers.iter_mut().enumerate() {
            let d_input = d_proj;
            let mut w = weights.read(
                &lstm_dataset(direction, layer_index, "W_0"),
                &[d_input + d_proj, 4 * d_cell],
            )?;
            swap_gate_blocks(&mut w, d_cell);
            let state_part = w.split_off(d_input * 4 * d_cell);
            let mut b = weights.read(&lstm_dataset(direction, layer_index, "B"), &[4 * d_cell])?;
            // TensorFlow's LSTMCell adds forget_bias=1.0 at run time (gate f is block 2 in TF order).
            for v in &mut b[2 * d_cell..3 * d_cell] {
                *v += 1.0;
            }
            swap_gate_blocks(&mut b, d_cell);
            let p = weights.read(
                &lstm_dataset(direction, layer_index, "W_P_0"),
                &[d_cell, d_proj],
            )?;
            layer.input_weight = Param::from_tensor(tensor2(w, [d_input, 4 * d_cell], device));
            layer.state_weight =
                Param::from_tensor(tensor2(state_part, [d_proj, 4 * d_cell], device));
            layer.bias = Param::from_tensor(tensor1(b, device));
            layer.projection = Param::from_tensor(tensor2(p, [d_cell, d_proj], device));
        }
    }
    Ok(bilm)
}
