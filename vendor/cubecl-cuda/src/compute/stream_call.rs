//! elmo-rs: a library call (cuBLAS) queued on the device thread as a kernel launch is, through
//! `ComputeClient::launch`: the server resolves its buffers to device pointers and calls it
//! with the stream of the launch, in order with the kernels before and after it. The caller
//! does not wait for the device thread (`ComputeClient::get_resource` does, once a buffer).

use cubecl_core::ir::{ElemType, UIntKind};
use cubecl_server::id::KernelId;
use cubecl_server::kernel::{CubeKernel, KernelDefinition, KernelMetadata};
use cudarc::driver::sys::CUstream;

/// What a [`StreamCall`] runs: the device pointers of the launch's buffers (in the order of its
/// `KernelArguments`, each at its binding's offset) and the stream to queue the work on. An
/// error leaves the buffers the launch declared written carrying it (a read of them fails).
pub type StreamCallFn = Box<dyn FnOnce(&[u64], CUstream) -> Result<(), String> + Send + Sync>;

/// A library call launched in place of a kernel (`ComputeClient::launch` with a
/// `CubeCount::Static(1, 1, 1)`): the CUDA server runs it instead of compiling anything.
pub struct StreamCall {
    call: StreamCallFn,
}

impl StreamCall {
    /// A launch that runs `call`.
    pub fn new(call: StreamCallFn) -> Self {
        Self { call }
    }

    /// The call, for the server.
    pub(crate) fn into_call(self) -> StreamCallFn {
        self.call
    }
}

impl KernelMetadata for StreamCall {
    fn id(&self) -> KernelId {
        KernelId::new::<Self>()
    }

    fn address_type(&self) -> ElemType {
        ElemType::UInt(UIntKind::U64)
    }
}

impl CubeKernel for StreamCall {
    fn define(&self) -> KernelDefinition {
        unreachable!("a StreamCall runs a library call; the CUDA server never compiles it")
    }
}
