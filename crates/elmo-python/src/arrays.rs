//! NumPy arrays of the module's results, made by NumPy itself (`numpy.frombuffer` over a
//! `bytearray`, reshaped): writable, C-ordered, and no build dependency on NumPy's C API
//! (rust-numpy would turn on `default` features of the `ndarray` crate that burn builds, so the
//! workspace would build burn twice); and the integers of an array given to the module, read
//! the same way (`numpy.asarray`, then its bytes).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyTuple};

/// Values a NumPy array can be made of, by their dtype name.
pub trait Element: Copy {
    /// NumPy's name of the type.
    const DTYPE: &'static str;
    /// The value's size in bytes.
    const BYTES: usize = std::mem::size_of::<Self>();
    /// Writes the value's bytes in the machine's order, as NumPy reads them, to `out`
    /// ([`Self::BYTES`] long).
    fn write_bytes(self, out: &mut [u8]);
}

impl Element for f32 {
    const DTYPE: &'static str = "float32";
    fn write_bytes(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_ne_bytes());
    }
}

impl Element for i64 {
    const DTYPE: &'static str = "int64";
    fn write_bytes(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_ne_bytes());
    }
}

impl Element for bool {
    const DTYPE: &'static str = "bool";
    fn write_bytes(self, out: &mut [u8]) {
        out[0] = u8::from(self);
    }
}

/// A NumPy array of `values` (row-major) in `shape`: the values are copied once, into the
/// `bytearray` that the array reads.
///
/// # Shapes
/// - values: the product of `shape` values
pub fn array<'py, T: Element>(
    py: Python<'py>,
    values: &[T],
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    debug_assert_eq!(values.len(), shape.iter().product::<usize>());
    let buffer = PyByteArray::new_with(py, values.len() * T::BYTES, |bytes| {
        for (value, out) in values.iter().zip(bytes.chunks_exact_mut(T::BYTES)) {
            value.write_bytes(out);
        }
        Ok(())
    })?;
    let numpy = py.import("numpy")?;
    numpy
        .call_method1("frombuffer", (buffer, T::DTYPE))?
        .call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// The integers of `value` (a NumPy array, a nested list, a CPU torch tensor: whatever
/// `numpy.asarray` reads) as `int64`s, row-major, with their shape.
///
/// # Errors
/// A `TypeError` naming `what` where the values are not integers.
pub fn integers(what: &str, value: &Bound<'_, PyAny>) -> PyResult<(Vec<i64>, Vec<usize>)> {
    let numpy = value.py().import("numpy")?;
    let array = numpy.call_method1("asarray", (value,))?;
    let dtype = array.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    if kind != "i" && kind != "u" {
        return Err(PyTypeError::new_err(format!(
            "{what}: integer ids, not an array of {}",
            dtype.str()?
        )));
    }
    let shape: Vec<usize> = array.getattr("shape")?.extract()?;
    let bytes = numpy
        .call_method1("ascontiguousarray", (array, "int64"))?
        .call_method0("tobytes")?;
    let bytes = bytes.cast::<PyBytes>()?.as_bytes();
    let values = (bytes.chunks_exact(8))
        .map(|b| i64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
        .collect();
    Ok((values, shape))
}
