//! Export of a biLM to the official bilm-tf / AllenNLP layout (`options.json` + HDF5), the exact
//! inverse of [`crate::weights`]: `char_embed` without the padding row, gate order back to
//! TensorFlow's `i, j, f, o`, and the implicit forget bias `+1` removed again.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::Tensor;

use crate::bilm::BiLm;
use crate::error::{ElmoError, Result};
use crate::options::BiLmOptions;
use crate::weights::{lstm_dataset, swap_gate_blocks};

/// One float32 array on the host: `(shape, values)`.
pub type HostArray = (Vec<usize>, Vec<f32>);

/// Named float32 datasets: `path -> (shape, values)`.
pub type Datasets = BTreeMap<String, HostArray>;

fn host<const D: usize>(t: Tensor<D>) -> Result<HostArray> {
    let shape = t.dims().to_vec();
    let values = t
        .into_data()
        .convert::<f32>()
        .try_into_vec_as::<f32>()
        .map_err(|e| ElmoError::TensorData(format!("{e:?}")))?;
    Ok((shape, values))
}

/// The datasets of `bilm` in the official layout.
pub fn bilm_datasets(bilm: &BiLm) -> Result<Datasets> {
    let mut out = Datasets::new();
    let encoder = &bilm.token_encoder;
    let (shape, values) = host(encoder.char_embedding.val())?;
    let d_char = shape[1];
    out.insert(
        "char_embed".into(),
        (vec![shape[0] - 1, d_char], values[d_char..].to_vec()),
    );
    for (i, conv) in encoder.convolutions.iter().enumerate() {
        let (shape, w) = host(conv.weight.val())?;
        out.insert(
            format!("CNN/W_cnn_{i}"),
            (vec![1, conv.width, d_char, shape[1]], w),
        );
        out.insert(format!("CNN/b_cnn_{i}"), host(conv.bias.val())?);
    }
    let linear = |l: &burn::nn::Linear| -> Result<(HostArray, HostArray)> {
        let bias =
            l.bias.as_ref().map(|b| b.val()).ok_or_else(|| {
                ElmoError::InvalidInput("a char-CNN linear layer has no bias".into())
            })?;
        Ok((host(l.weight.val())?, host(bias)?))
    };
    for (k, highway) in encoder.highways.iter().enumerate() {
        let (w, b) = linear(&highway.carry)?;
        out.insert(format!("CNN_high_{k}/W_carry"), w);
        out.insert(format!("CNN_high_{k}/b_carry"), b);
        let (w, b) = linear(&highway.transform)?;
        out.insert(format!("CNN_high_{k}/W_transform"), w);
        out.insert(format!("CNN_high_{k}/b_transform"), b);
    }
    let (w, b) = linear(&encoder.projection)?;
    out.insert("CNN_proj/W_proj".into(), w);
    out.insert("CNN_proj/b_proj".into(), b);
    for (direction, layers) in [&bilm.forward_layers, &bilm.backward_layers]
        .into_iter()
        .enumerate()
    {
        for (index, layer) in layers.iter().enumerate() {
            let d_cell = layer.d_cell();
            let (in_shape, mut w) = host(layer.input_weight.val())?;
            let (state_shape, state) = host(layer.state_weight.val())?;
            w.extend(state);
            swap_gate_blocks(&mut w, d_cell);
            out.insert(
                lstm_dataset(direction, index, "W_0"),
                (vec![in_shape[0] + state_shape[0], 4 * d_cell], w),
            );
            let (shape, mut b) = host(layer.bias.val())?;
            swap_gate_blocks(&mut b, d_cell);
            for v in &mut b[2 * d_cell..3 * d_cell] {
                *v -= 1.0;
            }
            out.insert(lstm_dataset(direction, index, "B"), (shape, b));
            out.insert(
                lstm_dataset(direction, index, "W_P_0"),
                host(layer.projection.val())?,
            );
        }
    }
    Ok(out)
}

/// What the file root and a group have in common when building a file.
trait Container {
    fn dataset(&mut self, name: &str) -> &mut hdf5_pure::DatasetBuilder;
    fn group(&mut self, name: &str) -> hdf5_pure::GroupBuilder;
    fn add(&mut self, group: hdf5_pure::FinishedGroup);
}

/// The file root and a group builder expose the same three calls under the same names.
macro_rules! impl_container {
    ($($builder:ty),*) => {$(
        impl Container for $builder {
            fn dataset(&mut self, name: &str) -> &mut hdf5_pure::DatasetBuilder {
                self.create_dataset(name)
            }
            fn group(&mut self, name: &str) -> hdf5_pure::GroupBuilder {
                self.create_group(name)
            }
            fn add(&mut self, group: hdf5_pure::FinishedGroup) {
                self.add_group(group);
            }
        }
    )*};
}

impl_container!(hdf5_pure::FileBuilder, hdf5_pure::GroupBuilder);

/// Datasets of one group, and its sub-groups.
#[derive(Default)]
struct GroupTree {
    datasets: Vec<(String, Vec<usize>, Vec<f32>)>,
    groups: BTreeMap<String, GroupTree>,
}

impl GroupTree {
    fn insert(&mut self, path: &[&str], shape: Vec<usize>, values: Vec<f32>) {
        match path {
            [name] => self.datasets.push(((*name).to_string(), shape, values)),
            [group, rest @ ..] => self
                .groups
                .entry((*group).to_string())
                .or_default()
                .insert(rest, shape, values),
            [] => {}
        }
    }

    fn fill(self, into: &mut impl Container) {
        for (name, shape, values) in self.datasets {
            let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            into.dataset(&name)
                .with_f32_data(&values)
                .with_shape(&shape);
        }
        for (name, tree) in self.groups {
            let mut sub = into.group(&name);
            tree.fill(&mut sub);
            into.add(sub.finish());
        }
    }
}

/// Writes datasets (paths with `/` create groups) to an HDF5 file, atomically (temp + rename).
pub fn write_datasets(path: impl AsRef<Path>, datasets: Datasets) -> Result<()> {
    let path = path.as_ref();
    let mut root = GroupTree::default();
    for (name, (shape, values)) in datasets {
        let parts: Vec<&str> = name.split('/').collect();
        root.insert(&parts, shape, values);
    }
    let mut builder = hdf5_pure::FileBuilder::new();
    root.fill(&mut builder);
    let temp = path.with_extension("hdf5.tmp");
    builder
        .write(&temp)
        .map_err(|source| ElmoError::Hdf5Write {
            path: temp.clone(),
            source,
        })?;
    std::fs::rename(&temp, path).map_err(|source| ElmoError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `dir/options.json` and `dir/weights.hdf5` for `bilm`.
pub fn export_bilm(bilm: &BiLm, options: &BiLmOptions, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir).map_err(|source| ElmoError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    write_datasets(dir.join("weights.hdf5"), bilm_datasets(bilm)?)?;
    options.to_file(dir.join("options.json"))
}
