//! The tensor operations under ELMo's LSTMP cell, char CNN, softmax and optimizer, in the form
//! that suits each device: custom CubeCL kernels (fused LSTM cells, row reductions, Adagrad, the
//! gradient norm, a named matmul) and split-K products on a CubeCL device with this crate's
//! `cubecl` feature, the large products through NVIDIA's cuBLAS on a CUDA device with its
//! `cublas` feature, the LSTMP inference recurrence as one host loop on the CPU (packed-weight
//! products, a vectorised cell pass), burn's composed operations everywhere else, with the same
//! results.
//!
//! Which kernels run is a typed [`KernelSettings`] value that the caller passes; this crate picks
//! no backend and reads no environment variable.

mod adagrad_step;
mod cube_lstm_cell;
mod cube_lstm_inference;
#[cfg(feature = "cubecl")]
mod cube_matmul;
mod cube_reduce;
mod cube_softmax;
#[cfg(feature = "cubecl")]
mod cube_tensor;
#[cfg(feature = "cublas")]
mod cuda_blas;
mod dropout_mask;
mod gate_activation;
mod gemm_plan;
mod gradient_scale;
mod host_amx;
mod host_bf16;
mod host_bf16_dot;
mod host_bf16_product;
mod host_bf16_unit;
mod host_gemm;
mod host_lstm;
mod host_lstm_cell;
mod host_product;
mod host_softmax;
mod host_tensor;
mod host_weight;
mod host_window_max;
mod index_add;
mod large_product;
mod line_aligned;
mod settings;
#[cfg(feature = "cubecl")]
mod shared_tree;
mod split_product;
mod squared_norm;
mod window_slots;

pub use adagrad_step::{AdagradStep, fused_adagrad_step, host_adagrad_rows, host_adagrad_step};
pub use cube_lstm_cell::{
    CellBackwardOutput, CellKernels, CellRecords, InputContributions, cell_backward, cell_forward,
    hidden_backward, hidden_forward,
};
pub use cube_lstm_inference::{InferenceBuffers, InferenceStep, inference_cell, inference_hidden};
#[cfg(feature = "cubecl")]
pub use cube_matmul::{MatmulKernel, matmul_with};
pub use cube_reduce::{RowReduction, reduce_rows, sum_columns};
pub use cube_softmax::cube_softmax_rows;
#[cfg(feature = "cubecl")]
pub use cube_tensor::{contiguous, empty_buffer};
#[cfg(feature = "cublas")]
pub use cuda_blas::{CublasStats, cublas_available, cublas_product, cublas_runs_on, cublas_stats};
pub use dropout_mask::{MaskKey, dropout_mask};
pub use gate_activation::{EXP_LIMIT, GateActivation};
pub use gemm_plan::{GemmPlan, StridedLayout, gemm_plan};
pub use gradient_scale::{GradientScaling, device_gradient_scale};
pub use host_bf16::Bf16Matrix;
pub use host_bf16_product::{matmul_bf16, matmul_bf16_parallel};
pub use host_bf16_unit::{Bf16Unit, host_bf16_products};
pub use host_gemm::{
    HostInstructions, PackedMatrix, host_threads, matmul_packed, matmul_packed_parallel,
};
pub use host_lstm::{HostLstm, HostLstmOutput, HostLstmWeights};
pub use host_lstm_cell::{
    HostRecords, HostStepGradients, HostSteps, host_backward_steps, host_forward_steps,
};
pub use host_product::bf16_product;
pub use host_softmax::{SoftmaxRows, host_softmax_rows};
pub use host_window_max::{
    HostWindowGradients, HostWindowMax, host_window_max, host_window_max_backward,
};
pub use index_add::{embedding, sum_groups, sum_row_groups};
#[cfg(feature = "cubecl")]
pub use large_product::kernel_for_shape;
pub use large_product::{half_product, product, to_half};
pub use settings::{
    CPU_PIECE_BYTES, DEFAULT_BUFFER_BYTES, DEFAULT_CUBE_ENCODER_CHUNK_TOKENS,
    DEFAULT_VENDOR_BLAS_STEP_MIN, KernelSettings, Precision, ProductMode, cube_device,
    largest_buffer_bytes, on_cube_device,
};
pub use split_product::{
    SplitLayout, SplitWeight, slices_for, slices_for_grid, slices_over_rows, slices_when,
    transposed_product,
};
pub use squared_norm::{SquaredNorm, fused_squared_norm};
pub use window_slots::window_slot_gradients;

/// `tensor` unchanged: without the `cubecl` feature no kernel reads a tensor's layout.
#[cfg(not(feature = "cubecl"))]
pub fn contiguous<const D: usize>(tensor: burn::tensor::Tensor<D>) -> burn::tensor::Tensor<D> {
    tensor
}

/// `Tensor::empty`: without the `cubecl` feature no kernel writes a buffer in place.
#[cfg(not(feature = "cubecl"))]
pub fn empty_buffer<const D: usize>(
    shape: [usize; D],
    device: &burn::tensor::Device,
) -> burn::tensor::Tensor<D> {
    burn::tensor::Tensor::empty(shape, device)
}
