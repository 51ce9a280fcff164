//! Writer of AllenNLP's `elmo` command HDF5 layout: one float32 dataset per input line, named by its
//! 0-based index (or by its sentence, `--use-sentence-keys`), plus `sentence_to_index` (a JSON
//! object from sentence text to index string) unless the caller leaves it out; and `elmo
//! tokens`'s one `embedding` dataset, written in pieces.
//!
//! Each line's values are appended to a partial file beside the output (`.NAME.partial`) as they
//! come; whenever the values written since the last commit pass a size limit they are synced to
//! disk and their datasets appended to an index (`.NAME.partial.index`, one JSON line each:
//! name, address, shape), and `.NAME.partial.json` says which input and model the partial output
//! belongs to. At the end the HDF5 structures that name every dataset are written after the
//! values, in the format h5py writes by default ([`crate::hdf5_layout`]), and the file is renamed
//! to the output: an interrupted run leaves nothing under the output name. A run that is killed
//! leaves the partial files, and the next run with the same input and model continues from the
//! committed datasets ([`Hdf5EmbeddingWriter::open`]); a run that fails with an error removes
//! them.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::hdf5_layout::{
    self, DatasetList, SUPERBLOCK_SIZE, StoredValues, StringValue, value_bytes,
};
use crate::sentence_index::SentenceIndex;

/// Values written after which they are committed (synced, and indexed), by default.
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
    /// The partial file, standing at its end; `None` once finished.
    file: Option<BufWriter<File>>,
    /// The index of committed datasets, standing at its end.
    index: Option<File>,
    final_path: PathBuf,
    temp_path: PathBuf,
    manifest_path: PathBuf,
    index_path: PathBuf,
    /// The partial file's length: where the next values go.
    end: u64,
    /// Every dataset written, in order; the first `committed` are in the index.
    datasets: DatasetList,
    committed: usize,
    staged_bytes: usize,
    commit_bytes: usize,
    /// Reused for a line's values as little-endian bytes.
    bytes: Vec<u8>,
    /// `None`: the output has no `sentence_to_index`.
    sentence_to_index: Option<SentenceIndex>,
    /// The partial files are this run's to remove if it fails (not those of another run that
    /// it refused to continue).
    owns_files: bool,
}

/// A dataset whose values are in the partial file: a line of its index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Written<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    address: u64,
    shape: Cow<'a, [u64]>,
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

/// An error unless `path` names an HDF5 file (`.hdf5` or `.h5`: the one output format) in a
/// folder that exists: checked before a command takes the output's lock or reads its input.
pub fn check_output_path(path: &Path) -> Result<()> {
    let extension = (path.extension().and_then(|e| e.to_str())).map(str::to_ascii_lowercase);
    if !matches!(extension.as_deref(), Some("hdf5" | "h5")) {
        bail!(
            "{}: unsupported output format (use a .hdf5 or .h5 file name)",
            path.display()
        );
    }
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    if !folder.is_dir() {
        bail!(
            "{}: the output's folder {} does not exist (create it first)",
            path.display(),
            folder.display()
        );
    }
    Ok(())
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
    /// settings is an error naming it, unless `restart` discards it. Values are committed
    /// (synced to disk and indexed) whenever those written since the last commit pass
    /// `commit_bytes`: what a killed run loses at most. Without `sentence_to_index` the output
    /// has no such dataset and [`Self::note`] keeps nothing. A partial output holding a
    /// dataset whose name `is_line` refuses is an error (its files are kept).
    pub fn open(
        path: &Path,
        fingerprint: &OutputFingerprint,
        restart: bool,
        commit_bytes: usize,
        sentence_to_index: bool,
        is_line: &dyn Fn(&str) -> bool,
    ) -> Result<Opened> {
        let mut writer = Self {
            file: None,
            index: None,
            final_path: path.to_path_buf(),
            temp_path: beside(path, ".partial")?,
            manifest_path: beside(path, ".partial.json")?,
            index_path: beside(path, ".partial.index")?,
            end: SUPERBLOCK_SIZE,
            datasets: DatasetList::default(),
            committed: 0,
            staged_bytes: 0,
            commit_bytes,
            bytes: Vec::new(),
            sentence_to_index: sentence_to_index.then(SentenceIndex::default),
            owns_files: false,
        };
        let partial = writer.partial_files().iter().any(|p| p.exists());
        if partial
            && !restart
            && let Some(written) = writer.continue_partial(fingerprint, is_line)?
        {
            return Ok(Opened { writer, written });
        }
        for stale in writer.partial_files() {
            match std::fs::remove_file(stale) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("{}: removing", stale.display()));
                }
                _ => {}
            }
        }
        // The manifest first: a partial file without one is never continued.
        writer.owns_files = true;
        let manifest = serde_json::to_vec_pretty(fingerprint)?;
        elmo_model::write_atomic(&writer.manifest_path, &manifest)
            .with_context(|| format!("{}: writing", writer.manifest_path.display()))?;
        let mut file = File::create(&writer.temp_path).with_context(|| {
            format!("{}: cannot create HDF5 output", writer.temp_path.display())
        })?;
        // The superblock's place, written at the end.
        file.write_all(&[0; SUPERBLOCK_SIZE as usize])
            .with_context(|| format!("{}: writing", writer.temp_path.display()))?;
        writer.file = Some(BufWriter::with_capacity(1 << 20, file));
        writer.index = Some(
            File::create(&writer.index_path)
                .with_context(|| format!("{}: cannot create", writer.index_path.display()))?,
        );
        Ok(Opened {
            writer,
            written: Vec::new(),
        })
    }

    /// The files of a partial output: its values, its manifest, its index.
    fn partial_files(&self) -> [&PathBuf; 3] {
        [&self.temp_path, &self.manifest_path, &self.index_path]
    }

    /// Opens the partial output for `fingerprint`: the names of the datasets it holds; an error
    /// when it belongs to another input, model or settings, or when its index is damaged.
    /// `None` when there is nothing to continue (the run was killed before it wrote).
    fn continue_partial(
        &mut self,
        fingerprint: &OutputFingerprint,
        is_line: &dyn Fn(&str) -> bool,
    ) -> Result<Option<Vec<String>>> {
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
        if !self.temp_path.exists() || !self.index_path.exists() {
            return Ok(None);
        }
        let index = std::fs::read(&self.index_path)
            .with_context(|| format!("{}: reading", self.index_path.display()))?;
        let Index {
            datasets,
            end,
            bytes: indexed_bytes,
        } = read_index(&index, &self.index_path)?;
        if let Some(stray) = datasets.iter().find(|d| !is_line(d.name)) {
            bail!(
                "{}: names a dataset {:?}, which is no line of this run; pass --restart to \
                 discard the partial output",
                self.index_path.display(),
                stray.name
            );
        }
        let discard = || {
            format!(
                "pass --restart to discard the partial output {}",
                self.temp_path.display()
            )
        };
        let file = OpenOptions::new()
            .write(true)
            .open(&self.temp_path)
            .with_context(|| format!("{}: cannot open; {}", self.temp_path.display(), discard()))?;
        let length = file
            .metadata()
            .with_context(|| format!("{}: reading", self.temp_path.display()))?
            .len();
        if length < end {
            bail!(
                "{}: {length} bytes, shorter than the {end} its index {} names; {}",
                self.temp_path.display(),
                self.index_path.display(),
                discard()
            );
        }
        // Values past the last commit, and an index line cut short by the kill, are dropped.
        file.set_len(end)
            .with_context(|| format!("{}: truncating", self.temp_path.display()))?;
        let mut file = BufWriter::with_capacity(1 << 20, file);
        file.seek(SeekFrom::End(0))
            .with_context(|| format!("{}: seeking", self.temp_path.display()))?;
        let mut index = OpenOptions::new()
            .write(true)
            .open(&self.index_path)
            .with_context(|| format!("{}: cannot open", self.index_path.display()))?;
        index
            .set_len(indexed_bytes)
            .and_then(|()| index.seek(SeekFrom::End(0)).map(drop))
            .with_context(|| format!("{}: truncating", self.index_path.display()))?;
        let names = datasets.iter().map(|d| d.name.to_string()).collect();
        self.file = Some(file);
        self.index = Some(index);
        self.end = end;
        self.committed = datasets.len();
        self.datasets = datasets;
        self.owns_files = true;
        Ok(Some(names))
    }

    /// Records that line `index` holds `sentence`, whether or not its dataset is in the file
    /// already: `sentence_to_index` names every line (nothing is kept for an output without it).
    pub fn note(&mut self, index: usize, sentence: &str) {
        if let Some(sentence_to_index) = &mut self.sentence_to_index {
            sentence_to_index.note(index, sentence);
        }
    }

    /// An error when `sentence_to_index` as noted so far would take over `limit` bytes.
    pub fn check_sentence_index(&self, limit: u64) -> Result<()> {
        self.sentence_to_index
            .as_ref()
            .map_or(Ok(()), |index| index.check_fits(limit))
    }

    /// [`Self::note`] for a sentence that first appeared at `position`
    /// ([`SentenceIndex::note_at`]): how `elmo merge` keeps its parts' order of sentences.
    pub fn note_at(&mut self, position: usize, index: usize, sentence: &str) {
        if let Some(sentence_to_index) = &mut self.sentence_to_index {
            sentence_to_index.note_at(position, index, sentence);
        }
    }

    /// Adds a line's embedding as the dataset `name`: its 0-based line number, or its sentence
    /// (name the line's sentence with [`Self::note`]).
    ///
    /// # Shapes
    /// `values` holds `Π shape` values in C order.
    pub fn add(&mut self, name: &str, values: &[f32], shape: &[usize]) -> Result<()> {
        self.add_pieces(name, shape, [Ok(values)])
    }

    /// [`Self::add`] with the values in row-major pieces, written as they come (a dataset too
    /// large to hold at once: `elmo tokens`'s whole vocabulary). Pieces that hold other than
    /// `Π shape` values, or an error from a piece, leave the dataset out (and the file as it was).
    pub fn add_pieces(
        &mut self,
        name: &str,
        shape: &[usize],
        pieces: impl IntoIterator<Item = Result<impl AsRef<[f32]>>>,
    ) -> Result<()> {
        if let Some(problem) = hdf5_layout::unusable_name(name, "name") {
            bail!("{}: dataset {name:?}: {problem}", self.final_path.display());
        }
        let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        // `None`: no shape, or one whose bytes overflow.
        let expected = (!shape.is_empty())
            .then(|| value_bytes(&shape))
            .filter(|&bytes| bytes != u64::MAX);
        let mut written = 0u64;
        for piece in pieces {
            let piece = match piece {
                Ok(piece) => piece,
                Err(error) => {
                    self.rewind()?;
                    return Err(error);
                }
            };
            let values = piece.as_ref();
            written += std::mem::size_of_val(values) as u64;
            if expected.is_none_or(|expected| written > expected) {
                break;
            }
            self.bytes.clear();
            self.bytes
                .extend(values.iter().flat_map(|v| v.to_le_bytes()));
            let file = self.file.as_mut().expect("writer used after finish");
            file.write_all(&self.bytes).with_context(|| {
                format!("{}: writing dataset {name:?}", self.temp_path.display())
            })?;
        }
        if expected != Some(written) {
            // The file's end is where the next dataset starts: values written here are dropped.
            self.rewind()?;
            bail!(
                "{}: dataset {name:?}: {}{} values for the shape {shape:?}",
                self.final_path.display(),
                if expected.is_some_and(|e| written > e) {
                    "at least "
                } else {
                    ""
                },
                written / 4
            );
        }
        self.datasets.push(name, &shape, self.end);
        self.end += written;
        self.staged_bytes += written as usize + 64;
        if self.staged_bytes >= self.commit_bytes {
            self.commit()?;
        }
        Ok(())
    }

    /// Puts the partial file back at [`Self::end`](Self::end), dropping values written past it.
    fn rewind(&mut self) -> Result<()> {
        let file = self.file.as_mut().expect("writer used after finish");
        let end = self.end;
        file.flush()
            .and_then(|()| file.get_ref().set_len(end))
            .and_then(|()| file.seek(SeekFrom::Start(end)).map(|_| ()))
            .with_context(|| format!("{}: writing", self.temp_path.display()))
    }

    /// Syncs the values written to disk, then appends their datasets to the index: the index
    /// never names values that are not on disk.
    fn commit(&mut self) -> Result<()> {
        let file = self.file.as_mut().expect("writer used after finish");
        file.flush()
            .and_then(|()| file.get_ref().sync_data())
            .with_context(|| format!("{}: writing", self.temp_path.display()))?;
        let mut lines = Vec::new();
        for dataset in self.datasets.iter_from(self.committed) {
            let line = Written {
                name: Cow::Borrowed(dataset.name),
                address: dataset.address,
                shape: Cow::Borrowed(dataset.shape),
            };
            serde_json::to_writer(&mut lines, &line)?;
            lines.push(b'\n');
        }
        let index = self.index.as_mut().expect("writer used after finish");
        index
            .write_all(&lines)
            .and_then(|()| index.sync_data())
            .with_context(|| format!("{}: writing", self.index_path.display()))?;
        self.committed = self.datasets.len();
        self.staged_bytes = 0;
        Ok(())
    }

    /// Writes `sentence_to_index` (where the output has it) and the HDF5 structures naming
    /// every dataset, and moves the file to the output path.
    pub fn finish(mut self) -> Result<()> {
        let index = self.sentence_to_index.take();
        let json = index.as_ref().map(SentenceIndex::json);
        let write = |out: &mut dyn Write| json.as_ref().map_or(Ok(()), |json| json.write_to(out));
        let stored: Vec<StoredValues<'_>> = self.datasets.iter().collect();
        let string = json.as_ref().map(|json| StringValue {
            name: "sentence_to_index",
            length: json.bytes(),
            write: &write,
        });
        let mut file = self.file.take().expect("writer used after finish");
        let written = hdf5_layout::write_structures(&mut file, self.end, &stored, string)
            .with_context(|| format!("{}: writing HDF5", self.temp_path.display()))?;
        let mut file = file
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("{}: writing HDF5", self.temp_path.display()))?;
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&written.superblock))
            .and_then(|()| file.sync_all())
            .with_context(|| format!("{}: writing HDF5", self.temp_path.display()))?;
        drop(file);
        std::fs::rename(&self.temp_path, &self.final_path).with_context(|| {
            format!(
                "moving {} to {}",
                self.temp_path.display(),
                self.final_path.display()
            )
        })?;
        self.owns_files = false;
        self.index = None;
        let _ = std::fs::remove_file(&self.index_path);
        let _ = std::fs::remove_file(&self.manifest_path);
        Ok(())
    }
}

/// What an index of committed datasets holds.
struct Index {
    /// The datasets, in the order written.
    datasets: DatasetList,
    /// Where the last one's values end.
    end: u64,
    /// The bytes of the index's whole lines.
    bytes: u64,
}

/// Reads an index, checked (each dataset's values right after the last's, no name twice): a
/// last line without its newline was cut short by the kill and is dropped.
fn read_index(index: &[u8], path: &Path) -> Result<Index> {
    let whole = index.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut datasets = DatasetList::default();
    let mut names = HashSet::new();
    let mut end = SUPERBLOCK_SIZE;
    for (i, line) in index[..whole].split_inclusive(|&b| b == b'\n').enumerate() {
        let at = || {
            format!(
                "{}:{}: a damaged index of a partial output; pass --restart to discard it",
                path.display(),
                i + 1
            )
        };
        let dataset: Written = serde_json::from_slice(line).with_context(at)?;
        let problem = if let Some(problem) = hdf5_layout::unusable_name(&dataset.name, "name") {
            Some(problem)
        } else if dataset.address != end {
            Some(format!(
                "dataset {:?} at {}, expected at {end}",
                dataset.name, dataset.address
            ))
        } else if dataset.shape.is_empty() || value_bytes(&dataset.shape) == u64::MAX {
            Some(format!(
                "dataset {:?}: shape {:?}",
                dataset.name, dataset.shape
            ))
        } else if !names.insert(dataset.name.to_string()) {
            Some(format!("dataset {:?} named twice", dataset.name))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(anyhow::anyhow!(problem)).with_context(at);
        }
        end = end
            .checked_add(value_bytes(&dataset.shape))
            .with_context(at)?;
        datasets.push(&dataset.name, &dataset.shape, dataset.address);
    }
    Ok(Index {
        datasets,
        end,
        bytes: whole as u64,
    })
}

impl Drop for Hdf5EmbeddingWriter {
    fn drop(&mut self) {
        if self.owns_files {
            // Not finished, by an error: leave nothing behind. (A killed process never gets
            // here, and its partial output is continued by the next run.)
            self.file = None;
            self.index = None;
            for path in self.partial_files() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_line(name: &str) -> bool {
        name.parse::<usize>().is_ok_and(|line| line < 100)
    }

    fn fingerprint() -> OutputFingerprint {
        OutputFingerprint {
            input: "input".into(),
            model: "model".into(),
            settings: "settings".into(),
        }
    }

    /// Line `i`'s values: `(3, i % 5, 4)`, so that some lines have none.
    fn line(i: usize) -> (Vec<f32>, Vec<usize>) {
        let shape = vec![3, i % 5, 4];
        let values = (0..shape.iter().product::<usize>())
            .map(|v| (i * 1000 + v) as f32 * 0.5)
            .collect();
        (values, shape)
    }

    /// Notes the sentences of lines `range`, as `elmo embed` does for the lines a continued run
    /// skips.
    fn note_lines(writer: &mut Hdf5EmbeddingWriter, range: std::ops::Range<usize>) {
        for i in range {
            writer.note(i, &format!("sentence {}", i % 7));
        }
    }

    /// Writes lines `range` through `writer` (with their sentences noted).
    fn add_lines(writer: &mut Hdf5EmbeddingWriter, range: std::ops::Range<usize>) {
        for i in range {
            let (values, shape) = line(i);
            writer.note(i, &format!("sentence {}", i % 7));
            writer
                .add(&i.to_string(), &values, &shape)
                .expect("add a line");
        }
    }

    fn open(path: &Path, commit_bytes: usize) -> Opened {
        Hdf5EmbeddingWriter::open(path, &fingerprint(), false, commit_bytes, true, &is_line)
            .expect("open")
    }

    /// An uninterrupted run's output of `n` lines.
    fn whole(dir: &Path, n: usize) -> Vec<u8> {
        let path = dir.join("whole.hdf5");
        let mut writer = open(&path, 0).writer;
        add_lines(&mut writer, 0..n);
        writer.finish().expect("finish");
        std::fs::read(&path).expect("read")
    }

    /// The run is killed after line `killed_after`, as by SIGKILL: the values still in the
    /// write buffer are lost, the files are closed (by the system) and nothing is removed.
    /// (Leaking the writer instead kept its files open, which on Windows leaves a removed file
    /// in its folder and refuses a new one of its name until the process ends.)
    fn killed(path: &Path, killed_after: usize, commit_bytes: usize) {
        let mut writer = open(path, commit_bytes).writer;
        add_lines(&mut writer, 0..killed_after);
        if let Some(file) = writer.file.take() {
            drop(file.into_parts());
        }
        writer.index = None;
        writer.owns_files = false;
    }

    #[test]
    fn a_killed_run_continues_to_the_bytes_of_an_uninterrupted_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let expected = whole(dir.path(), 40);
        // Commits after every line, and after every few lines (values past the last commit
        // are lost and written again).
        for commit_bytes in [0, 600] {
            let path = dir.path().join(format!("out-{commit_bytes}.hdf5"));
            killed(&path, 25, commit_bytes);
            let Opened {
                mut writer,
                written,
            } = open(&path, commit_bytes);
            let kept: Vec<usize> = written.iter().map(|n| n.parse().expect("line")).collect();
            assert!(!kept.is_empty() && kept.len() <= 25, "{kept:?}");
            assert_eq!(kept, (0..kept.len()).collect::<Vec<_>>());
            note_lines(&mut writer, 0..kept.len());
            add_lines(&mut writer, kept.len()..40);
            writer.finish().expect("finish");
            assert!(
                std::fs::read(&path).expect("read") == expected,
                "{commit_bytes}"
            );
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "no partial files left: {names:?}");
    }

    #[test]
    fn an_index_line_cut_short_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let expected = whole(dir.path(), 12);
        let path = dir.path().join("out.hdf5");
        killed(&path, 8, 0);
        let index_path = beside(&path, ".partial.index").expect("index path");
        let mut index = std::fs::read(&index_path).expect("index");
        let lines = index.iter().filter(|&&b| b == b'\n').count();
        // The last line's write was cut short.
        index.truncate(index.len() - 10);
        std::fs::write(&index_path, &index).expect("write");
        let Opened {
            mut writer,
            written,
        } = open(&path, 0);
        assert_eq!(written.len(), lines - 1);
        note_lines(&mut writer, 0..written.len());
        add_lines(&mut writer, written.len()..12);
        writer.finish().expect("finish");
        assert!(std::fs::read(&path).expect("read") == expected);
    }

    #[test]
    fn a_damaged_partial_output_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.hdf5");
        let index_path = beside(&path, ".partial.index").expect("index path");
        let temp_path = beside(&path, ".partial").expect("partial path");
        /// Damages the partial output (its index, its values file).
        type Damage = fn(&Path, &Path);
        let damages: [(&str, Damage); 5] = [
            ("names a dataset \"100\", which is no line", |index, _| {
                let text = std::fs::read_to_string(index).expect("index");
                std::fs::write(
                    index,
                    text.replacen("\"name\":\"5\"", "\"name\":\"100\"", 1),
                )
                .expect("write");
            }),
            ("out.hdf5.partial.index:2: a damaged index", |index, _| {
                let text = std::fs::read_to_string(index).expect("index");
                let mut lines: Vec<String> = text.lines().map(String::from).collect();
                lines[1] = lines[1].replacen("\"address\":", "\"address\":1", 1);
                std::fs::write(index, lines.join("\n") + "\n").expect("write");
            }),
            ("out.hdf5.partial.index:3: a damaged index", |index, _| {
                let text = std::fs::read_to_string(index).expect("index");
                let lines: Vec<&str> = text.lines().collect();
                let damaged = format!("{}\n{}\n{}\n", lines[0], lines[1], lines[1]);
                std::fs::write(index, damaged).expect("write");
            }),
            ("out.hdf5.partial.index:1: a damaged index", |index, _| {
                std::fs::write(index, "{\"name\":\"0\"}\n").expect("write");
            }),
            ("shorter than the", |_, partial| {
                let file = OpenOptions::new().write(true).open(partial).expect("open");
                file.set_len(200).expect("truncate");
            }),
        ];
        for (expected, damage) in damages {
            killed(&path, 6, 0);
            damage(&index_path, &temp_path);
            let error =
                match Hdf5EmbeddingWriter::open(&path, &fingerprint(), false, 0, true, &is_line) {
                    Ok(_) => panic!("{expected}: opened"),
                    Err(error) => format!("{error:#}"),
                };
            assert!(
                error.contains(expected) && error.contains("--restart"),
                "{expected}: {error}"
            );
            // --restart discards it.
            let opened = Hdf5EmbeddingWriter::open(&path, &fingerprint(), true, 0, true, &is_line)
                .expect("restart");
            assert!(opened.written.is_empty());
            drop(opened);
        }
    }

    /// A dataset written in pieces is the dataset written at once; pieces of too few or too
    /// many values, or a piece that fails, are refused and leave nothing in the file.
    #[test]
    fn a_dataset_in_pieces_is_the_dataset_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let expected = whole(dir.path(), 3);
        let path = dir.path().join("pieces.hdf5");
        let mut writer = open(&path, 0).writer;
        add_lines(&mut writer, 0..1);
        let (values, shape) = line(1);
        let (a, b) = values.split_at(values.len() / 3);
        let short = (writer.add_pieces("1", &shape, [Ok(a)])).expect_err("short");
        let message = format!("{} values for the shape", a.len());
        assert!(format!("{short:#}").contains(&message), "{short:#}");
        let over = (writer.add_pieces("1", &shape, [Ok(a), Ok(b), Ok(b)])).expect_err("over");
        let message = format!("at least {} values for the shape", 2 * b.len() + a.len());
        assert!(format!("{over:#}").contains(&message), "{over:#}");
        let failed = [Ok(a), Err(anyhow::anyhow!("a piece failed"))];
        let failed = writer.add_pieces("1", &shape, failed).expect_err("failed");
        assert_eq!(format!("{failed:#}"), "a piece failed");
        writer.note(1, "sentence 1");
        (writer.add_pieces("1", &shape, [Ok(a), Ok(b)])).expect("pieces");
        add_lines(&mut writer, 2..3);
        writer.finish().expect("finish");
        assert!(std::fs::read(&path).expect("read") == expected);
    }

    #[test]
    fn an_unusable_name_or_a_wrong_count_of_values_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut writer = open(&dir.path().join("out.hdf5"), 0).writer;
        let error = writer.add("a/b", &[1.0], &[1]).expect_err("a slash");
        assert!(format!("{error:#}").contains("`/`"), "{error:#}");
        let error = writer.add("a", &[1.0, 2.0], &[3]).expect_err("a count");
        assert!(
            format!("{error:#}").contains("2 values for the shape [3]"),
            "{error:#}"
        );
    }
}
