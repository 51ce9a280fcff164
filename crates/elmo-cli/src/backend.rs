//! The one place that picks a burn backend: `--backend flex|ndarray|wgpu`.

use burn::tensor::{Device, DeviceKind};
use clap::ValueEnum;

/// Compute backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Pure-Rust CPU backend (default).
    Flex,
    /// ndarray CPU backend (deprecated upstream; kept as the CI reference backend).
    Ndarray,
    /// Any GPU through wgpu (Vulkan, Metal, DX12), or a software Vulkan driver.
    Wgpu,
}

impl Backend {
    /// The burn device of this backend (for flex, with the matmul tuned for ELMo's shapes).
    #[allow(deprecated)]
    pub fn device(self) -> Device {
        match self {
            Backend::Flex => {
                elmo_model::cpu_matmul::pack_small_batch_weights();
                Device::flex()
            }
            Backend::Ndarray => Device::ndarray(),
            Backend::Wgpu => Device::wgpu(DeviceKind::DefaultDevice),
        }
    }
}
