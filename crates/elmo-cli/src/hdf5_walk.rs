//! Reader of the root group of a file in the layout of [`crate::hdf5_layout`] (libhdf5's
//! default, h5py's, AllenNLP's `elmo` outputs): every float32 dataset's name, shape and where its
//! values lie, walked down the group's version 1 B-tree (HDF5 File Format Specification 3.0:
//! II.A superblock version 0, III.A.1 B-tree, III.C symbol table nodes, III.D local heap, IV.A.1.a
//! version 1 object headers, IV.A.2 messages).
//!
//! `elmo merge` reads its parts with it: hdf5-pure keeps every dataset's parsed header while it
//! walks a group, ~0.5 KiB a dataset, where this keeps the name, the shape and 24 bytes, and
//! finds where the bytes of `sentence_to_index` lie in its global heap collection (III.E) for
//! them to be parsed from the file rather than read into memory whole. It reads
//! only what that layout holds: a file with anything else (other versions, continued or
//! filtered headers, chunked or compact values, other types) is `None`, for the caller to read
//! with hdf5-pure, which reads every layout. Every size and address is checked against the file
//! before it is used.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, Result};

use crate::hdf5_layout::{
    DATASPACE, DATATYPE, DatasetList, FILL_VALUE, GLOBAL_HEAP_HEADER, GLOBAL_HEAP_SIGNATURE,
    GLOBAL_OBJECT_HEADER, LAYOUT, MAX_RANK, SIGNATURE, SYMBOL_ENTRY_SIZE, SYMBOL_TABLE, UNDEFINED,
    value_bytes,
};

/// The most levels of B-tree walked (libhdf5 writes 2 levels for a million names).
const MAX_LEVELS: u8 = 32;
/// The largest object header read (h5py's dataset headers are a few hundred bytes).
const MAX_HEADER: u64 = 1 << 16;
/// The largest local heap of names read (a hundred million short names).
const MAX_NAMES: u64 = 4 << 30;
/// Message types of a dataset's object header that [`crate::hdf5_layout`] does not write but
/// other writers may, none of which changes where or what the values are (IV.A.2).
const NIL: u16 = 0x0000;
const FILL_VALUE_OLD: u16 = 0x0004;
const ATTRIBUTE: u16 = 0x000C;
const MODIFICATION_TIME_OLD: u16 = 0x000E;
const MODIFICATION_TIME: u16 = 0x0012;

/// The float32 datasets of a file's root group, in the B-tree's order (by name), and the
/// file to read their values from.
pub struct RootDatasets {
    file: File,
    /// The datasets; an empty one's address is [`UNDEFINED`].
    pub datasets: DatasetList,
    /// Where the bytes of the string skipped lie; `None` where the file has no such string (a
    /// file that holds it otherwise than as one element in a global heap collection is not
    /// read by the walk).
    pub string: Option<StringAt>,
}

/// Where the bytes of a variable-length string lie in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringAt {
    /// Its first byte.
    pub address: u64,
    /// Its length in bytes.
    pub length: u64,
}

impl RootDatasets {
    /// A reader of the skipped string's bytes ([`Self::string`]).
    pub fn string_reader(&mut self) -> Result<Option<impl Read + '_>> {
        let Some(string) = self.string else {
            return Ok(None);
        };
        self.file
            .seek(SeekFrom::Start(string.address))
            .context("seeking to the string")?;
        Ok(Some((&mut self.file).take(string.length)))
    }

    /// The little-endian values of the `i`-th dataset.
    pub fn values(&mut self, i: usize) -> Result<Vec<f32>> {
        let dataset = self.datasets.get(i);
        let count: u64 = dataset.shape.iter().product();
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut bytes = vec![0u8; (count * 4) as usize];
        self.file
            .seek(SeekFrom::Start(dataset.address))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .with_context(|| format!("dataset {:?}: reading its values", dataset.name))?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

/// Reads the root group of the file at `path`: its float32 datasets, leaving out `skip` where
/// that is a variable-length string, whose place is found instead ([`RootDatasets::string`]).
/// `None` when the file holds anything this reader does not read (read it with hdf5-pure); an
/// error only when the file cannot be read.
pub fn read_root(path: &Path, skip: &str) -> Result<Option<RootDatasets>> {
    let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let length = file
        .metadata()
        .with_context(|| format!("{}: reading", path.display()))?
        .len();
    let mut walk = Walk {
        file,
        length,
        datasets: DatasetList::default(),
        string: None,
        nodes_left: length / 24,
    };
    let found = walk
        .root(skip)
        .with_context(|| format!("{}: reading", path.display()))?;
    Ok(found.map(|()| RootDatasets {
        file: walk.file,
        datasets: walk.datasets,
        string: walk.string,
    }))
}

/// A walk of one file.
struct Walk {
    file: File,
    length: u64,
    datasets: DatasetList,
    /// Where the string skipped lies.
    string: Option<StringAt>,
    /// B-tree and symbol table nodes that may still be read: no file holds more, so a cycle of
    /// nodes ends.
    nodes_left: u64,
}

/// `Ok(None)` from a walk: the file is not in the layout read here.
type Found<T> = Result<Option<T>>;

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl Walk {
    /// `n` bytes at `at`, or `None` where they are not all in the file.
    fn read(&mut self, at: u64, n: u64) -> Found<Vec<u8>> {
        if at.checked_add(n).is_none_or(|end| end > self.length) {
            return Ok(None);
        }
        let mut bytes = vec![0u8; n as usize];
        self.file.seek(SeekFrom::Start(at))?;
        self.file.read_exact(&mut bytes)?;
        Ok(Some(bytes))
    }

    fn root(&mut self, skip: &str) -> Found<()> {
        // Superblock version 0, offsets and lengths of 8 bytes, base address 0; the root
        // group's entry caches its B-tree's and local heap's addresses (cache type 1).
        let Some(superblock) = self.read(0, 96)? else {
            return Ok(None);
        };
        if &superblock[..8] != SIGNATURE
            || superblock[8] != 0
            || superblock[13..15] != [8, 8]
            || u64_at(&superblock, 24) != 0
            || u32_at(&superblock, 56 + 16) != 1
        {
            return Ok(None);
        }
        let root_header = u64_at(&superblock, 56 + 8);
        let (tree, heap) = (u64_at(&superblock, 56 + 24), u64_at(&superblock, 56 + 32));
        // The root's header must say the same (a file edited since may not have updated the
        // cache).
        let Some(messages) = self.object_header(root_header)? else {
            return Ok(None);
        };
        let table = messages
            .iter()
            .find(|(kind, _)| *kind == SYMBOL_TABLE)
            .map(|(_, data)| data);
        if table.is_none_or(|t| t.len() < 16 || u64_at(t, 0) != tree || u64_at(t, 8) != heap) {
            return Ok(None);
        }
        let Some(names) = self.local_heap(heap)? else {
            return Ok(None);
        };
        self.tree(tree, None, &names, skip)
    }

    /// The data of the local heap at `at` (the names).
    fn local_heap(&mut self, at: u64) -> Found<Vec<u8>> {
        let Some(header) = self.read(at, 32)? else {
            return Ok(None);
        };
        if &header[..4] != b"HEAP" || header[4] != 0 || u64_at(&header, 8) > MAX_NAMES {
            return Ok(None);
        }
        self.read(u64_at(&header, 24), u64_at(&header, 8))
    }

    /// The B-tree node at `at` and the nodes under it; `level` is what its parent expects.
    fn tree(&mut self, at: u64, level: Option<u8>, names: &[u8], skip: &str) -> Found<()> {
        let Some(header) = self.read(at, 24)? else {
            return Ok(None);
        };
        let node_level = header[5];
        if &header[..4] != b"TREE"
            || header[4] != 0
            || node_level >= MAX_LEVELS
            || level.is_some_and(|l| l != node_level)
            || self.nodes_left == 0
        {
            return Ok(None);
        }
        self.nodes_left -= 1;
        let used = u64::from(u16_at(&header, 6));
        // The keys and children after the header: key, child, key, ..., key.
        let Some(body) = self.read(at + 24, 16 * used + 8)? else {
            return Ok(None);
        };
        for i in 0..used as usize {
            let child = u64_at(&body, 16 * i + 8);
            let found = if node_level == 0 {
                self.symbol_node(child, names, skip)?
            } else {
                self.tree(child, Some(node_level - 1), names, skip)?
            };
            if found.is_none() {
                return Ok(None);
            }
        }
        Ok(Some(()))
    }

    /// The symbol table node at `at`: each entry's dataset.
    fn symbol_node(&mut self, at: u64, names: &[u8], skip: &str) -> Found<()> {
        let Some(header) = self.read(at, 8)? else {
            return Ok(None);
        };
        if &header[..4] != b"SNOD" || header[4] != 1 || self.nodes_left == 0 {
            return Ok(None);
        }
        self.nodes_left -= 1;
        let count = u64::from(u16_at(&header, 6));
        let entry_size = SYMBOL_ENTRY_SIZE as u64;
        let Some(entries) = self.read(at + 8, entry_size * count)? else {
            return Ok(None);
        };
        for entry in entries.chunks_exact(SYMBOL_ENTRY_SIZE) {
            // Name offset, object header address, cache type (0: a dataset caches nothing).
            let offset = u64_at(entry, 0);
            let name = usize::try_from(offset)
                .ok()
                .and_then(|start| names.get(start..))
                .and_then(|rest| rest.iter().position(|&b| b == 0).map(|end| &rest[..end]))
                .and_then(|name| std::str::from_utf8(name).ok());
            let (Some(name), 0) = (name, u32_at(entry, 16)) else {
                return Ok(None);
            };
            let name = name.to_string();
            if self.dataset(u64_at(entry, 8), &name, skip)?.is_none() {
                return Ok(None);
            }
        }
        Ok(Some(()))
    }

    /// The dataset whose object header is at `at`, added to the list (or skipped).
    fn dataset(&mut self, at: u64, name: &str, skip: &str) -> Found<()> {
        let Some(messages) = self.object_header(at)? else {
            return Ok(None);
        };
        let mut shape = None;
        let mut float32 = false;
        let mut string = false;
        let mut values = None;
        for (kind, data) in &messages {
            match *kind {
                DATASPACE => shape = dataspace(data),
                DATATYPE => {
                    float32 = is_float32(data);
                    string = data.first().is_some_and(|b| b & 0x0f == 9);
                }
                LAYOUT => values = contiguous(data),
                NIL
                | FILL_VALUE_OLD
                | FILL_VALUE
                | ATTRIBUTE
                | MODIFICATION_TIME_OLD
                | MODIFICATION_TIME => {}
                _ => return Ok(None),
            }
        }
        if string && name == skip {
            // One element (shape `(1,)`, h5py's and ours), contiguous: 16 bytes. A string
            // held otherwise is left to hdf5-pure with the rest of the file.
            let (Some([1]), Some((address, 16))) = (shape.as_deref(), values) else {
                return Ok(None);
            };
            self.string = self.global_object(address)?;
            return Ok(self.string.map(|_| ()));
        }
        let (Some(shape), true, Some((address, size))) = (shape, float32, values) else {
            return Ok(None);
        };
        // `value_bytes` is `u64::MAX` for a shape that overflows, which no file holds.
        let bytes = value_bytes(&shape);
        let fits = bytes == 0
            || (size == bytes
                && address
                    .checked_add(bytes)
                    .is_some_and(|end| end <= self.length));
        if !fits {
            return Ok(None);
        }
        self.datasets.push(name, &shape, address);
        Ok(Some(()))
    }

    /// Where the bytes of the variable-length string whose element is at `element` lie: the
    /// element's length, collection and index, that object of the global heap collection.
    fn global_object(&mut self, element: u64) -> Found<StringAt> {
        let Some(element) = self.read(element, 16)? else {
            return Ok(None);
        };
        let (length, collection, index) = (
            u64::from(u32_at(&element, 0)),
            u64_at(&element, 4),
            u32_at(&element, 12),
        );
        let Some(header) = self.read(collection, GLOBAL_HEAP_HEADER)? else {
            return Ok(None);
        };
        let end = collection.checked_add(u64_at(&header, 8));
        let Some(end) = end.filter(|&end| end <= self.length) else {
            return Ok(None);
        };
        if &header[..4] != GLOBAL_HEAP_SIGNATURE || header[4] != 1 {
            return Ok(None);
        }
        // Objects one after another, each a 16-byte header (index, reference count, reserved,
        // size) and its data padded to 8 bytes; index 0 is the free space that ends them.
        let mut at = collection + GLOBAL_HEAP_HEADER;
        while at
            .checked_add(GLOBAL_OBJECT_HEADER)
            .is_some_and(|next| next <= end)
        {
            let Some(object) = self.read(at, GLOBAL_OBJECT_HEADER)? else {
                return Ok(None);
            };
            let (object_index, size) = (u16_at(&object, 0), u64_at(&object, 8));
            let data = at + GLOBAL_OBJECT_HEADER;
            if object_index == 0 {
                break;
            }
            if u32::from(object_index) == index {
                let fits = size == length && data.checked_add(size).is_some_and(|e| e <= end);
                return Ok(fits.then_some(StringAt {
                    address: data,
                    length,
                }));
            }
            match size
                .checked_next_multiple_of(8)
                .and_then(|padded| data.checked_add(padded))
            {
                Some(next) => at = next,
                None => break,
            }
        }
        Ok(None)
    }

    /// The messages (type, data) of the version 1 object header at `at`.
    fn object_header(&mut self, at: u64) -> Found<Vec<(u16, Vec<u8>)>> {
        let Some(prefix) = self.read(at, 16)? else {
            return Ok(None);
        };
        let count = usize::from(u16_at(&prefix, 2));
        let size = u64::from(u32_at(&prefix, 8));
        if prefix[0] != 1 || size > MAX_HEADER {
            return Ok(None);
        }
        let Some(body) = self.read(at + 16, size)? else {
            return Ok(None);
        };
        let mut messages = Vec::with_capacity(count.min(16));
        let mut at = 0;
        for _ in 0..count {
            let Some(head) = body.get(at..at + 8) else {
                return Ok(None);
            };
            let (kind, length) = (u16_at(head, 0), usize::from(u16_at(head, 2)));
            let Some(data) = body.get(at + 8..at + 8 + length) else {
                return Ok(None);
            };
            messages.push((kind, data.to_vec()));
            at += 8 + length;
        }
        Ok(Some(messages))
    }
}

/// A simple dataspace's dimensions (version 1 or 2), at least one.
fn dataspace(data: &[u8]) -> Option<Vec<u64>> {
    let (version, rank) = (*data.first()?, usize::from(*data.get(1)?));
    let start = match version {
        1 => 8,
        // Version 2: type 1 is a simple dataspace.
        2 if *data.get(3)? == 1 => 4,
        _ => return None,
    };
    if !(1..=MAX_RANK).contains(&rank) {
        return None;
    }
    let dims = data.get(start..start + 8 * rank)?;
    Some(dims.chunks_exact(8).map(|d| u64_at(d, 0)).collect())
}

/// Whether a datatype message is IEEE float32, little-endian (class 1).
fn is_float32(data: &[u8]) -> bool {
    data.len() >= 20
        && data[0] & 0x0f == 1
        && data[1] & 0x01 == 0
        && u32_at(data, 4) == 4
        && u16_at(data, 8) == 0
        && u16_at(data, 10) == 32
        && data[12..16] == [23, 8, 0, 23]
        && u32_at(data, 16) == 127
}

/// A contiguous layout message's (version 3 or 4) address and size.
fn contiguous(data: &[u8]) -> Option<(u64, u64)> {
    if data.len() < 18 || !matches!(data[0], 3 | 4) || data[1] != 1 {
        return None;
    }
    let (address, size) = (u64_at(data, 2), u64_at(data, 10));
    (address != UNDEFINED || size == 0).then_some((address, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hdf5_output::{Hdf5EmbeddingWriter, OutputFingerprint};

    /// Dataset `i`: shape `(i % 4, 3)` (some empty), values from `i`.
    fn dataset(i: usize) -> (Vec<f32>, Vec<usize>) {
        let shape = vec![i % 4, 3];
        let values = (0..shape[0] * 3).map(|v| (i * 100 + v) as f32).collect();
        (values, shape)
    }

    /// An `elmo embed` output of `n` datasets named `0` to `n − 1`, with `sentence_to_index`.
    fn written(dir: &Path, n: usize) -> std::path::PathBuf {
        let path = dir.join(format!("out-{n}.hdf5"));
        let fingerprint = OutputFingerprint {
            input: String::new(),
            model: String::new(),
            settings: String::new(),
        };
        let mut writer =
            Hdf5EmbeddingWriter::open(&path, &fingerprint, true, 1 << 20, true, &|_| true)
                .expect("open")
                .writer;
        for i in 0..n {
            let (values, shape) = dataset(i);
            writer.note(i, &format!("line {i}"));
            writer.add(&i.to_string(), &values, &shape).expect("add");
        }
        writer.finish().expect("finish");
        path
    }

    /// A dataset's name, shape and values.
    type Contents = (String, Vec<u64>, Vec<f32>);

    /// Every dataset of a file read by the walk.
    fn read_all(path: &Path, skip: &str) -> Option<Vec<Contents>> {
        let mut root = read_root(path, skip).expect("readable")?;
        Some(
            (0..root.datasets.len())
                .map(|i| {
                    let values = root.values(i).expect("values");
                    let d = root.datasets.get(i);
                    (d.name.to_string(), d.shape.to_vec(), values)
                })
                .collect(),
        )
    }

    /// The string skipped, read from where the walk placed it.
    fn string_of(path: &Path) -> Option<String> {
        let mut root = read_root(path, "sentence_to_index").expect("readable")?;
        let mut text = String::new();
        root.string_reader()
            .expect("seek")?
            .read_to_string(&mut text)
            .expect("read");
        Some(text)
    }

    /// What [`written`] wrote, in the order of the names' bytes.
    fn expected(n: usize) -> Vec<Contents> {
        let mut all: Vec<_> = (0..n)
            .map(|i| {
                let (values, shape) = dataset(i);
                let shape = shape.iter().map(|&d| d as u64).collect();
                (i.to_string(), shape, values)
            })
            .collect();
        all.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        all
    }

    #[test]
    fn reads_every_dataset_of_the_layout_in_name_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 0 to 3 B-tree levels (8 names a node, 32 nodes a parent).
        for n in [0, 1, 9, 300, 3_000] {
            let path = written(dir.path(), n);
            assert_eq!(
                read_all(&path, "sentence_to_index"),
                Some(expected(n)),
                "{n}"
            );
            // The string is read only as the one to skip.
            assert_eq!(read_all(&path, ""), None, "{n}");
            let items: Vec<String> = (0..n).map(|i| format!("\"line {i}\": \"{i}\"")).collect();
            assert_eq!(string_of(&path), Some(format!("{{{}}}", items.join(", "))));
        }
    }

    #[test]
    fn a_file_of_another_layout_is_left_to_hdf5_pure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pure.hdf5");
        let file = hdf5_pure::File::create(&path).expect("create");
        file.root()
            .create_dataset("0", |b| {
                b.with_f32_data(&[1.0, 2.0]).with_shape(&[2]);
            })
            .expect("dataset");
        file.close().expect("close");
        assert_eq!(read_all(&path, "sentence_to_index"), None);
        std::fs::write(&path, b"not HDF5").expect("write");
        assert_eq!(read_all(&path, "sentence_to_index"), None);
    }

    /// A string whose element names no object of its collection, or an object of another
    /// length, leaves the whole file to hdf5-pure (not read as a file without the string).
    #[test]
    fn a_string_not_where_its_element_says_leaves_the_file_to_hdf5_pure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = written(dir.path(), 9);
        let bytes = std::fs::read(&path).expect("read");
        let collection = bytes
            .windows(4)
            .position(|w| w == b"GCOL")
            .expect("a collection");
        for (at, value) in [(collection + 16, 2u8), (collection + 24, 1u8)] {
            let mut copy = bytes.clone();
            copy[at] = value;
            std::fs::write(&path, &copy).expect("write");
            assert!(
                read_root(&path, "sentence_to_index")
                    .expect("readable")
                    .is_none()
            );
        }
    }

    /// A file damaged anywhere in its structures reads as the layout (and then only the
    /// datasets it names, within the file), as another layout, or as an error: never a panic
    /// or a read past the file.
    #[test]
    fn damaged_structures_never_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = written(dir.path(), 40);
        let bytes = std::fs::read(&path).expect("read");
        let damaged = dir.path().join("damaged.hdf5");
        let values_end = 96 + (0..40).map(|i| 12 * (i % 4) as u64).sum::<u64>();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..3_000 {
            let mut copy = bytes.clone();
            // The superblock or the structures after the values.
            let span = copy.len() as u64 - values_end;
            for _ in 0..1 + case % 3 {
                let at = if next() % 8 == 0 {
                    next() % 96
                } else {
                    values_end + next() % span
                };
                copy[at as usize] = next() as u8;
            }
            if case % 50 == 0 {
                copy.truncate((next() % copy.len() as u64) as usize);
            }
            std::fs::write(&damaged, &copy).expect("write");
            if let Ok(Some(mut root)) = read_root(&damaged, "sentence_to_index") {
                for i in 0..root.datasets.len() {
                    root.values(i).expect("values within the file");
                }
                let length = root.string.map(|string| string.length);
                if let Some(mut string) = root.string_reader().expect("seek") {
                    let mut bytes = Vec::new();
                    string.read_to_end(&mut bytes).expect("read");
                    assert_eq!(Some(bytes.len() as u64), length, "within the file");
                }
            }
        }
    }

    /// A file h5py wrote as AllenNLP's `elmo` command does reads the same through the walk
    /// (where h5py is installed; `ELMO_REQUIRE_H5PY` makes it required).
    #[test]
    fn reads_a_file_that_h5py_wrote() {
        const SCRIPT: &str = r#"
import json, sys
import h5py, numpy
with h5py.File(sys.argv[1], "w") as f:
    for i in range(300):
        f.create_dataset(str(i), (i % 4, 3), dtype="float32",
                         data=numpy.arange(i * 100, i * 100 + (i % 4) * 3, dtype="float32").reshape(i % 4, 3))
    s = f.create_dataset("sentence_to_index", (1,), dtype=h5py.special_dtype(vlen=str))
    s[0] = json.dumps({"line": "0"})
"#;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h5py.hdf5");
        let ran = std::process::Command::new("python3")
            .args(["-c", SCRIPT])
            .arg(&path)
            .output();
        if !ran.as_ref().is_ok_and(|o| o.status.success()) {
            assert!(
                std::env::var("ELMO_REQUIRE_H5PY").is_err(),
                "ELMO_REQUIRE_H5PY is set but h5py could not write: {ran:?}"
            );
            return;
        }
        assert_eq!(read_all(&path, "sentence_to_index"), Some(expected(300)));
        assert_eq!(string_of(&path).as_deref(), Some(r#"{"line": "0"}"#));
    }
}
