//! The one place that picks a burn backend: `--backend flex|ndarray|wgpu|vulkan`, and the
//! precision of its products (`--precision f32|mixed`).

use burn::tensor::{Device, DeviceKind};
use clap::ValueEnum;
use elmo_model::Precision;

/// Compute backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Pure-Rust CPU backend (default).
    Flex,
    /// ndarray CPU backend (deprecated upstream; kept as the CI reference backend).
    Ndarray,
    /// Any GPU through wgpu (Vulkan, Metal, DX12), or a software Vulkan driver.
    Wgpu,
    /// A GPU through wgpu pinned to Vulkan, kernels compiled to SPIR-V.
    Vulkan,
}

impl Backend {
    /// Makes this backend burn's default device for the whole process (`BURN_DEVICE`).
    ///
    /// Some burn code places tensors on `Device::default()` instead of a device it is given:
    /// burn-optim loads optimizer state (`elmo train --resume`) there, and without this the
    /// default is wgpu whenever it is compiled in, so a CPU run would start a GPU or software
    /// Vulkan driver and move its state through it. Must run before any other thread starts.
    pub fn pin_as_default(self) {
        let name = self.name();
        // SAFETY: called at the start of `main`, before the process has spawned any thread, so
        // nothing reads the environment concurrently.
        unsafe { std::env::set_var("BURN_DEVICE", name) };
    }

    /// The burn device of this backend (for flex, with the matmul tuned for ELMo's shapes).
    ///
    /// # Errors
    /// When this build of `elmo` leaves the backend's feature out.
    #[allow(deprecated)]
    pub fn device(self) -> anyhow::Result<Device> {
        match self {
            #[cfg(feature = "flex")]
            Backend::Flex => {
                elmo_model::cpu_matmul::pack_small_batch_weights();
                Ok(Device::flex())
            }
            #[cfg(feature = "ndarray")]
            Backend::Ndarray => Ok(Device::ndarray()),
            #[cfg(feature = "wgpu")]
            Backend::Wgpu => Ok(Device::wgpu(DeviceKind::DefaultDevice)),
            #[cfg(feature = "vulkan")]
            Backend::Vulkan => Ok(Device::vulkan(DeviceKind::DefaultDevice)),
            #[allow(unreachable_patterns)]
            other => anyhow::bail!(
                "this build of elmo has no {} backend (build it with `--features {}`)",
                other.name(),
                other.name()
            ),
        }
    }

    /// Whether it runs on a GPU (or a software Vulkan driver): wgpu or vulkan.
    pub fn is_gpu(self) -> bool {
        matches!(self, Backend::Wgpu | Backend::Vulkan)
    }

    /// The backend's name, as `--backend` and the Cargo feature spell it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Flex => "flex",
            Backend::Ndarray => "ndarray",
            Backend::Wgpu => "wgpu",
            Backend::Vulkan => "vulkan",
        }
    }
}

/// The precision of the large products (`--precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// `f32` throughout (AllenNLP's values).
    F32,
    /// The products' operands in 16-bit floats; results, LSTM state, weights and optimizer
    /// state in `f32`; training scales the loss (GPU only).
    Mixed,
}

impl PrecisionArg {
    /// Refuses `mixed` on a CPU backend, where 16-bit products buy nothing.
    ///
    /// # Errors
    /// `mixed` with `--backend flex` or `ndarray`.
    pub fn check_backend(self, backend: Backend) -> anyhow::Result<()> {
        if self == Self::Mixed && !backend.is_gpu() {
            anyhow::bail!("--precision mixed runs on a GPU backend (--backend wgpu or vulkan)");
        }
        Ok(())
    }
}

impl From<PrecisionArg> for Precision {
    fn from(arg: PrecisionArg) -> Self {
        match arg {
            PrecisionArg::F32 => Self::F32,
            PrecisionArg::Mixed => Self::Mixed,
        }
    }
}
