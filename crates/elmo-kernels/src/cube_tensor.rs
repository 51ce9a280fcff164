//! Launching custom CubeCL kernels on burn tensors: a tensor's `CubeTensor` primitive, contiguous
//! inputs, in-place outputs, and one kernel unit per output element. Used by the fused LSTM cell
//! (`cube_lstm_cell.rs`), Adagrad and the gradient norm (with the `cubecl` feature only).
//!
//! burn 0.22 gives the primitive through `Tensor::try_into_primitive` (its `extension` feature);
//! with burn's `fusion` feature on, or on another backend, there is none, and callers keep their
//! composed burn operations.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::cubecl;
use burn::cubecl::client::Client;
use burn::cubecl::ir::ElemType;
use burn::cubecl::prelude::{CubeCount, CubeDim};
use burn::tensor::{DType, Device, Int, Tensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{CubeBackend, tensor::CubeTensor};

/// A tensor's CubeCL primitive, `None` on another backend (or with burn's `fusion`).
pub fn cube_primitive<const D: usize>(tensor: &Tensor<D>) -> Option<CubeTensor> {
    tensor
        .clone()
        .inner()
        .try_into_primitive::<CubeBackend>()
        .ok()
}

/// A kernel input: the tensor's primitive, made contiguous (a copy only when it is not).
///
/// # Panics
/// If `tensor` is not on a CubeCL device (check `KernelSettings::fused_for` first).
pub fn kernel_input<const D: usize>(tensor: &Tensor<D>) -> CubeTensor {
    into_contiguous(
        cube_primitive(tensor).expect("a CubeCL tensor (see `KernelSettings::fused_for`)"),
    )
}

/// [`kernel_input`] of an integer tensor (indices): its primitive, contiguous, with the
/// element type a kernel's `#[define]` takes.
///
/// # Panics
/// As [`kernel_input`].
pub fn int_kernel_input<const D: usize>(tensor: &Tensor<D, Int>) -> (CubeTensor, ElemType) {
    let primitive = tensor
        .clone()
        .inner()
        .try_into_primitive::<CubeBackend>()
        .expect("a CubeCL tensor (see `KernelSettings::fused_for`)");
    let dtype = dtype_to_storage_type(primitive.dtype);
    (into_contiguous(primitive), dtype)
}

/// A kernel input that the kernel reads at its strides, row by row: the tensor's primitive as
/// it is where its last dimension is contiguous and its rows lie in row-major order, padded or
/// not (CubeCL's CUDA runtime pads each row of a fresh tensor to a pitch of up to 512 bytes:
/// a matmul's output `[·, 4,800]` has rows of 4,864), a contiguous copy otherwise. For the
/// large inputs that a kernel reads once per time step (a layer's input contributions of all
/// steps, a step's partial products), where [`kernel_input`] would copy a padded tensor at
/// every launch.
///
/// # Panics
/// As [`kernel_input`].
pub fn kernel_rows_input<const D: usize>(tensor: &Tensor<D>) -> CubeTensor {
    let primitive =
        cube_primitive(tensor).expect("a CubeCL tensor (see `KernelSettings::fused_for`)");
    if rows_in_order(&primitive) {
        primitive
    } else {
        into_contiguous(primitive)
    }
}

/// Whether `tensor`'s last dimension is contiguous and each outer dimension steps over at least
/// the whole of the next one (row-major, rows possibly padded), in a plain (not tiled) buffer.
fn rows_in_order(tensor: &CubeTensor) -> bool {
    let (shape, strides) = (tensor.meta.shape(), tensor.meta.strides());
    let rank = shape.len();
    !tensor.meta.is_tiled()
        && rank >= 1
        && strides[rank - 1] == 1
        && (0..rank - 1).all(|i| strides[i] >= strides[i + 1] * shape[i + 1])
}

/// `tensor` with a contiguous layout, as a burn tensor: made once before a loop of kernels that
/// read it, since `kernel_input` would copy a strided tensor at every launch. Unchanged when it
/// is contiguous already or not on a CubeCL device.
pub fn contiguous<const D: usize>(tensor: Tensor<D>) -> Tensor<D> {
    match cube_primitive(&tensor) {
        Some(primitive) if !primitive.is_contiguous() => {
            Tensor::from_primitive::<CubeBackend>(into_contiguous(primitive))
        }
        _ => tensor,
    }
}

/// An uninitialised tensor of `shape` laid out without padding, for a kernel to write in place
/// (`kernel_in_place`). `Tensor::empty` is not one on CUDA: CubeCL's CUDA runtime pads each row
/// of a fresh tensor of rank two or more to a pitch of up to 512 bytes (`PitchedMemoryLayoutPolicy`,
/// e.g. 1,200 `f32`s to 1,280) where a row's bytes are not a multiple, as `cuMemAllocPitch`
/// would. A one-dimensional tensor has no rows to pad, and reshaping it only sets strides.
pub fn empty_buffer<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    empty_buffer_of(shape, device, DType::F32)
}

/// [`empty_buffer`] of elements of `dtype` (a 16-bit left factor of a product that a kernel
/// writes in that type).
pub(crate) fn empty_buffer_of<const D: usize>(
    shape: [usize; D],
    device: &Device,
    dtype: DType,
) -> Tensor<D> {
    Tensor::<1>::empty([shape.iter().product::<usize>()], (device, dtype)).reshape(shape)
}

/// The element type of `tensor` as a kernel's `#[define]` takes it.
pub(crate) fn element_type<const D: usize>(tensor: &Tensor<D>) -> ElemType {
    dtype_to_storage_type(tensor.dtype())
}

/// The input of an optional kernel argument: `tensor`'s, or where there is none (and the kernel,
/// told so by a comptime flag, reads nothing) `filler`'s, since every argument needs a tensor.
///
/// # Panics
/// As [`kernel_input`].
pub fn kernel_input_or<const D: usize, const E: usize>(
    tensor: Option<&Tensor<D>>,
    filler: &Tensor<E>,
) -> CubeTensor {
    match tensor {
        Some(tensor) => kernel_input(tensor),
        None => kernel_input(filler),
    }
}

/// The primitive of a buffer that a kernel writes in place: it must be contiguous (made by
/// [`empty_buffer`]), since a contiguous copy would lose the writes.
///
/// # Panics
/// If `tensor` is not on a CubeCL device or not contiguous.
pub fn kernel_in_place<const D: usize>(tensor: &Tensor<D>) -> CubeTensor {
    let primitive =
        cube_primitive(tensor).expect("a CubeCL tensor (see `KernelSettings::fused_for`)");
    assert!(
        primitive.is_contiguous(),
        "a buffer written in place by a kernel must be contiguous"
    );
    primitive
}

/// The cubes and units per cube of a kernel with one unit per value of `n`.
pub fn elementwise_grid(client: &Client, n: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new(client, n);
    (cubecl::calculate_cube_count_elemwise(client, n, dim), dim)
}

/// A fresh output tensor and what launching an elementwise kernel over it takes: one unit per
/// element.
pub struct ElementwiseOutput<const D: usize> {
    /// The output, returned once the kernel is launched.
    pub tensor: Tensor<D>,
    /// Its primitive (the kernel argument).
    pub primitive: CubeTensor,
    /// The device's compute client.
    pub client: Client,
    /// Cubes to launch.
    pub count: CubeCount,
    /// Units per cube.
    pub dim: CubeDim,
    /// The element type (the kernels' `#[define(F)]`).
    pub dtype: ElemType,
}

impl<const D: usize> ElementwiseOutput<D> {
    /// An uninitialised `f32` output of `shape` on `device`.
    ///
    /// # Panics
    /// If `device` is not a CubeCL device.
    pub fn new(shape: [usize; D], device: &Device) -> Self {
        Self::of(shape, device, DType::F32)
    }

    /// An uninitialised output of `shape` and `dtype` on `device`.
    ///
    /// # Panics
    /// If `device` is not a CubeCL device.
    pub fn of(shape: [usize; D], device: &Device, dtype: DType) -> Self {
        let tensor = empty_buffer_of(shape, device, dtype);
        let primitive = kernel_in_place(&tensor);
        let client = primitive.client.clone();
        let (count, dim) = elementwise_grid(&client, primitive.meta.shape().num_elements());
        Self {
            count,
            dim,
            dtype: dtype_to_storage_type(primitive.dtype),
            client,
            primitive,
            tensor,
        }
    }
}
