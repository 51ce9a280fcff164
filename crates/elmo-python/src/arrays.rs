//! NumPy arrays of the module's results, made by NumPy itself (`numpy.frombuffer` over a
//! `bytearray`, reshaped): writable, C-ordered, and no build dependency on NumPy's C API
//! (rust-numpy would turn on `default` features of the `ndarray` crate that burn builds, so the
//! workspace would build burn twice).

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyTuple};

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
