//! Writer of AllenNLP's `elmo` command HDF5 layout: one float32 dataset per input line, named by its
//! 0-based index (or by its sentence, `--use-sentence-keys`), plus `sentence_to_index` (a JSON
//! object from sentence text to index string) unless the caller leaves it out.
//!
//! Datasets are added to the file in place (hdf5-pure's editor) and committed whenever the staged
//! data passes a size limit, so memory stays bounded whatever the input length. Everything is
//! written to a partial file beside the output (`.NAME.partial`, with `.NAME.partial.json`
//! saying which input and model it belongs to) and renamed when complete: an interrupted run
//! leaves nothing under the output name. A run that is killed leaves the partial file, and the
//! next run with the same input and model continues from its committed datasets
//! ([`Hdf5EmbeddingWriter::open`]); a run that fails with an error removes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Staged bytes after which the pending datasets are committed to disk, by default.
pub const COMMIT_BYTES: usize = 32 << 20;

/// What a partial output belongs to: a run continues it only when every field is equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFingerprint {
    /// xxh3 of the input file's bytes, and its line count.
    pub input: String,
    /// xxh3 of the model's parameter values and architecture.
    pub model: String,
    /// Everything else that changes a dataset: layers, line range, mode, token limit.
    pub settings: String,
}

/// Streaming HDF5 embedding writer.
pub struct Hdf5EmbeddingWriter {
    file: Option<hdf5_pure::File>,
    final_path: PathBuf,
    temp_path: PathBuf,
    manifest_path: PathBuf,
    staged_bytes: usize,
    commit_bytes: usize,
    /// `None`: the output has no `sentence_to_index`.
    sentence_to_index: Option<HashMap<String, usize>>,
}

/// The hidden file beside `path` whose name ends in `suffix`.
pub fn beside(path: &Path, suffix: &str) -> Result<PathBuf> {
    let file_name = path
        .file_name()
        .with_context(|| format!("{}: not a file path", path.display()))?;
    let mut name = std::ffi::OsString::from(".");
    name.push(file_name);
    name.push(suffix);
    Ok(path.with_file_name(name))
}

/// What [`Hdf5EmbeddingWriter::open`] found.
pub struct Opened {
    /// The writer.
    pub writer: Hdf5EmbeddingWriter,
    /// The names of the datasets already in the file (committed by an earlier, interrupted run).
    pub written: Vec<String>,
}

impl Hdf5EmbeddingWriter {
    /// Starts the output at `path`, or continues the partial output an interrupted run left for
    /// the same `fingerprint` (unless `restart`). A partial output of another input, model or
    /// settings is an error naming it, unless `restart` discards it. Staged datasets are
    /// committed to disk whenever they pass `commit_bytes` (what a killed run loses at most).
    /// Without `sentence_to_index` the output has no such dataset and [`Self::note`] keeps
    /// nothing.
    pub fn open(
        path: &Path,
        fingerprint: &OutputFingerprint,
        restart: bool,
        commit_bytes: usize,
        sentence_to_index: bool,
    ) -> Result<Opened> {
        let temp_path = beside(path, ".partial")?;
        let manifest_path = beside(path, ".partial.json")?;
        let mut writer = Self {
            file: None,
            final_path: path.to_path_buf(),
            temp_path,
            manifest_path,
            staged_bytes: 0,
            commit_bytes,
            sentence_to_index: sentence_to_index.then(HashMap::new),
        };
        let partial = writer.temp_path.exists() || writer.manifest_path.exists();
        if partial
            && !restart
            && let Some(written) = writer.continue_partial(fingerprint)?
        {
            return Ok(Opened { writer, written });
        }
        for stale in [&writer.temp_path, &writer.manifest_path] {
            match std::fs::remove_file(stale) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("{}: removing", stale.display()));
                }
                _ => {}
            }
        }
        let manifest = serde_json::to_vec_pretty(fingerprint)?;
        elmo_model::write_atomic(&writer.manifest_path, &manifest)
            .with_context(|| format!("{}: writing", writer.manifest_path.display()))?;
        writer.file = Some(hdf5_pure::File::create(&writer.temp_path).with_context(|| {
            format!("{}: cannot create HDF5 output", writer.temp_path.display())
        })?);
        Ok(Opened {
            writer,
            written: Vec::new(),
        })
    }

    /// Opens the partial output for `fingerprint`: the names of the datasets it holds; an error
    /// when it belongs to another input, model or settings.
    fn continue_partial(&mut self, fingerprint: &OutputFingerprint) -> Result<Option<Vec<String>>> {
        let found: Option<OutputFingerprint> = std::fs::read(&self.manifest_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let Some(found) = found else {
            bail!(
                "{}: a partial output without a readable {} (its run was interrupted before it \
                 started writing); pass --restart to discard it",
                self.temp_path.display(),
                self.manifest_path.display()
            );
        };
        if found != *fingerprint {
            let what: Vec<&str> = [
                ("input", found.input != fingerprint.input),
                ("model", found.model != fingerprint.model),
                (
                    "settings (--layers, --lines/--shard, --stateful, --max-tokens, \
                     --use-sentence-keys)",
                    found.settings != fingerprint.settings,
                ),
            ]
            .into_iter()
            .filter_map(|(name, differs)| differs.then_some(name))
            .collect();
            bail!(
                "{}: a partial output of an interrupted run with another {}; rerun that command \
                 to finish it, or pass --restart to discard it",
                self.temp_path.display(),
                what.join(" and ")
            );
        }
        if !self.temp_path.exists() {
            return Ok(None);
        }
        let file = hdf5_pure::File::open_rw(&self.temp_path).with_context(|| {
            format!(
                "{}: cannot continue this partial output; pass --restart to discard it",
                self.temp_path.display()
            )
        })?;
        let names = file
            .root()
            .datasets()
            .with_context(|| format!("{}: listing datasets", self.temp_path.display()))?;
        self.file = Some(file);
        Ok(Some(names))
    }

    fn file(&self) -> &hdf5_pure::File {
        self.file.as_ref().expect("writer used after finish")
    }

    /// Records that line `index` holds `sentence`, whether or not its dataset is in the file
    /// already: `sentence_to_index` names every line (nothing is kept for an output without it).
    pub fn note(&mut self, index: usize, sentence: &str) {
        let Some(sentence_to_index) = &mut self.sentence_to_index else {
            return;
        };
        // AllenNLP keeps the last line of a repeated sentence; the order lines are written in
        // does not matter.
        let entry = sentence_to_index
            .entry(sentence.to_string())
            .or_insert(index);
        *entry = (*entry).max(index);
    }

    /// Adds a line's embedding as the dataset `name`: its 0-based line number, or its sentence
    /// (name the line's sentence with [`Self::note`]).
    pub fn add(&mut self, name: &str, values: &[f32], shape: &[usize]) -> Result<()> {
        let shape_u64: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        self.file()
            .root()
            .create_dataset(name, |b| {
                b.with_f32_data(values).with_shape(&shape_u64);
            })
            .with_context(|| format!("{}: adding dataset {name:?}", self.final_path.display()))?;
        self.staged_bytes += std::mem::size_of_val(values) + 64;
        if self.staged_bytes >= self.commit_bytes {
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

    /// Writes `sentence_to_index` (where the output has it), closes the file and moves it to the
    /// output path.
    pub fn finish(mut self) -> Result<()> {
        if let Some(sentence_to_index) = &self.sentence_to_index {
            let mut entries: Vec<(&String, &usize)> = sentence_to_index.iter().collect();
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
                .with_context(|| {
                    format!("{}: adding sentence_to_index", self.final_path.display())
                })?;
        }
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
        let _ = std::fs::remove_file(&self.manifest_path);
        Ok(())
    }
}

impl Drop for Hdf5EmbeddingWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Not finished, by an error: leave nothing behind. (A killed process never gets
            // here, and its partial output is continued by the next run.)
            let _ = std::fs::remove_file(&self.temp_path);
            let _ = std::fs::remove_file(&self.manifest_path);
        }
    }
}
