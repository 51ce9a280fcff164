//! Writer of AllenNLP's `elmo` command HDF5 layout: one float32 dataset per input line named by its
//! 0-based index, plus `sentence_to_index` (a JSON object from sentence text to index string).
//!
//! Datasets are added to the file in place (hdf5-pure's editor) and committed whenever the staged
//! data passes a size limit, so memory stays bounded whatever the input length. Everything is
//! written to a temporary file beside the output and renamed when complete: an interrupted run
//! leaves no half-written file under the output name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Staged bytes after which the pending datasets are committed to disk.
const COMMIT_BYTES: usize = 32 << 20;

/// Streaming HDF5 embedding writer.
pub struct Hdf5EmbeddingWriter {
    file: Option<hdf5_pure::File>,
    final_path: PathBuf,
    temp_path: PathBuf,
    staged_bytes: usize,
    sentence_to_index: HashMap<String, usize>,
}

impl Hdf5EmbeddingWriter {
    /// Starts a new output file (written to a temporary name until [`finish`](Self::finish)).
    pub fn create(path: &Path) -> Result<Self> {
        let file_name = path
            .file_name()
            .with_context(|| format!("{}: not a file path", path.display()))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(file_name);
        temp_name.push(format!(".{}.partial", std::process::id()));
        let temp_path = path.with_file_name(temp_name);
        let file = hdf5_pure::File::create(&temp_path)
            .with_context(|| format!("{}: cannot create HDF5 output", temp_path.display()))?;
        Ok(Self {
            file: Some(file),
            final_path: path.to_path_buf(),
            temp_path,
            staged_bytes: 0,
            sentence_to_index: HashMap::new(),
        })
    }

    fn file(&self) -> &hdf5_pure::File {
        self.file.as_ref().expect("writer used after finish")
    }

    /// Adds the embedding of line `index`.
    pub fn add(
        &mut self,
        index: usize,
        sentence: &str,
        values: &[f32],
        shape: &[usize],
    ) -> Result<()> {
        let shape_u64: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        self.file()
            .root()
            .create_dataset(&index.to_string(), |b| {
                b.with_f32_data(values).with_shape(&shape_u64);
            })
            .with_context(|| format!("{}: adding dataset {index}", self.final_path.display()))?;
        self.sentence_to_index.insert(sentence.to_string(), index);
        self.staged_bytes += std::mem::size_of_val(values) + 64;
        if self.staged_bytes >= COMMIT_BYTES {
            self.commit()?;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        self.file()
            .commit()
            .with_context(|| format!("{}: writing HDF5", self.temp_path.display()))?;
        self.staged_bytes = 0;
        Ok(())
    }

    /// Writes `sentence_to_index`, closes the file and moves it to the output path.
    pub fn finish(mut self) -> Result<()> {
        let mut entries: Vec<(&String, &usize)> = self.sentence_to_index.iter().collect();
        entries.sort_by_key(|(_, index)| **index);
        let map: serde_json::Map<String, serde_json::Value> = entries
            .into_iter()
            .map(|(text, index)| (text.clone(), serde_json::Value::String(index.to_string())))
            .collect();
        let json = serde_json::Value::Object(map).to_string();
        self.file()
            .root()
            .create_dataset("sentence_to_index", |b| {
                b.with_vlen_strings(&[json.as_str()]).with_shape(&[1]);
            })
            .with_context(|| format!("{}: adding sentence_to_index", self.final_path.display()))?;
        let file = self.file.take().expect("writer used after finish");
        file.close()
            .with_context(|| format!("{}: closing HDF5", self.temp_path.display()))?;
        std::fs::rename(&self.temp_path, &self.final_path).with_context(|| {
            format!(
                "moving {} to {}",
                self.temp_path.display(),
                self.final_path.display()
            )
        })?;
        Ok(())
    }
}

impl Drop for Hdf5EmbeddingWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Not finished: leave nothing behind.
            let _ = std::fs::remove_file(&self.temp_path);
        }
    }
}
