//! Reading the `.npy` fixtures (NumPy's format, version 1.0/2.0: a magic string, a Python-dict
//! header with `descr`, `fortran_order` and `shape`, then the values in C order), for the
//! little-endian `f32`, `i64` and `bool` arrays that `fixtures/` holds. A small reader of our own,
//! so that the tests add no dependency (and no feature) to the workspace's one build.

use std::path::Path;

/// An n-d array read from a `.npy` file.
#[derive(Debug, Clone, PartialEq)]
pub struct Array<T> {
    /// The dimensions.
    pub shape: Vec<usize>,
    /// The values in C (row-major) order.
    pub data: Vec<T>,
}

/// A value type of the fixtures, with its `descr` and little-endian decoding.
pub trait NpyElement: Sized {
    /// NumPy's type string.
    const DESCR: &'static str;
    /// Bytes per value.
    const SIZE: usize;
    /// One value from its bytes.
    fn decode(bytes: &[u8]) -> Self;
}

impl NpyElement for f32 {
    const DESCR: &'static str = "<f4";
    const SIZE: usize = 4;
    fn decode(bytes: &[u8]) -> Self {
        f32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }
}

impl NpyElement for i64 {
    const DESCR: &'static str = "<i8";
    const SIZE: usize = 8;
    fn decode(bytes: &[u8]) -> Self {
        i64::from_le_bytes(bytes.try_into().expect("8 bytes"))
    }
}

impl NpyElement for bool {
    const DESCR: &'static str = "|b1";
    const SIZE: usize = 1;
    fn decode(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// The value of `key` in a `.npy` header dict (up to the next top-level comma or brace).
fn header_field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}':"))? + key.len() + 3;
    let rest = header[start..].trim_start();
    let end = match rest.starts_with('(') {
        true => rest.find(')')? + 1,
        false => rest.find([',', '}'])?,
    };
    Some(rest[..end].trim())
}

/// Reads `path` as an array of `T`.
///
/// # Panics
/// On a file that is not a C-order `.npy` array of `T` (test fixtures only).
pub fn read_npy<T: NpyElement>(path: &Path) -> Array<T> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fail = |why: &str| -> ! {
        panic!(
            "{}: not a .npy array of {}: {why}",
            path.display(),
            T::DESCR
        )
    };
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        fail("no NumPy magic");
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        _ => fail("unknown version"),
    };
    let header = bytes
        .get(header_start..header_start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .unwrap_or_else(|| fail("bad header"));
    let descr = header_field(header, "descr").unwrap_or_else(|| fail("no descr"));
    if descr.trim_matches('\'') != T::DESCR {
        fail(&format!("descr {descr}"));
    }
    if header_field(header, "fortran_order") != Some("False") {
        fail("Fortran order");
    }
    let shape: Vec<usize> = header_field(header, "shape")
        .unwrap_or_else(|| fail("no shape"))
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().unwrap_or_else(|_| fail("bad shape")))
        .collect();
    let values = &bytes[header_start + header_len..];
    let n: usize = shape.iter().product();
    if values.len() != n * T::SIZE {
        fail(&format!(
            "{} bytes of data for shape {shape:?}",
            values.len()
        ));
    }
    let data = values.chunks_exact(T::SIZE).map(T::decode).collect();
    Array { shape, data }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file as NumPy writes it (`np.save`) decodes to its values.
    #[test]
    fn reads_what_numpy_writes() {
        let dir = std::env::temp_dir().join(format!("npy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".to_string();
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        for v in [1.0f32, -2.5, 3.0, 0.0, 5.5, 6.25] {
            bytes.extend(v.to_le_bytes());
        }
        let path = dir.join("a.npy");
        std::fs::write(&path, &bytes).expect("write");
        let array = read_npy::<f32>(&path);
        assert_eq!(array.shape, [2, 3]);
        assert_eq!(array.data, [1.0, -2.5, 3.0, 0.0, 5.5, 6.25]);
        let wrong = std::panic::catch_unwind(|| read_npy::<i64>(&path));
        assert!(wrong.is_err(), "an f32 file is not read as i64");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
