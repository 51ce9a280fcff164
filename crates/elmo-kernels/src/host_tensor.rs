//! burn's flex CPU tensors as the host kernels read and write them in place (`host_product.rs`,
//! `host_lstm_cell.rs`): an `f32` tensor's values at its strides, and new tensors whose values the
//! host fills. Only with this crate's `flex` feature; without it no tensor is a [`HostTensor`].

use std::mem::MaybeUninit;

use burn::tensor::Tensor;

use crate::host_gemm::Strided;

/// An `f32` tensor of burn's flex backend outside autodiff, its values held (shared, not
/// copied) for the host kernels.
#[cfg(feature = "flex")]
pub(crate) struct HostTensor(burn::backend::flex::FlexTensor);

/// Without the `flex` feature none is ever made: [`HostTensor::of`] and [`HostTensor::take`]
/// return `None`, so the host kernels never run.
#[cfg(not(feature = "flex"))]
pub(crate) struct HostTensor(());

#[cfg(feature = "flex")]
impl HostTensor {
    /// `tensor`'s values where it is an `f32` flex tensor outside autodiff; `None` otherwise.
    pub(crate) fn of<const D: usize>(tensor: &Tensor<D>) -> Option<Self> {
        Self::take(tensor.clone())
    }

    /// [`Self::of`] taking `tensor`, so that where it held the only reference to its values,
    /// [`Self::values_mut`] writes them in place.
    pub(crate) fn take<const D: usize>(tensor: Tensor<D>) -> Option<Self> {
        use burn::backend::Flex;
        use burn::tensor::DType;
        if tensor.dtype() != DType::F32 {
            return None;
        }
        tensor.try_into_primitive::<Flex>().ok().map(Self)
    }

    /// A zero-filled `f32` tensor for the host to fill ([`Self::values_mut`]). From a `Vec<f32>`
    /// (taken over without a copy), where flex's own `zeros` copies its zeroed bytes once more
    /// into an allocation of a larger alignment.
    pub(crate) fn zeros<const D: usize>(shape: [usize; D]) -> Self {
        use burn::backend::flex::FlexTensor;
        use burn::tensor::TensorData;
        let n = shape.iter().product();
        Self(FlexTensor::from_data(TensorData::new(
            vec![0.0f32; n],
            shape,
        )))
    }

    /// A new `f32` tensor whose values `write` writes, row-major, without zeroing them first
    /// (a pass over memory that the products' outputs, written whole, do not need).
    ///
    /// # Safety
    /// `write` writes every value of the slice it is given (`shape`'s product of them).
    pub(crate) unsafe fn written<const D: usize>(
        shape: [usize; D],
        write: impl FnOnce(&mut [MaybeUninit<f32>]),
    ) -> Self {
        // SAFETY: `write` writes every value (the caller's promise).
        let [tensor] = unsafe { Self::written_each([shape], |[values]| write(values)) };
        tensor
    }

    /// [`Self::written`] for `N` new tensors that `write` writes together (a forward pass's
    /// records).
    ///
    /// # Safety
    /// `write` writes every value of each slice it is given.
    pub(crate) unsafe fn written_each<const D: usize, const N: usize>(
        shapes: [[usize; D]; N],
        write: impl FnOnce([&mut [MaybeUninit<f32>]; N]),
    ) -> [Self; N] {
        use burn::backend::flex::FlexTensor;
        use burn::tensor::TensorData;
        let lengths = shapes.map(|shape| shape.iter().product::<usize>());
        let mut values = lengths.map(Vec::<f32>::with_capacity);
        let mut slots = values.iter_mut().zip(lengths);
        write(std::array::from_fn(|_| {
            let (values, n) = slots.next().expect("a slot per tensor");
            &mut values.spare_capacity_mut()[..n]
        }));
        let mut shapes = shapes.into_iter().zip(lengths);
        values.map(|mut values| {
            let (shape, n) = shapes.next().expect("a shape per tensor");
            // SAFETY: the capacity is at least `n`, and `write` wrote every value (the
            // caller's promise).
            unsafe { values.set_len(n) };
            Self(FlexTensor::from_data(TensorData::new(values, shape)))
        })
    }

    /// The same values row-major and contiguous (a copy only where they are not).
    pub(crate) fn contiguous(self) -> Self {
        let layout = self.0.layout();
        match layout.is_contiguous() && layout.contiguous_offsets().is_some() {
            true => self,
            false => Self(self.0.to_contiguous()),
        }
    }

    /// The values in row-major order.
    ///
    /// # Panics
    /// When they are not contiguous (see [`Self::contiguous`]).
    pub(crate) fn values(&self) -> &[f32] {
        self.0
            .as_slice()
            .expect("a contiguous tensor (HostTensor::contiguous)")
    }

    /// The values in row-major order, to write (copied first where they are shared).
    ///
    /// # Panics
    /// When they are not contiguous.
    pub(crate) fn values_mut(&mut self) -> &mut [f32] {
        let (start, end) = (self.0.layout().contiguous_offsets())
            .expect("a contiguous tensor (HostTensor::contiguous)");
        &mut self.0.storage_mut::<f32>()[start..end]
    }

    /// A two-dimensional tensor as a strided view of its values (transposed views and row
    /// ranges as they lie); `None` for negative strides or another rank.
    pub(crate) fn strided(&self) -> Option<Strided<'_>> {
        let layout = self.0.layout();
        let strides = layout.strides();
        if strides.len() != 2 {
            return None;
        }
        let [row_stride, col_stride] = [strides[0], strides[1]].map(|s| usize::try_from(s).ok());
        Some(Strided {
            values: self.0.storage::<f32>(),
            offset: layout.start_offset(),
            row_stride: row_stride?,
            col_stride: col_stride?,
        })
    }

    /// The tensor, on the flex device.
    ///
    /// # Panics
    /// When it does not have `D` dimensions.
    pub(crate) fn into_tensor<const D: usize>(self) -> Tensor<D> {
        use burn::backend::Flex;
        assert_eq!(self.0.layout().num_dims(), D, "a tensor of {D} dimensions");
        Tensor::from_primitive::<Flex>(self.0)
    }
}

/// Without the `flex` feature no tensor is one, and no value of this type exists.
#[cfg(not(feature = "flex"))]
impl HostTensor {
    const NONE: &str = "no HostTensor exists without elmo-kernels' `flex` feature";

    pub(crate) fn of<const D: usize>(_tensor: &Tensor<D>) -> Option<Self> {
        None
    }

    pub(crate) fn take<const D: usize>(_tensor: Tensor<D>) -> Option<Self> {
        None
    }

    pub(crate) fn zeros<const D: usize>(_shape: [usize; D]) -> Self {
        unreachable!("{}", Self::NONE)
    }

    /// # Safety
    /// As with the `flex` feature.
    pub(crate) unsafe fn written<const D: usize>(
        _shape: [usize; D],
        _write: impl FnOnce(&mut [MaybeUninit<f32>]),
    ) -> Self {
        unreachable!("{}", Self::NONE)
    }

    /// # Safety
    /// As with the `flex` feature.
    pub(crate) unsafe fn written_each<const D: usize, const N: usize>(
        _shapes: [[usize; D]; N],
        _write: impl FnOnce([&mut [MaybeUninit<f32>]; N]),
    ) -> [Self; N] {
        unreachable!("{}", Self::NONE)
    }

    pub(crate) fn contiguous(self) -> Self {
        self
    }

    pub(crate) fn values(&self) -> &[f32] {
        unreachable!("{}", Self::NONE)
    }

    pub(crate) fn values_mut(&mut self) -> &mut [f32] {
        unreachable!("{}", Self::NONE)
    }

    pub(crate) fn strided(&self) -> Option<Strided<'_>> {
        unreachable!("{}", Self::NONE)
    }

    pub(crate) fn into_tensor<const D: usize>(self) -> Tensor<D> {
        unreachable!("{}", Self::NONE)
    }
}
