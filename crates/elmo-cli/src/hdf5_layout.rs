//! The HDF5 structures of a file whose root group holds float32 datasets and at most one string:
//! the format libhdf5 writes by default, so h5py's, in which AllenNLP's `elmo` command writes its
//! output. HDF5 File Format Specification 3.0: superblock version 0 (II.A); the root group in
//! symbol-table form, its links in a version 1 B-tree (III.A.1) of symbol table nodes (III.C)
//! with their names in a local heap (III.D); a variable-length string in a global heap
//! collection (III.E); version 1 object headers (IV.A.1.a). Each message is written as h5py 3.16
//! (HDF5 2.0) writes it.
//!
//! The structures are written once, after every dataset's values: a lookup by name is a B-tree
//! search, and writing them takes time linear in the number of datasets once their names are
//! sorted. (hdf5-pure 0.47, which writes a group's links into its object header, slows with
//! every link already there.)

use std::io::{self, Read, Write};

use anyhow::{Context, Result, bail};

/// The superblock's size: the first dataset's values start after it.
pub const SUPERBLOCK_SIZE: u64 = 96;
/// The format signature that opens the superblock.
pub const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";
/// HDF5's undefined address.
pub const UNDEFINED: u64 = u64::MAX;
/// Half the entries of a symbol table node (libhdf5's default, `H5Pset_sym_k`).
const LEAF_K: usize = 4;
/// Half the children of a group B-tree node (libhdf5's default, `H5Pset_sym_k`).
const INTERNAL_K: usize = 16;
/// A symbol table entry: name offset, object header address, cache type, reserved, scratch pad.
pub const SYMBOL_ENTRY_SIZE: usize = 40;
/// A symbol table node: signature, version, reserved, count, then `2 * LEAF_K` entries.
const SYMBOL_NODE_SIZE: usize = 8 + 2 * LEAF_K * SYMBOL_ENTRY_SIZE;
/// A group B-tree node: header, then `2 * INTERNAL_K` children and one key more (libhdf5 reads
/// a node whole, however many children it uses).
const TREE_NODE_SIZE: usize = 24 + 2 * INTERNAL_K * 8 + (2 * INTERNAL_K + 1) * 8;
/// The smallest global heap collection libhdf5 reads (`H5HG_MINSIZE`).
const GLOBAL_HEAP_MIN: u64 = 4096;
/// The signature of a global heap collection.
pub const GLOBAL_HEAP_SIGNATURE: &[u8; 4] = b"GCOL";
/// A global heap collection's header: signature, version, reserved, size.
pub const GLOBAL_HEAP_HEADER: u64 = 16;
/// A global heap object's header: index, reference count, reserved, size.
pub const GLOBAL_OBJECT_HEADER: u64 = 16;
/// The local heap's "no free block" (`H5HL_FREE_NULL`).
const NO_FREE_BLOCK: u64 = 1;
/// The most dimensions a dataspace has (`H5S_MAX_RANK`).
pub const MAX_RANK: usize = 32;

/// A float32 dataset whose values are in the file already (C order, little-endian).
///
/// # Shapes
/// `shape` is the dataset's dimensions; its values take `4 · Π shape` bytes from `address`.
#[derive(Debug, Clone, Copy)]
pub struct StoredValues<'a> {
    /// The dataset's name in the root group.
    pub name: &'a str,
    /// Its dimensions (at least one).
    pub shape: &'a [u64],
    /// Where its values start (not read when it has none).
    pub address: u64,
}

/// Datasets of this layout, in order, kept flat: a dataset costs its name, its dimensions and
/// 24 bytes (not a string and a vector of its own).
#[derive(Debug, Default)]
pub struct DatasetList {
    /// The names, one after another.
    names: String,
    /// The dimensions, one shape after another.
    dims: Vec<u64>,
    /// Per dataset: where its name and its dimensions end, and where its values start.
    ends: Vec<(usize, usize, u64)>,
}

impl DatasetList {
    /// Adds a dataset.
    pub fn push(&mut self, name: &str, shape: &[u64], address: u64) {
        self.names.push_str(name);
        self.dims.extend_from_slice(shape);
        self.ends.push((self.names.len(), self.dims.len(), address));
    }

    /// How many datasets.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The datasets from the `from`-th on.
    pub fn iter_from(&self, from: usize) -> impl Iterator<Item = StoredValues<'_>> {
        (from..self.len()).map(|i| self.get(i))
    }

    /// Every dataset.
    pub fn iter(&self) -> impl Iterator<Item = StoredValues<'_>> {
        self.iter_from(0)
    }

    /// The `i`-th dataset.
    pub fn get(&self, i: usize) -> StoredValues<'_> {
        let (name_start, dims_start) = i
            .checked_sub(1)
            .map_or((0, 0), |before| (self.ends[before].0, self.ends[before].1));
        let (name_end, dims_end, address) = self.ends[i];
        StoredValues {
            name: &self.names[name_start..name_end],
            shape: &self.dims[dims_start..dims_end],
            address,
        }
    }
}

/// A one-element dataset holding a variable-length UTF-8 string, written into the file by
/// `write` (the string need not be held whole in memory).
#[derive(Clone, Copy)]
pub struct StringValue<'a> {
    /// The dataset's name in the root group.
    pub name: &'a str,
    /// The string's length in bytes.
    pub length: u64,
    /// Writes the string's bytes, `length` of them.
    pub write: &'a dyn Fn(&mut dyn Write) -> io::Result<()>,
}

/// What [`write_structures`] wrote.
pub struct Structures {
    /// The superblock, for offset 0 (its end-of-file address is where the structures end).
    pub superblock: [u8; SUPERBLOCK_SIZE as usize],
}

/// The bytes of a float32 dataset of `shape`; `u64::MAX` where that overflows.
pub fn value_bytes(shape: &[u64]) -> u64 {
    shape
        .iter()
        .try_fold(4u64, |bytes, &d| bytes.checked_mul(d))
        .unwrap_or(u64::MAX)
}

/// Why `name` cannot name a dataset of the root group, if it cannot, said of it as a `noun`
/// ("name", "sentence").
pub fn unusable_name(name: &str, noun: &str) -> Option<String> {
    if name.is_empty() {
        Some(format!("an empty {noun}"))
    } else if name == "." {
        Some("`.` (HDF5's name of the group itself)".into())
    } else if name.contains('/') {
        Some(format!("a {noun} with `/` (HDF5's path separator)"))
    } else if name.contains('\0') {
        Some(format!(
            "a {noun} with a NUL character (the end of a name in HDF5)"
        ))
    } else {
        None
    }
}

/// Writes the structures of a root group holding `datasets` (whose values are in the file
/// already) and `string` through `out`, which stands at file offset `start` (the end of the
/// values), and returns the superblock to write at offset 0.
///
/// Names are checked first ([`unusable_name`], no two alike), so an error writes nothing but
/// after a failed write of `out`.
pub fn write_structures(
    out: &mut impl Write,
    start: u64,
    datasets: &[StoredValues<'_>],
    string: Option<StringValue<'_>>,
) -> Result<Structures> {
    // Every link with its dataset's index (`datasets.len()` for the string), sorted once by
    // name as C's `strcmp` orders names (by their bytes), as symbol table nodes and the B-tree
    // need them.
    let mut order: Vec<(&str, usize)> = datasets
        .iter()
        .map(|d| d.name)
        .chain(string.map(|s| s.name))
        .enumerate()
        .map(|(i, name)| (name, i))
        .collect();
    for (name, _) in &order {
        if let Some(problem) = unusable_name(name, "name") {
            bail!("dataset {name:?}: {problem}");
        }
    }
    if let Some(d) = datasets
        .iter()
        .find(|d| d.shape.is_empty() || d.shape.len() > MAX_RANK)
    {
        bail!(
            "dataset {:?}: {} dimensions (HDF5 takes 1 to {MAX_RANK})",
            d.name,
            d.shape.len()
        );
    }
    let string_length = match string {
        Some(s) => Some(u32::try_from(s.length).with_context(|| {
            format!(
                "dataset {:?}: a string of {} bytes, over HDF5's limit of 4 GiB for one \
                 variable-length string",
                s.name, s.length
            )
        })?),
        None => None,
    };
    order.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    if let Some(pair) = order.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        bail!("two datasets named {:?}", pair[0].0);
    }

    let mut out = Positioned {
        inner: out,
        position: start,
    };
    out.pad_to(8)?;
    // The string first: its collection in the global heap, then its one element.
    let string_element = match (string, string_length) {
        (Some(s), Some(length)) => {
            let collection = out.position;
            write_global_heap(&mut out, s)?;
            let element = out.position;
            let mut bytes = Vec::with_capacity(16);
            bytes.extend(length.to_le_bytes());
            bytes.extend(collection.to_le_bytes());
            bytes.extend(1u32.to_le_bytes());
            out.write_all(&bytes)?;
            Some(element)
        }
        _ => None,
    };
    // An object header per dataset, in the order of `datasets`.
    let mut headers: Vec<u64> = Vec::with_capacity(order.len());
    for dataset in datasets {
        headers.push(out.position);
        out.write_all(&float_dataset_header(dataset))?;
    }
    if let Some(element) = string_element {
        headers.push(out.position);
        out.write_all(&string_dataset_header(element))?;
    }
    let links: Vec<(&str, u64)> = order.iter().map(|&(name, i)| (name, headers[i])).collect();

    let (heap, offsets) = write_local_heap(&mut out, &links)?;
    let leaves = write_symbol_nodes(&mut out, &links, &offsets)?;
    let tree = write_btree(&mut out, leaves)?;

    // The root group's object header: one symbol table message.
    let root = out.position;
    let mut message = Vec::with_capacity(16);
    message.extend(tree.to_le_bytes());
    message.extend(heap.to_le_bytes());
    out.write_all(&object_header(&[(SYMBOL_TABLE, 0, &message)]))?;
    let end = out.position;

    let mut superblock = Vec::with_capacity(SUPERBLOCK_SIZE as usize);
    superblock.extend(SIGNATURE);
    // Versions of the superblock, free-space storage, root symbol table entry; reserved;
    // shared header messages; sizes of offsets and lengths; reserved.
    superblock.extend([0, 0, 0, 0, 0, 8, 8, 0]);
    superblock.extend((LEAF_K as u16).to_le_bytes());
    superblock.extend((INTERNAL_K as u16).to_le_bytes());
    superblock.extend(0u32.to_le_bytes()); // file consistency flags
    superblock.extend(0u64.to_le_bytes()); // base address
    superblock.extend(UNDEFINED.to_le_bytes()); // free-space info
    superblock.extend(end.to_le_bytes());
    superblock.extend(UNDEFINED.to_le_bytes()); // driver information block
    superblock.extend(symbol_entry(0, root, Some((tree, heap))));
    Ok(Structures {
        superblock: superblock
            .try_into()
            .expect("the superblock's fields add up to its size"),
    })
}

/// A writer that knows its file offset.
struct Positioned<'a, W: Write> {
    inner: &'a mut W,
    position: u64,
}

impl<W: Write> Write for Positioned<'_, W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(bytes)?;
        self.position += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Positioned<'_, W> {
    fn zeros(&mut self, n: u64) -> io::Result<()> {
        io::copy(&mut io::repeat(0).take(n), self.inner)?;
        self.position += n;
        Ok(())
    }

    fn pad_to(&mut self, alignment: u64) -> io::Result<()> {
        self.zeros(self.position.next_multiple_of(alignment) - self.position)
    }
}

/// A version 1 object header of `messages` (type, flags, data), each padded to 8 bytes.
fn object_header(messages: &[(u16, u8, &[u8])]) -> Vec<u8> {
    let size: usize = messages
        .iter()
        .map(|(_, _, data)| 8 + data.len().next_multiple_of(8))
        .sum();
    let mut bytes = Vec::with_capacity(16 + size);
    bytes.extend([1, 0]); // version, reserved
    bytes.extend((messages.len() as u16).to_le_bytes());
    bytes.extend(1u32.to_le_bytes()); // reference count
    bytes.extend((size as u32).to_le_bytes());
    bytes.extend([0; 4]); // to 8-byte alignment
    for (kind, flags, data) in messages {
        let padded = data.len().next_multiple_of(8);
        bytes.extend(kind.to_le_bytes());
        bytes.extend((padded as u16).to_le_bytes());
        bytes.extend([*flags, 0, 0, 0]);
        bytes.extend(*data);
        bytes.resize(bytes.len() + padded - data.len(), 0);
    }
    bytes
}

/// A dataspace message (version 1, maximum dimensions equal to the dimensions).
fn dataspace(shape: &[u64]) -> Vec<u8> {
    let mut bytes = vec![1, shape.len() as u8, 1, 0, 0, 0, 0, 0];
    for _ in 0..2 {
        bytes.extend(shape.iter().flat_map(|d| d.to_le_bytes()));
    }
    bytes
}

/// A contiguous layout message (version 3); a dataset without values has no address.
fn contiguous_layout(address: u64, size: u64) -> Vec<u8> {
    let address = if size == 0 { UNDEFINED } else { address };
    let mut bytes = vec![3, 1];
    bytes.extend(address.to_le_bytes());
    bytes.extend(size.to_le_bytes());
    bytes
}

/// Message types of the headers written here (IV.A.2).
pub const DATASPACE: u16 = 0x0001;
pub const DATATYPE: u16 = 0x0003;
pub const FILL_VALUE: u16 = 0x0005;
pub const LAYOUT: u16 = 0x0008;
pub const SYMBOL_TABLE: u16 = 0x0011;
/// A message that never changes (`H5O_MSG_FLAG_CONSTANT`).
const CONSTANT: u8 = 1;

/// IEEE float32, little-endian (datatype class 1, version 1).
const FLOAT32: [u8; 20] = [
    0x11, 0x20, 31, 0, // class and version; byte order, padding, normalisation, sign bit
    4, 0, 0, 0, // size
    0, 0, 32, 0, // bit offset, precision
    23, 8, 0, 23, // exponent location and size, mantissa location and size
    127, 0, 0, 0, // exponent bias
];

/// A variable-length UTF-8 string, null-terminated (class 9, version 1), of unsigned bytes.
const VLEN_UTF8: [u8; 20] = [
    0x19, 0x01, 0x01, 0, // class and version; a string, null-terminated, UTF-8
    16, 0, 0, 0, // size of an element on disk: length, collection address, object index
    0x10, 0, 0, 0, // the base type: class 0 (integer), version 1, unsigned, little-endian
    1, 0, 0, 0, // of one byte
    0, 0, 8, 0, // bit offset, precision
];

fn float_dataset_header(dataset: &StoredValues<'_>) -> Vec<u8> {
    let size = dataset
        .shape
        .iter()
        .fold(4u64, |bytes, &d| bytes.saturating_mul(d));
    object_header(&[
        (DATASPACE, 0, &dataspace(dataset.shape)),
        (DATATYPE, CONSTANT, &FLOAT32),
        // Fill value version 2: allocated late, written if set, the default value.
        (FILL_VALUE, CONSTANT, &[2, 2, 2, 1, 0, 0, 0, 0]),
        (LAYOUT, 0, &contiguous_layout(dataset.address, size)),
    ])
}

fn string_dataset_header(element: u64) -> Vec<u8> {
    object_header(&[
        (DATASPACE, 0, &dataspace(&[1])),
        (DATATYPE, CONSTANT, &VLEN_UTF8),
        // Allocated late, written on allocation, the default value (h5py's for strings).
        (FILL_VALUE, CONSTANT, &[2, 2, 0, 1, 0, 0, 0, 0]),
        (LAYOUT, 0, &contiguous_layout(element, 16)),
    ])
}

/// A global heap collection holding `string` as its object 1 (reference count 0, as h5py
/// writes), then its free space as object 0.
fn write_global_heap<W: Write>(
    out: &mut Positioned<'_, W>,
    string: StringValue<'_>,
) -> io::Result<()> {
    let length = string.length;
    let padded = length.next_multiple_of(8);
    let used = GLOBAL_HEAP_HEADER + GLOBAL_OBJECT_HEADER + padded;
    let mut size = used.max(GLOBAL_HEAP_MIN);
    if (1..GLOBAL_OBJECT_HEADER).contains(&(size - used)) {
        // Free space too small for an object's header: a whole free object more.
        size += GLOBAL_OBJECT_HEADER;
    }
    let mut bytes = Vec::with_capacity(32);
    bytes.extend(GLOBAL_HEAP_SIGNATURE);
    bytes.extend([1, 0, 0, 0]);
    bytes.extend(size.to_le_bytes());
    bytes.extend(1u16.to_le_bytes()); // object index
    bytes.extend(0u16.to_le_bytes()); // reference count
    bytes.extend([0; 4]);
    bytes.extend(length.to_le_bytes());
    out.write_all(&bytes)?;
    let start = out.position;
    (string.write)(out)?;
    let written = out.position - start;
    if written != length {
        return Err(io::Error::other(format!(
            "dataset {:?}: {written} bytes written for a string of {length}",
            string.name
        )));
    }
    out.zeros(padded - length)?;
    let free = size - used;
    if free > 0 {
        let mut bytes = Vec::with_capacity(16);
        bytes.extend(0u16.to_le_bytes());
        bytes.extend(0u16.to_le_bytes());
        bytes.extend([0; 4]);
        bytes.extend(free.to_le_bytes());
        out.write_all(&bytes)?;
        out.zeros(free - GLOBAL_OBJECT_HEADER)?;
    }
    Ok(())
}

/// The local heap of the root group's names (`""` at offset 0, then each name, null-terminated
/// and padded to 8 bytes): its address, and each link's name offset.
fn write_local_heap<W: Write>(
    out: &mut Positioned<'_, W>,
    links: &[(&str, u64)],
) -> io::Result<(u64, Vec<u64>)> {
    let mut offsets = Vec::with_capacity(links.len());
    let mut data_size = 8u64;
    for (name, _) in links {
        offsets.push(data_size);
        data_size += (name.len() as u64 + 1).next_multiple_of(8);
    }
    let address = out.position;
    let mut bytes = Vec::with_capacity(32);
    bytes.extend(b"HEAP");
    bytes.extend([0, 0, 0, 0]); // version, reserved
    bytes.extend(data_size.to_le_bytes());
    bytes.extend(NO_FREE_BLOCK.to_le_bytes());
    bytes.extend((address + 32).to_le_bytes()); // the data follows
    out.write_all(&bytes)?;
    out.zeros(8)?;
    for (name, _) in links {
        out.write_all(name.as_bytes())?;
        out.zeros((name.len() as u64 + 1).next_multiple_of(8) - name.len() as u64)?;
    }
    Ok((address, offsets))
}

/// A symbol table entry; `group` caches a group's B-tree and local heap (the root's entry).
fn symbol_entry(name_offset: u64, header: u64, group: Option<(u64, u64)>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SYMBOL_ENTRY_SIZE);
    bytes.extend(name_offset.to_le_bytes());
    bytes.extend(header.to_le_bytes());
    bytes.extend(u32::from(group.is_some()).to_le_bytes()); // cache type
    bytes.extend([0; 4]);
    let (tree, heap) = group.unwrap_or((0, 0));
    bytes.extend(tree.to_le_bytes());
    bytes.extend(heap.to_le_bytes());
    bytes
}

/// A child of a B-tree node, with the name offsets of its keys: the largest name left of it
/// (`""` at the far left) and its own largest name.
#[derive(Debug, Clone, Copy)]
struct Child {
    address: u64,
    left: u64,
    right: u64,
}

/// The symbol table nodes of the sorted `links`, `2 · LEAF_K` to a node.
fn write_symbol_nodes<W: Write>(
    out: &mut Positioned<'_, W>,
    links: &[(&str, u64)],
    offsets: &[u64],
) -> io::Result<Vec<Child>> {
    let mut leaves = Vec::with_capacity(links.len().div_ceil(2 * LEAF_K));
    let mut left = 0;
    for (node_links, node_offsets) in links.chunks(2 * LEAF_K).zip(offsets.chunks(2 * LEAF_K)) {
        let address = out.position;
        let mut bytes = Vec::with_capacity(SYMBOL_NODE_SIZE);
        bytes.extend(b"SNOD");
        bytes.extend([1, 0]); // version, reserved
        bytes.extend((node_links.len() as u16).to_le_bytes());
        for ((_, header), offset) in node_links.iter().zip(node_offsets) {
            bytes.extend(symbol_entry(*offset, *header, None));
        }
        bytes.resize(SYMBOL_NODE_SIZE, 0);
        out.write_all(&bytes)?;
        let right = *node_offsets.last().expect("chunks are not empty");
        leaves.push(Child {
            address,
            left,
            right,
        });
        left = right;
    }
    Ok(leaves)
}

/// The group B-tree over `leaves`, level by level up to one root: its address.
fn write_btree<W: Write>(out: &mut Positioned<'_, W>, leaves: Vec<Child>) -> io::Result<u64> {
    let mut children = leaves;
    let mut level = 0u8;
    loop {
        let n_nodes = children.len().div_ceil(2 * INTERNAL_K).max(1);
        let first = out.position;
        let node_address = |j: usize| first + (j * TREE_NODE_SIZE) as u64;
        let mut parents = Vec::with_capacity(n_nodes);
        for j in 0..n_nodes {
            let start = j * 2 * INTERNAL_K;
            let node_children = &children[start..(start + 2 * INTERNAL_K).min(children.len())];
            let address = node_address(j);
            let left_sibling = if j == 0 {
                UNDEFINED
            } else {
                node_address(j - 1)
            };
            let right_sibling = if j + 1 < n_nodes {
                node_address(j + 1)
            } else {
                UNDEFINED
            };
            let mut bytes = Vec::with_capacity(TREE_NODE_SIZE);
            bytes.extend(b"TREE");
            bytes.extend([0, level]); // node type 0 (group), level
            bytes.extend((node_children.len() as u16).to_le_bytes());
            bytes.extend(left_sibling.to_le_bytes());
            bytes.extend(right_sibling.to_le_bytes());
            let left = node_children.first().map_or(0, |c| c.left);
            bytes.extend(left.to_le_bytes());
            for child in node_children {
                bytes.extend(child.address.to_le_bytes());
                bytes.extend(child.right.to_le_bytes());
            }
            bytes.resize(TREE_NODE_SIZE, 0);
            out.write_all(&bytes)?;
            parents.push(Child {
                address,
                left,
                right: node_children.last().map_or(0, |c| c.right),
            });
        }
        if n_nodes == 1 {
            return Ok(parents[0].address);
        }
        children = parents;
        level += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `datasets` (name, shape; values `i + 1000 · k` for the k-th dataset) and
    /// `string`, as [`write_structures`] lays it out after the values.
    fn file_of(datasets: &[(String, Vec<u64>)], string: Option<StringValue<'_>>) -> Vec<u8> {
        let mut bytes = vec![0u8; SUPERBLOCK_SIZE as usize];
        let mut addresses = Vec::new();
        for (k, (_, shape)) in datasets.iter().enumerate() {
            addresses.push(bytes.len() as u64);
            let n = shape.iter().product::<u64>() as usize;
            for i in 0..n {
                bytes.extend((i as f32 + 1000.0 * k as f32).to_le_bytes());
            }
        }
        let stored: Vec<StoredValues<'_>> = datasets
            .iter()
            .zip(&addresses)
            .map(|((name, shape), &address)| StoredValues {
                name,
                shape,
                address,
            })
            .collect();
        let start = bytes.len() as u64;
        let mut tail = Vec::new();
        let structures = write_structures(&mut tail, start, &stored, string).expect("write");
        bytes.extend(tail);
        bytes[..SUPERBLOCK_SIZE as usize].copy_from_slice(&structures.superblock);
        // libhdf5 refuses a file shorter than its end-of-file address.
        assert_eq!(u64_at(&bytes, 40), bytes.len() as u64);
        bytes
    }

    fn u64_at(bytes: &[u8], at: u64) -> u64 {
        let at = at as usize;
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    }

    fn u16_at(bytes: &[u8], at: u64) -> u16 {
        let at = at as usize;
        u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
    }

    /// The name at `offset` of the local heap whose data starts at `data`.
    fn heap_name(bytes: &[u8], data: u64, offset: u64) -> &[u8] {
        let start = (data + offset) as usize;
        let end = start + bytes[start..].iter().position(|&b| b == 0).expect("NUL");
        &bytes[start..end]
    }

    /// Finds `name` as libhdf5 does (`H5G__node_found` through `H5B_find`): down the B-tree by
    /// its keys (a child holds the names above its left key and up to its right key), then a
    /// binary search of the symbol table node. Returns the object header address.
    fn libhdf5_lookup(bytes: &[u8], name: &str) -> Option<u64> {
        // The superblock's root entry caches the B-tree and heap addresses.
        let mut node = u64_at(bytes, 56 + 24);
        let heap = u64_at(bytes, 56 + 32);
        assert_eq!(&bytes[heap as usize..heap as usize + 4], b"HEAP");
        let data = u64_at(bytes, heap + 24);
        let name = name.as_bytes();
        loop {
            assert_eq!(&bytes[node as usize..node as usize + 4], b"TREE");
            let level = bytes[node as usize + 5];
            let n = u16_at(bytes, node + 6) as u64;
            let key = |i: u64| heap_name(bytes, data, u64_at(bytes, node + 24 + 16 * i));
            let child = (0..n).find(|&i| key(i) < name && name <= key(i + 1))?;
            let address = u64_at(bytes, node + 24 + 16 * child + 8);
            if level > 0 {
                node = address;
                continue;
            }
            assert_eq!(&bytes[address as usize..address as usize + 4], b"SNOD");
            let count = u16_at(bytes, address + 6) as usize;
            let entries: Vec<(&[u8], u64)> = (0..count as u64)
                .map(|e| {
                    let entry = address + 8 + 40 * e;
                    (
                        heap_name(bytes, data, u64_at(bytes, entry)),
                        u64_at(bytes, entry + 8),
                    )
                })
                .collect();
            assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
            return entries
                .binary_search_by(|(entry, _)| entry.cmp(&name))
                .ok()
                .map(|i| entries[i].1);
        }
    }

    fn line_datasets(n: usize) -> Vec<(String, Vec<u64>)> {
        (0..n)
            .map(|i| (i.to_string(), vec![3, (i % 4) as u64, 2]))
            .collect()
    }

    #[test]
    fn every_name_is_found_through_the_btree_as_libhdf5_searches_it() {
        // One symbol table node, one full level of them, two levels and three levels of nodes.
        for n in [0, 1, 8, 9, 256, 257, 9000] {
            let datasets = line_datasets(n);
            let bytes = file_of(&datasets, None);
            for (name, _) in &datasets {
                assert!(libhdf5_lookup(&bytes, name).is_some(), "{n}: {name}");
            }
            for absent in ["", "-1", "99999", "a", "10a"] {
                assert!(libhdf5_lookup(&bytes, absent).is_none(), "{n}: {absent}");
            }
        }
    }

    #[test]
    fn hdf5_pure_reads_every_dataset_and_the_string() {
        let mut datasets = line_datasets(300);
        datasets.push(("naïve sentence, with \"quotes\"".to_string(), vec![1, 2]));
        for long in [10, 4000, 4070, 5000] {
            let value = "é".repeat(long / 2) + &"x".repeat(long % 2);
            let bytes = file_of(
                &datasets,
                Some(StringValue {
                    name: "sentence_to_index",
                    length: value.len() as u64,
                    write: &|out| out.write_all(value.as_bytes()),
                }),
            );
            let file = hdf5_pure::File::from_bytes(bytes.clone()).expect("open");
            let mut names = file.root().datasets().expect("list");
            names.sort();
            let mut expected: Vec<String> = datasets.iter().map(|(n, _)| n.clone()).collect();
            expected.push("sentence_to_index".into());
            expected.sort();
            assert_eq!(names, expected);
            for (k, (name, shape)) in datasets.iter().enumerate() {
                let dataset = file.dataset(name).expect("dataset");
                assert_eq!(&dataset.shape().expect("shape"), shape, "{name}");
                let values = dataset.read_f32().expect("values");
                let n = shape.iter().product::<u64>() as usize;
                let expected: Vec<f32> = (0..n).map(|i| i as f32 + 1000.0 * k as f32).collect();
                assert_eq!(values, expected, "{name}");
                assert!(libhdf5_lookup(&bytes, name).is_some(), "{name}");
            }
            let strings = file
                .dataset("sentence_to_index")
                .and_then(|d| d.read_string())
                .expect("string");
            assert_eq!(strings, vec![value.clone()], "{long} bytes");
        }
    }

    #[test]
    fn names_are_sorted_by_their_bytes_as_strcmp_orders_them() {
        let names = ["b", "a", "ä", "Z", "a b", "ab", "10", "9"];
        let datasets: Vec<(String, Vec<u64>)> =
            names.iter().map(|n| (n.to_string(), vec![1])).collect();
        let bytes = file_of(&datasets, None);
        for name in names {
            assert!(libhdf5_lookup(&bytes, name).is_some(), "{name}");
        }
    }

    #[test]
    fn bad_names_are_refused_before_anything_is_written() {
        for (names, expected) in [
            (vec!["a", "b", "a"], "two datasets named \"a\""),
            (vec!["a/b"], "`/`"),
            (vec!["."], "`.`"),
            (vec![""], "an empty name"),
            (vec!["a"; 1], "33 dimensions"),
            (vec!["a\0b"], "NUL"),
        ] {
            let shape: &[u64] = if expected.contains("dimensions") {
                &[1; 33]
            } else {
                &[1]
            };
            let datasets: Vec<StoredValues<'_>> = names
                .iter()
                .map(|name| StoredValues {
                    name,
                    shape,
                    address: 96,
                })
                .collect();
            let mut out = Vec::new();
            let error = write_structures(&mut out, 100, &datasets, None)
                .err()
                .expect("refused")
                .to_string();
            assert!(error.contains(expected), "{names:?}: {error}");
            assert!(out.is_empty(), "{names:?}: nothing written");
        }
    }

    /// A string that writes other than its length is an error, not a file that misplaces
    /// every structure after it.
    #[test]
    fn a_string_written_short_or_long_is_an_error() {
        for written in ["abc", "abcdefg"] {
            let string = StringValue {
                name: "s",
                length: 5,
                write: &|out| out.write_all(written.as_bytes()),
            };
            let error = write_structures(&mut Vec::new(), 96, &[], Some(string))
                .err()
                .expect("refused");
            let expected = format!("{} bytes written for a string of 5", written.len());
            assert!(format!("{error:#}").contains(&expected), "{error:#}");
        }
    }
}
