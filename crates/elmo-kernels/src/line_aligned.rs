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
#[derive(Clone)]
pub(crate) struct LineAligned<T: Plain> {
    /// The values' bytes, zero past the last value to the end of its line.
    lines: Vec<Line>,
    len: usize,
    values: PhantomData<T>,
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
            lines,
            len,
            values: PhantomData,
        }
    }

    /// `len` zeros: a buffer that a product's tiles store into (AMX's rows of 64 bytes, each
    /// within one line where the row stride is a multiple of a line).
    pub(crate) fn zeroed(len: usize) -> Self {
        // SAFETY: the fill writes every value.
        unsafe { Self::written(len, |values| values.fill(MaybeUninit::zeroed())) }
    }
}

impl<T: Plain> Deref for LineAligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the lines hold at least `len` values of `T`, all written (`written`).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Plain> DerefMut for LineAligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), self.len) }
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
            let copy = bits.clone();
            assert_eq!(&copy[..], &bits[..]);
            assert_eq!(copy.as_ptr() as usize % LINE_BYTES, 0, "a clone, {len} u16");
        }
    }
}
