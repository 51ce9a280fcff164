//! Buffers of plain values whose first value starts a 64-byte cache line: the packed operands of
//! the host products (`host_gemm`'s panels and blocks of rows, `host_bf16`'s tiles and rows) and
//! the LSTM loop's products, so that each of the micro-kernels' 64-byte loads and stores reads or
//! writes one line, not two. (The allocator aligns
//! a `Vec` to 16 bytes, and a load across two lines takes two of the core's load slots.)

use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};

/// Bytes of a cache line.
const LINE_BYTES: usize = 64;

/// One cache line's bytes, aligned to a line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; LINE_BYTES]);

/// Value types for which any bytes, zeros included, are a value, and whose size divides a line.
pub(crate) trait Plain: Copy + Send + Sync + private::Sealed {}

impl Plain for f32 {}
impl Plain for u16 {}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
}

/// `len` values of `T` in memory that starts a cache line.
pub(crate) struct LineAligned<T: Plain> {
    /// The values' bytes, zero past the last value to the end of its line.
    storage: Storage,
    len: usize,
    values: PhantomData<T>,
}

/// Where a [`LineAligned`]'s values are.
enum Storage {
    /// Whole lines ([`LineAligned::written`]).
    Lines(Vec<Line>),
    /// The allocator's zeroed bytes ([`LineAligned::zeroed`]: `calloc`, whose fresh pages stay
    /// out of the resident set until written), the values from `offset`, their first line
    /// boundary.
    Zeroed { bytes: Vec<u8>, offset: usize },
}

impl<T: Plain> Clone for LineAligned<T> {
    fn clone(&self) -> Self {
        match &self.storage {
            Storage::Lines(lines) => Self {
                storage: Storage::Lines(lines.clone()),
                len: self.len,
                values: PhantomData,
            },
            // A copy of the bytes would start elsewhere in a line.
            Storage::Zeroed { .. } => {
                let mut copy = Self::zeroed(self.len);
                copy.copy_from_slice(self);
                copy
            }
        }
    }
}

impl<T: Plain> LineAligned<T> {
    /// `len` values that `write` writes, every one of them: it gets them uninitialised (packed
    /// operands are written whole, so their memory is not zeroed first: a pass of `calloc`'s
    /// `memset` where the allocator hands back memory that a product freed).
    ///
    /// # Safety
    /// `write` writes every value of the slice it is given.
    pub(crate) unsafe fn written(len: usize, write: impl FnOnce(&mut [MaybeUninit<T>])) -> Self {
        let per_line = LINE_BYTES / size_of::<T>();
        let n_lines = len.div_ceil(per_line);
        let mut lines = Vec::<Line>::with_capacity(n_lines);
        // SAFETY: the spare capacity holds `n_lines` lines, each `per_line` values of `T`
        // (its size divides a line, and a line's alignment is a multiple of `T`'s).
        let values = unsafe {
            std::slice::from_raw_parts_mut(
                lines
                    .spare_capacity_mut()
                    .as_mut_ptr()
                    .cast::<MaybeUninit<T>>(),
                n_lines * per_line,
            )
        };
        let (values, tail) = values.split_at_mut(len);
        // Zero bytes are a value of `T` (`Plain`).
        tail.fill(MaybeUninit::zeroed());
        write(values);
        // SAFETY: the capacity is at least `n_lines`; `write` wrote every value (the caller's
        // promise) and the tail the rest.
        unsafe { lines.set_len(n_lines) };
        Self {
            storage: Storage::Lines(lines),
            len,
            values: PhantomData,
        }
    }

    /// `len` zeros: a buffer that a product's tiles store into (AMX's rows of 64 bytes, each
    /// within one line where the row stride is a multiple of a line). Taken from the
    /// allocator's zeroed memory, not written: pages that the caller never writes (rows of a
    /// batch's shorter sentences) stay out of the process's resident memory, as in a
    /// `vec![0.0; len]` (writing the zeros cost `original` inference 33 MiB of peak RSS).
    pub(crate) fn zeroed(len: usize) -> Self {
        let value_bytes = len.div_ceil(LINE_BYTES / size_of::<T>()) * LINE_BYTES;
        // `vec![0u8; n]` is `calloc`: zero bytes, a value of `T` (`Plain`).
        let bytes = vec![0u8; value_bytes + LINE_BYTES];
        // (`align_offset` may answer "cannot" by its contract; the address arithmetic cannot.)
        let offset = (LINE_BYTES - bytes.as_ptr() as usize % LINE_BYTES) % LINE_BYTES;
        Self {
            storage: Storage::Zeroed { bytes, offset },
            len,
            values: PhantomData,
        }
    }

    /// The first value's byte.
    fn start(&self) -> *const u8 {
        match &self.storage {
            Storage::Lines(lines) => lines.as_ptr().cast::<u8>(),
            // SAFETY: `offset` is below a line, within the bytes (`zeroed`).
            Storage::Zeroed { bytes, offset } => unsafe { bytes.as_ptr().add(*offset) },
        }
    }

    /// The first value's byte, for writing.
    fn start_mut(&mut self) -> *mut u8 {
        match &mut self.storage {
            Storage::Lines(lines) => lines.as_mut_ptr().cast::<u8>(),
            // SAFETY: as in `start`.
            Storage::Zeroed { bytes, offset } => unsafe { bytes.as_mut_ptr().add(*offset) },
        }
    }
}

impl<T: Plain> Deref for LineAligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the storage holds at least `len` values of `T` from `start`, all written
        // (`written`) or zero (`zeroed`), and `start` begins a line, aligned for `T`.
        unsafe { std::slice::from_raw_parts(self.start().cast::<T>(), self.len) }
    }
}

impl<T: Plain> DerefMut for LineAligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.start_mut().cast::<T>(), self.len) }
    }
}

impl<T: Plain> fmt::Debug for LineAligned<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LineAligned")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_start_a_line_and_read_back_as_written() {
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 1000] {
            // SAFETY: the loops write every value.
            let floats = unsafe {
                LineAligned::<f32>::written(len, |values| {
                    for (i, v) in values.iter_mut().enumerate() {
                        *v = MaybeUninit::new(i as f32 * 0.5);
                    }
                })
            };
            assert_eq!(floats.as_ptr() as usize % LINE_BYTES, 0, "{len} f32");
            assert_eq!(floats.len(), len);
            assert!(floats.iter().enumerate().all(|(i, &v)| v == i as f32 * 0.5));
            // SAFETY: as above.
            let bits = unsafe {
                LineAligned::<u16>::written(len, |values| {
                    for (i, v) in values.iter_mut().enumerate() {
                        *v = MaybeUninit::new(i as u16);
                    }
                })
            };
            assert_eq!(bits.as_ptr() as usize % LINE_BYTES, 0, "{len} u16");
            assert!(bits.iter().enumerate().all(|(i, &v)| v == i as u16));
            let mut zeros = LineAligned::<f32>::zeroed(len);
            assert_eq!(zeros.as_ptr() as usize % LINE_BYTES, 0, "{len} zeros");
            assert!(zeros.iter().all(|&v| v == 0.0));
            zeros.iter_mut().for_each(|v| *v = 1.0);
            assert_eq!(zeros.iter().sum::<f32>(), len as f32);
            let ones = zeros.clone();
            assert_eq!(
                ones.as_ptr() as usize % LINE_BYTES,
                0,
                "a clone, {len} zeros"
            );
            assert_eq!(&ones[..], &zeros[..]);
            let copy = bits.clone();
            assert_eq!(&copy[..], &bits[..]);
            assert_eq!(copy.as_ptr() as usize % LINE_BYTES, 0, "a clone, {len} u16");
        }
    }
}
