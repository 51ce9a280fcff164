//! Matrix products through NVIDIA's cuBLAS on a CUDA device (`cublasGemmStridedBatchedEx`, the
//! library PyTorch's peer runs its products with): `f32` operands in `f32` arithmetic
//! (`CUBLAS_COMPUTE_32F` without TF32, PyTorch's default), 16-bit operands on the tensor cores with
//! `f32` accumulation and an `f32` result. cuBLAS is loaded at run time (cudarc's dynamic loading:
//! `libcublas.so.*`, a CUDA toolkit's or the `nvidia-cublas` wheel's); where it is missing, or
//! a tensor is not a CUDA one, the caller's cubek kernel runs instead.
//!
//! The call reads the operands and writes a fresh output in place through their device pointers,
//! queued on CubeCL's device thread as a kernel launch is (`StreamCall` of the patched
//! cubecl-cuda of `vendor/`) and run there on the launch's stream: ordered with CubeCL's kernels
//! before and after it without a synchronisation, and without the calling thread waiting for
//! the device thread.

use std::any::TypeId;
use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use burn::tensor::{DType, FloatDType, Tensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::cubecl::ir::attributes::BufferIOAttr;
use burn_cubecl::cubecl::prelude::CubeCount;
use burn_cubecl::cubecl::server::KernelArguments;
use burn_cubecl::tensor::CubeTensor;
use cubecl_cuda::{CudaServer, StreamCall};
use cudarc::cublas::sys as blas;
use cudarc::driver::sys as driver;

use crate::cube_tensor::cube_primitive;
use crate::gemm_plan::{GemmPlan, StridedLayout, gemm_plan};
use crate::{contiguous, to_half};

/// Whether cuBLAS loads on this machine (checked once).
pub fn cublas_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to open the library by its names.
    *PRESENT.get_or_init(|| unsafe { blas::is_culib_present() })
}

/// The products this process queued for cuBLAS, and those that cuBLAS did not run, with the
/// last failure: for a program to say whether cuBLAS ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CublasStats {
    /// Products queued for cuBLAS.
    pub calls: u64,
    /// Products on CUDA tensors that cuBLAS did not run: a layout it does not read (the
    /// caller's cubek kernel ran instead), or an error of cuBLAS on the device thread (the
    /// output carries it; counted in `calls` too).
    pub failures: u64,
    /// Why the last of those did not run.
    pub last_failure: Option<String>,
}

static CALLS: AtomicU64 = AtomicU64::new(0);
static FAILURES: AtomicU64 = AtomicU64::new(0);
static LAST_FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// [`CublasStats`] so far.
pub fn cublas_stats() -> CublasStats {
    CublasStats {
        calls: CALLS.load(Ordering::Relaxed),
        failures: FAILURES.load(Ordering::Relaxed),
        last_failure: LAST_FAILURE.lock().map_or(None, |last| last.clone()),
    }
}

/// Counts a product on CUDA tensors that cuBLAS did not run, and returns its error.
fn failed(error: String) -> String {
    FAILURES.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut last) = LAST_FAILURE.lock() {
        *last = Some(error.clone());
    }
    error
}

/// Whether cuBLAS runs products of `tensor`: it loads and `tensor` is on a CUDA device.
pub fn cublas_runs_on<const D: usize>(tensor: &Tensor<D>) -> bool {
    cublas_available()
        && cube_primitive(tensor)
            .is_some_and(|p| p.client.service_id().service == TypeId::of::<CudaServer>())
}

/// `lhs · rhs` through cuBLAS, its operands in `half` where given (cast first unless they are in
/// it), the result in `f32`. An error (as text) where it cannot be queued: cuBLAS missing, not
/// CUDA tensors, under autodiff, another element type, a layout cuBLAS does not read even after
/// a contiguous copy. cuBLAS itself runs later, on the device thread: an error of it there is
/// counted ([`cublas_stats`]) and left on the output, whose read then fails with it.
///
/// # Shapes
/// - lhs: `[.., M, K]`; rhs: `[.., K, N]` (batch dimensions equal, or all 1); output:
///   `[.., M, N]`
pub fn cublas_product<const D: usize>(
    lhs: Tensor<D>,
    rhs: Tensor<D>,
    half: Option<FloatDType>,
) -> Result<Tensor<D>, String> {
    if lhs.device().is_autodiff() || rhs.device().is_autodiff() {
        return Err("autodiff tensors".into());
    }
    if !cublas_available() {
        return Err("cuBLAS (libcublas) not found".into());
    }
    let (lhs, rhs) = (to_half(lhs, half), to_half(rhs, half));
    let (Some(left), Some(right)) = (cube_primitive(&lhs), cube_primitive(&rhs)) else {
        return Err("not CubeCL tensors".into());
    };
    let data_type = blas_type(left.dtype)?;
    if right.dtype != left.dtype {
        return Err(format!(
            "operands in {:?} and {:?}",
            left.dtype, right.dtype
        ));
    }
    let [l_shape, r_shape] = [left.meta.shape().to_vec(), right.meta.shape().to_vec()];
    let mut out_shape = [0; D];
    for i in 0..D - 2 {
        out_shape[i] = l_shape[i].max(r_shape[i]);
    }
    out_shape[D - 2] = l_shape[D - 2];
    out_shape[D - 1] = r_shape[D - 1];
    let out = Tensor::<D>::empty(out_shape, &lhs.device());
    let Some(output) = cube_primitive(&out) else {
        return Err("not a CubeCL output".into());
    };
    let plan = match plan_for(&left, &right, &output) {
        Some(plan) => Some((plan, left, right)),
        None => {
            let (lhs, rhs) = (contiguous(lhs), contiguous(rhs));
            let (left, right) = (cube_primitive(&lhs), cube_primitive(&rhs));
            let (left, right) = (
                left.expect("a CubeCL tensor"),
                right.expect("a CubeCL tensor"),
            );
            plan_for(&left, &right, &output).map(|plan| (plan, left, right))
        }
    };
    let Some((plan, left, right)) = plan else {
        return Err(failed(format!(
            "no cuBLAS call for {l_shape:?}·{r_shape:?} at these strides"
        )));
    };
    launch(&plan, &left, &right, &output, data_type);
    CALLS.fetch_add(1, Ordering::Relaxed);
    Ok(Tensor::from_primitive::<CubeBackend>(output))
}

/// The cuBLAS call for these tensors' shapes and strides, where their layouts allow one.
fn plan_for(left: &CubeTensor, right: &CubeTensor, out: &CubeTensor) -> Option<GemmPlan> {
    if left.meta.is_tiled() || right.meta.is_tiled() || out.meta.is_tiled() {
        return None;
    }
    let layout =
        |tensor: &CubeTensor| (tensor.meta.shape().to_vec(), tensor.meta.strides().to_vec());
    let [(ls, lt), (rs, rt), (os, ot)] = [layout(left), layout(right), layout(out)];
    gemm_plan(
        StridedLayout {
            shape: &ls,
            strides: &lt,
        },
        StridedLayout {
            shape: &rs,
            strides: &rt,
        },
        StridedLayout {
            shape: &os,
            strides: &ot,
        },
    )
}

/// cuBLAS's type for an operand of `dtype`.
fn blas_type(dtype: DType) -> Result<blas::cudaDataType, String> {
    match dtype {
        DType::F32 => Ok(blas::cudaDataType::CUDA_R_32F),
        DType::F16 => Ok(blas::cudaDataType::CUDA_R_16F),
        DType::BF16 => Ok(blas::cudaDataType::CUDA_R_16BF),
        other => Err(format!("no cuBLAS product in {other:?}")),
    }
}

/// Queues `plan` on the device thread as a launch (`StreamCall` of the patched cubecl-cuda):
/// the server resolves the three buffers to device pointers and runs the call on the stream of
/// the launch, in order with CubeCL's kernels, while this thread goes on. A failure of cuBLAS
/// itself is then known on the device thread only: it is counted ([`cublas_stats`]) and left
/// on the output, whose read fails with it.
fn launch(
    plan: &GemmPlan,
    left: &CubeTensor,
    right: &CubeTensor,
    out: &CubeTensor,
    data_type: blas::cudaDataType,
) {
    let plan = *plan;
    let call = move |pointers: &[u64], stream: driver::CUstream| {
        let &[c, b, a] = pointers else {
            return Err(failed(format!("{} buffers for a product", pointers.len())));
        };
        // SAFETY: the pointers are the live buffers of the launch (the server resolved them and
        // holds them until the launch is queued; the stream orders any later reuse of their
        // memory after it); the plan keeps every read and write within their shapes and
        // strides (`gemm_plan`); `handle_for` makes the stream's context current.
        unsafe { gemm(&plan, [a, b, c], data_type, stream) }.map_err(failed)
    };
    let arguments = KernelArguments::new()
        .with_buffer_io(out.handle.clone().binding(), BufferIOAttr::WriteOnly)
        .with_buffer_io(left.handle.clone().binding(), BufferIOAttr::ReadOnly)
        .with_buffer_io(right.handle.clone().binding(), BufferIOAttr::ReadOnly);
    out.client.launch(
        Box::new(StreamCall::new(Box::new(call))),
        CubeCount::Static(1, 1, 1),
        arguments,
    );
}

/// `c = a · b` as `plan` says, queued on `stream`.
///
/// # Safety
/// `a`, `b` and `c` are device pointers of buffers that `plan`'s reads and writes stay within,
/// live until the call is queued; `stream` is a live CUDA stream.
unsafe fn gemm(
    plan: &GemmPlan,
    [a, b, c]: [u64; 3],
    data_type: blas::cudaDataType,
    stream: driver::CUstream,
) -> Result<(), String> {
    let operation = |transposed: bool| match transposed {
        true => blas::cublasOperation_t::CUBLAS_OP_T,
        false => blas::cublasOperation_t::CUBLAS_OP_N,
    };
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: as the caller promises.
    let status = unsafe {
        let handle = handle_for(stream)?;
        check(blas::cublasSetStream_v2(
            handle,
            stream as blas::cudaStream_t,
        ))?;
        blas::cublasGemmStridedBatchedEx(
            handle,
            operation(plan.transpose_a),
            operation(plan.transpose_b),
            plan.m,
            plan.n,
            plan.k,
            (&alpha as *const f32).cast::<c_void>(),
            a as *const c_void,
            data_type,
            plan.lda,
            plan.stride_a,
            b as *const c_void,
            data_type,
            plan.ldb,
            plan.stride_b,
            (&beta as *const f32).cast::<c_void>(),
            c as *mut c_void,
            blas::cudaDataType::CUDA_R_32F,
            plan.ldc,
            plan.stride_c,
            plan.batch,
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    };
    check(status)
}

fn check(status: blas::cublasStatus_t) -> Result<(), String> {
    match status {
        blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        other => Err(format!("cuBLAS: {other:?}")),
    }
}

thread_local! {
    /// This thread's cuBLAS handle per CUDA context (a handle belongs to the context current at
    /// its creation). Kept for the thread's life: destroying one at exit could outlive the
    /// context.
    static HANDLES: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// This thread's cuBLAS handle for `stream`'s context, made current on this thread (CubeCL may
/// have set it on another).
///
/// # Safety
/// `stream` is a live CUDA stream.
unsafe fn handle_for(stream: driver::CUstream) -> Result<blas::cublasHandle_t, String> {
    let mut context: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: the caller's stream; `context` is written on success.
    unsafe {
        driver::cuStreamGetCtx(stream, &mut context)
            .result()
            .map_err(|error| format!("cuStreamGetCtx: {error:?}"))?;
        driver::cuCtxSetCurrent(context)
            .result()
            .map_err(|error| format!("cuCtxSetCurrent: {error:?}"))?;
    }
    HANDLES.with(|handles| {
        let mut handles = handles.borrow_mut();
        if let Some(&(_, handle)) = handles.iter().find(|(c, _)| *c == context as usize) {
            return Ok(handle as blas::cublasHandle_t);
        }
        let mut handle: blas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: the context is current; `handle` is written on success.
        check(unsafe { blas::cublasCreate_v2(&mut handle) })?;
        handles.push((context as usize, handle as usize));
        Ok(handle)
    })
}
