//! The one place that picks a burn backend: `--backend flex|ndarray|wgpu|vulkan|cuda`, and the
//! precision of its products (`--precision f32|mixed`).

#[cfg(feature = "wgpu")]
use burn::tensor::DeviceKind;
use burn::tensor::{Device, Tensor};
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
    /// An NVIDIA GPU through CUDA (kernels compiled by NVRTC at run time).
    Cuda,
}

impl Backend {
    /// Makes this backend burn's default device for the whole process (`BURN_DEVICE`).
    ///
    /// Some burn code reads `Device::default()` instead of a device it is given (burn-optim's
    /// `load_record` asks for it on `elmo train --resume`, though elmo-train builds the state on
    /// the run's own device; burn's data loaders place batches there unless told), and without
    /// this the default is wgpu whenever it is compiled in, or an unknown `BURN_DEVICE` in the
    /// user's environment panics there. Must run before any other thread starts.
    pub fn pin_as_default(self) {
        let name = self.name();
        // SAFETY: called at the start of `main`, before the process has spawned any thread, so
        // nothing reads the environment concurrently.
        unsafe { std::env::set_var("BURN_DEVICE", name) };
    }

    /// Makes GPU `index` (0-based) the one this process's GPU backend opens, and so burn's
    /// default device too: for `cuda` the `index`-th device that `CUDA_VISIBLE_DEVICES` leaves
    /// visible (all devices when it is unset) becomes the only visible one; for `wgpu` and
    /// `vulkan` the `index`-th discrete GPU is chosen (cubecl's `CUBECL_WGPU_DEFAULT_DEVICE`).
    /// Must run before any other thread starts.
    ///
    /// # Errors
    /// A CPU backend, or an index past the devices `CUDA_VISIBLE_DEVICES` lists. (An index past
    /// the machine's GPUs is found when the device starts.)
    pub fn pin_gpu(self, index: usize) -> anyhow::Result<()> {
        let (variable, value) = match self {
            Backend::Cuda => (
                "CUDA_VISIBLE_DEVICES",
                visible_cuda_device(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(), index)?,
            ),
            Backend::Wgpu | Backend::Vulkan => (
                "CUBECL_WGPU_DEFAULT_DEVICE",
                format!("DiscreteGpu({index})"),
            ),
            Backend::Flex | Backend::Ndarray => anyhow::bail!(
                "--gpu {index} picks the GPU of --backend wgpu, vulkan or cuda; this command runs \
                 on {}",
                self.name()
            ),
        };
        // SAFETY: as in `pin_as_default`, before the process has spawned any thread.
        unsafe { std::env::set_var(variable, value) };
        Ok(())
    }

    /// The devices of GPUs `indices` of this GPU backend (`elmo train --gpus`), each checked
    /// with one small operation: for `cuda` the N-th device that `CUDA_VISIBLE_DEVICES` leaves
    /// visible, for `wgpu` and `vulkan` the N-th discrete GPU.
    ///
    /// # Errors
    /// No index, a CPU backend, a backend this build leaves out, or a GPU that cannot start
    /// (named by its index, with what the runtime said).
    pub fn gpu_devices(self, indices: &[usize]) -> anyhow::Result<Vec<Device>> {
        if indices.is_empty() {
            anyhow::bail!("--gpus needs at least one GPU index");
        }
        if !self.is_gpu() {
            anyhow::bail!(
                "--gpus picks GPUs of --backend wgpu, vulkan or cuda; this command runs on {}",
                self.name()
            );
        }
        (indices.iter())
            .map(|&index| {
                let device = self.gpu_device(index)?;
                probe(&device).map_err(|reason| {
                    anyhow::anyhow!(
                        "--gpus: GPU {index} of --backend {} could not start: {reason}",
                        self.name()
                    )
                })?;
                Ok(device)
            })
            .collect()
    }

    /// GPU `index` of this backend, unprobed.
    #[allow(unused_variables)]
    fn gpu_device(self, index: usize) -> anyhow::Result<Device> {
        match self {
            #[cfg(feature = "wgpu")]
            Backend::Wgpu => Ok(Device::wgpu(DeviceKind::DiscreteGpu(index))),
            #[cfg(feature = "vulkan")]
            Backend::Vulkan => Ok(Device::vulkan(DeviceKind::DiscreteGpu(index))),
            #[cfg(feature = "cuda-runtime")]
            Backend::Cuda => {
                crate::kernel_cache::cache_compiled_kernels();
                Ok(Device::cuda(index))
            }
            _ => self.unprobed_device(),
        }
    }

    /// The burn device of this backend (for flex, with the matmul tuned for ELMo's shapes); a
    /// GPU backend's has run one small operation.
    ///
    /// # Errors
    /// When this build of `elmo` leaves the backend's feature out, or a GPU backend cannot start
    /// (no driver, library or device: what the runtime said).
    pub fn device(self) -> anyhow::Result<Device> {
        let device = self.unprobed_device()?;
        if self.is_gpu() {
            probe(&device).map_err(|reason| {
                anyhow::anyhow!("--backend {} could not start: {reason}", self.name())
            })?;
        }
        Ok(device)
    }

    #[allow(deprecated)]
    fn unprobed_device(self) -> anyhow::Result<Device> {
        match self {
            #[cfg(feature = "flex")]
            Backend::Flex => {
                elmo_model::cpu_matmul::pack_small_batch_weights();
                elmo_model::cpu_memory::keep_large_allocations();
                Ok(Device::flex())
            }
            #[cfg(feature = "ndarray")]
            Backend::Ndarray => {
                elmo_model::cpu_memory::keep_large_allocations();
                Ok(Device::ndarray())
            }
            #[cfg(feature = "wgpu")]
            Backend::Wgpu => Ok(Device::wgpu(DeviceKind::DefaultDevice)),
            #[cfg(feature = "vulkan")]
            Backend::Vulkan => Ok(Device::vulkan(DeviceKind::DefaultDevice)),
            #[cfg(feature = "cuda-runtime")]
            Backend::Cuda => {
                crate::kernel_cache::cache_compiled_kernels();
                Ok(Device::cuda(0))
            }
            #[allow(unreachable_patterns)]
            other => anyhow::bail!(
                "this build of elmo has no {} backend (build it with `--features {}`)",
                other.name(),
                other.name()
            ),
        }
    }

    /// The backend of AllenNLP's `--cuda-device N` (`cuda_device=N`): -1 and below the CPU
    /// (`flex`), N ≥ 0 a GPU through `cuda` in a build with that feature, else `wgpu`.
    pub fn of_cuda_device(n: i64) -> Backend {
        match n {
            ..0 => Backend::Flex,
            _ if cfg!(feature = "cuda-runtime") => Backend::Cuda,
            _ => Backend::Wgpu,
        }
    }

    /// Whether it runs on a GPU (or a software Vulkan driver): wgpu, vulkan or cuda.
    pub fn is_gpu(self) -> bool {
        matches!(self, Backend::Wgpu | Backend::Vulkan | Backend::Cuda)
    }

    /// The sentences and padded positions (rows × longest row) of a stateless biLM call by
    /// default, `elmo embed`'s and `elmo task`'s: more rows per LSTM step run faster, and a GPU
    /// takes more (stateless vectors do not depend on them).
    pub fn stateless_batches(self) -> (usize, usize) {
        match self.is_gpu() {
            true => (1024, 65_536),
            false => (256, 8192),
        }
    }

    /// The backend's name, as `--backend` and the Cargo feature spell it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Flex => "flex",
            Backend::Ndarray => "ndarray",
            Backend::Wgpu => "wgpu",
            Backend::Vulkan => "vulkan",
            Backend::Cuda => "cuda",
        }
    }
}

/// The `CUDA_VISIBLE_DEVICES` that leaves only the `index`-th of the devices `visible` lists (of
/// every device when it is unset).
fn visible_cuda_device(visible: Option<&str>, index: usize) -> anyhow::Result<String> {
    let Some(list) = visible else {
        return Ok(index.to_string());
    };
    let entries: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect();
    entries
        .get(index)
        .map(|entry| entry.to_string())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--gpu {index}: CUDA_VISIBLE_DEVICES={list:?} leaves {} device(s) visible, \
                 numbered from 0",
                entries.len()
            )
        })
}

/// Runs one small operation on `device`. A runtime that cannot start panics (cudarc without
/// `libcuda.so`, wgpu without an adapter), often on a thread of its own: the first panic's
/// message is the error, and the default hook's report of it is held back.
fn probe(device: &Device) -> Result<(), String> {
    use std::sync::{Arc, Mutex};
    let first = Arc::new(Mutex::new(None::<String>));
    let record = Arc::clone(&first);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let mut first = record.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            *first = Some(message);
        }
    }));
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Tensor::<1>::ones([1], device).sum().into_scalar::<f32>()
    }));
    std::panic::set_hook(hook);
    let message = first.lock().unwrap_or_else(|e| e.into_inner()).take();
    match (ran, message) {
        (Ok(1.0), _) => Ok(()),
        (Ok(other), _) => Err(format!("1 summed to {other}")),
        (Err(_), message) => Err(message.unwrap_or_else(|| "it panicked".into())),
    }
}

/// The precision of the large products (`--precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// `f32` throughout (AllenNLP's values).
    F32,
    /// The products' operands in 16-bit floats; results, LSTM state, weights and optimizer
    /// state in `f32`; training on a GPU scales the loss. On a CPU with AMX, or an AMD one with
    /// AVX512-BF16 (flex), the large products in `bf16`: the LSTM's, the char CNN's and the
    /// softmax's, in inference and training.
    Mixed,
}

impl PrecisionArg {
    /// Refuses `mixed` where 16-bit products buy nothing, for inference and training alike: on
    /// `ndarray`, and on `flex` unless this CPU has a unit for `bf16` products (AMX's tiles:
    /// Intel Xeon from the 4th generation; AVX512-BF16 on AMD: Zen 4 and 5;
    /// [`elmo_kernels::host_bf16_products`]).
    ///
    /// On a GPU, `mixed` needs the device's 16-bit float arithmetic (`f16`, or `bf16`;
    /// [`Precision::half_for`]), which an adapter without it (wgpu on OpenGL, where a machine
    /// has no Vulkan driver) lacks: it would compute in `f32` under the flag's name.
    ///
    /// # Errors
    /// `mixed` with `--backend ndarray`, with `flex` on a CPU without such a unit, or on a GPU
    /// device without 16-bit floats.
    pub fn check_device(self, backend: Backend, device: &Device) -> anyhow::Result<()> {
        self.check_backend(backend)?;
        let probe = || Tensor::<1>::zeros([1], device);
        if self == Self::Mixed && backend.is_gpu() && Precision::Mixed.half_for(&probe()).is_none()
        {
            anyhow::bail!(
                "--precision mixed needs 16-bit float arithmetic (f16 or bf16) on the GPU, and \
                 this {} device has none (wgpu on OpenGL, where the machine has no Vulkan \
                 driver, for one); run with --precision f32",
                backend.name()
            );
        }
        Ok(())
    }

    /// The rule of [`Self::check_device`] that needs no device.
    fn check_backend(self, backend: Backend) -> anyhow::Result<()> {
        // The probe (and Linux's grant of the tiles) only where mixed asks for them.
        let bf16 = self == Self::Mixed
            && backend == Backend::Flex
            && elmo_kernels::host_bf16_products(elmo_kernels::HostInstructions::Widest);
        self.check(backend, bf16)
    }

    /// The rule for a CPU that has a unit for `bf16` products (`bf16`) or not.
    fn check(self, backend: Backend, bf16: bool) -> anyhow::Result<()> {
        if self == Self::F32 || backend.is_gpu() {
            return Ok(());
        }
        let gpus = "a GPU backend (--backend wgpu, vulkan or cuda)";
        match (backend, bf16) {
            (Backend::Flex, true) => Ok(()),
            (Backend::Flex, false) => anyhow::bail!(
                "--precision mixed runs on {gpus}, or on flex with a CPU that has bf16 products \
                 (AMX's tiles: Intel Xeon from the 4th generation, on Linux; AVX512-BF16 on AMD: \
                 Zen 4 and later); this one has none"
            ),
            _ => anyhow::bail!(
                "--precision mixed runs on {gpus}, or on flex with a CPU that has bf16 products \
                 (AMX or AVX512-BF16); not on {}",
                backend.name()
            ),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_index_counts_the_devices_cuda_visible_devices_leaves() {
        assert_eq!(visible_cuda_device(None, 3).expect("unset"), "3");
        assert_eq!(visible_cuda_device(Some("4, 6,7"), 1).expect("listed"), "6");
        assert_eq!(
            visible_cuda_device(Some("GPU-8a1f,GPU-77c2"), 0).expect("by UUID"),
            "GPU-8a1f"
        );
        let error = visible_cuda_device(Some("4,6"), 2).expect_err("past the list");
        assert!(error.to_string().contains("leaves 2 device(s)"), "{error}");
        let error = visible_cuda_device(Some(""), 0).expect_err("none visible");
        assert!(error.to_string().contains("leaves 0 device(s)"), "{error}");
    }

    #[test]
    fn mixed_precision_runs_where_16_bit_products_pay() {
        use PrecisionArg::{F32, Mixed};
        for bf16 in [false, true] {
            for backend in [
                Backend::Flex,
                Backend::Ndarray,
                Backend::Wgpu,
                Backend::Cuda,
            ] {
                assert!(F32.check(backend, bf16).is_ok());
                let mixed = Mixed.check(backend, bf16);
                let runs = backend.is_gpu() || (backend == Backend::Flex && bf16);
                assert_eq!(mixed.is_ok(), runs, "{backend:?} bf16 {bf16}");
            }
        }
        let error = Mixed.check(Backend::Flex, false).expect_err("no bf16 unit");
        assert!(error.to_string().contains("this one has none"), "{error}");
        let error = Mixed.check(Backend::Ndarray, true).expect_err("ndarray");
        assert!(error.to_string().contains("not on ndarray"), "{error}");
    }

    /// On a GPU, `mixed` runs where the device has 16-bit floats (lavapipe) and is refused
    /// where it has none (wgpu on OpenGL); `f32` runs on any device.
    #[test]
    fn mixed_precision_needs_a_gpus_16_bit_floats() {
        use PrecisionArg::{F32, Mixed};
        let Some(gpu) = elmo_test_support::wgpu_device_or_skip("mixed_needs_16_bit_floats") else {
            return;
        };
        assert!(F32.check_device(Backend::Wgpu, &gpu).is_ok());
        let mixed = Mixed.check_device(Backend::Wgpu, &gpu);
        match elmo_test_support::sixteen_bit_floats(&gpu) {
            true => assert!(mixed.is_ok(), "{mixed:?}"),
            false => {
                let error = mixed.expect_err("no 16-bit floats");
                assert!(error.to_string().contains("has none"), "{error}");
            }
        }
    }

    #[test]
    fn a_gpu_index_is_refused_for_a_cpu_backend() {
        let error = Backend::Flex.pin_gpu(1).expect_err("flex");
        assert!(error.to_string().contains("runs on flex"), "{error}");
    }
}
