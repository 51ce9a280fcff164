//! Which custom kernels run, in which precision the large products run and whether a
//! vendor BLAS runs them: [`KernelSettings`], a typed value that a model or a training step
//! carries (no environment variable steers the library), every kernel on by default where it can
//! run, products in `f32`; [`ProductMode`], how one product runs. The switches exist so that one
//! program can measure a kernel against burn's operations.

use burn::tensor::{Device, FloatDType, Tensor};
use serde::{Deserialize, Serialize};

use crate::host_gemm::HostInstructions;
use crate::host_tensor::HostTensor;

/// Which of this crate's kernels run on a CubeCL device. They run only where the tensor's
/// primitive is a `CubeTensor`: this crate built with its `cubecl` feature, a CubeCL device
/// (wgpu, CUDA, ...), and burn's `fusion` off (with fusion the primitives are fusion tensors and
/// burn's operations run: see [`KernelSettings::run_on`]). Everywhere else burn's composed
/// operations run, with the same results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelSettings {
    /// The fused kernels: LSTM cells, row reductions, Adagrad, the gradient norm, index adds as
    /// scatters. Off: burn's operations.
    pub fused: bool,
    /// With `fused`: per-step products split along their inner dimension and weight gradients
    /// over their rows (split-K, `split_product.rs`). Off: whole products.
    pub split_products: bool,
    /// With `fused`: a biLM layer's two directions as one group on their rows stacked. Off: one
    /// after the other.
    pub paired_directions: bool,
    /// On burn's flex CPU backend, the host kernels: the LSTMP forward pass of inference (no
    /// autodiff) as one host loop ([`crate::HostLstm`]: weights packed once per call, one
    /// fused pass per cell); a training step's recurrence forward and backward as host loops
    /// ([`crate::host_forward_steps`], [`crate::host_backward_steps`]: per-step products with
    /// their weights packed once per step, [`crate::SplitWeight::on_host`]); the LSTM's other
    /// products outside autodiff through the host kernel on every thread; the softmax's rows,
    /// Adagrad and the gradient norm as one host pass each. Off: burn's operations, step by
    /// step.
    pub host_recurrence: bool,
    /// With `host_recurrence`: the widest instruction set the host kernels use
    /// ([`HostInstructions`]; by default the widest this CPU has). Lower, one machine runs the
    /// kernels another has (AVX2 on an AVX-512 CPU) for tests and measurements.
    pub host_instructions: HostInstructions,
    /// With `fused`: the large `f32` products on a CubeCL device through the cubek kernel that
    /// suits their shape ([`crate::product`]). Off: burn's choice.
    pub shaped_matmul: bool,
    /// With `shaped_matmul`: an inference step's unsplit products (256 rows and more) through
    /// the kernel of their shape too. Off (the default): burn's choice.
    pub shaped_step_products: bool,
    /// The precision of the large products, in inference and training, on a GPU and on a CPU
    /// with a unit for `bf16` products ([`Precision`]; `F32` by default, as AllenNLP).
    pub precision: Precision,
    /// With `fused`: the large products on a CUDA device through NVIDIA's cuBLAS, where this
    /// crate is built with its `cublas` feature and the library loads (`f32` without TF32; with
    /// [`Precision::Mixed`], 16-bit operands on the tensor cores and `f32` results): the LSTM's
    /// input projection, weight and input gradients, the softmax's products, the token
    /// encoder's convolutions, highways and projection (in training's fast step too), the large
    /// inference products; products under autodiff keep burn's. Off, or where it does not run:
    /// cubek's kernels.
    pub vendor_blas: bool,
    /// With `vendor_blas`: the smallest LSTM layer, in cells × projection, whose per-step
    /// products a vendor BLAS runs too (hundreds a training step: on an H200 cuBLAS ran a large
    /// layer's at twice cubek's speed or more, a small layer's slower than cubek's split
    /// kernels, measured while each cuBLAS call still made the host wait for CubeCL's queue).
    /// Smaller layers keep cubek's. By default [`DEFAULT_VENDOR_BLAS_STEP_MIN`] (`original`'s 4,096 × 512 through
    /// cuBLAS, `small`'s 1,024 × 128 through cubek); `0`: every layer; `usize::MAX`: none.
    pub vendor_blas_step_min: usize,
    /// The largest intermediate buffer, in bytes, that the large operations make at once (the
    /// LSTM's input projection, the char CNN's convolutions, the embedder's read-back; on a GPU
    /// the training softmax's logits, a quarter each): larger work runs in pieces. Lowered to
    /// the device's own limit ([`Self::rows_per_buffer`]; wgpu on Vulkan binds at most 2 GiB − 1
    /// per buffer).
    pub buffer_bytes: usize,
    /// On a CubeCL device, the most distinct tokens of a batch that the char CNN encodes in one
    /// call (the tokens sorted by length, each call's windows stopping at its longest token; its
    /// intermediate memory bounded by `buffer_bytes` whatever this is). Each call launches a
    /// few kernels per convolution, so on a GPU fewer, larger calls cost less:
    /// [`DEFAULT_CUBE_ENCODER_CHUNK_TOKENS`] by default. On the host, calls of
    /// `elmo_model::bilm::ENCODER_CHUNK_TOKENS` (1,024) whatever this is.
    pub cube_encoder_chunk_tokens: usize,
}

impl Default for KernelSettings {
    fn default() -> Self {
        Self::ALL
    }
}

impl KernelSettings {
    /// Every kernel where it can run (the default).
    pub const ALL: Self = Self {
        fused: true,
        split_products: true,
        paired_directions: true,
        host_recurrence: true,
        host_instructions: HostInstructions::Widest,
        shaped_matmul: true,
        shaped_step_products: false,
        precision: Precision::F32,
        vendor_blas: true,
        vendor_blas_step_min: DEFAULT_VENDOR_BLAS_STEP_MIN,
        buffer_bytes: DEFAULT_BUFFER_BYTES,
        cube_encoder_chunk_tokens: DEFAULT_CUBE_ENCODER_CHUNK_TOKENS,
    };

    /// burn's operations only.
    pub const COMPOSED: Self = Self {
        fused: false,
        split_products: false,
        paired_directions: false,
        host_recurrence: false,
        host_instructions: HostInstructions::Widest,
        shaped_matmul: false,
        shaped_step_products: false,
        precision: Precision::F32,
        vendor_blas: false,
        vendor_blas_step_min: usize::MAX,
        buffer_bytes: DEFAULT_BUFFER_BYTES,
        cube_encoder_chunk_tokens: DEFAULT_CUBE_ENCODER_CHUNK_TOKENS,
    };

    /// Whether the fused kernels run on `tensor`: `fused` and a `CubeTensor` primitive.
    pub fn fused_for<const D: usize>(&self, tensor: &Tensor<D>) -> bool {
        self.fused && on_cube_device(tensor)
    }

    /// Whether the host kernels run on `tensor`: `host_recurrence` and an `f32` tensor of burn's
    /// flex backend (under autodiff or not: they run on its values), with this crate's `flex`
    /// feature.
    pub fn host_for<const D: usize>(&self, tensor: &Tensor<D>) -> bool {
        self.host_recurrence && HostTensor::of(&tensor.clone().inner()).is_some()
    }

    /// The instruction sets the host kernels may use, where they run at all (`host_recurrence`):
    /// [`ProductMode::host`] off a CubeCL device.
    pub fn host_kernels(&self) -> Option<HostInstructions> {
        self.host_recurrence.then_some(self.host_instructions)
    }

    /// Whether products on `tensor` are split: [`Self::fused_for`] and `split_products`.
    pub fn split_for<const D: usize>(&self, tensor: &Tensor<D>) -> bool {
        self.split_products && self.fused_for(tensor)
    }

    /// How the products of `tensor` run: their operands' 16-bit type ([`Precision::half_for`]),
    /// whether a vendor BLAS runs them (`vendor_blas`, [`Self::fused_for`], and one there for
    /// `tensor`'s device: cuBLAS loaded and a CUDA device, with the `cublas` feature), and
    /// whether the host kernel does (`host_recurrence`, off a CubeCL device), and whether in
    /// `bf16` ([`Precision::Mixed`] there, where this CPU has a unit for it).
    pub fn product_mode<const D: usize>(&self, tensor: &Tensor<D>) -> ProductMode {
        let host = self.host_kernels().filter(|_| !on_cube_device(tensor));
        ProductMode {
            half: self.precision.half_for(tensor),
            vendor_blas: self.vendor_blas && self.fused_for(tensor) && vendor_blas_on(tensor),
            host,
            host_bf16: self.precision == Precision::Mixed
                && host.is_some_and(crate::host_bf16_products),
        }
    }

    /// [`Self::product_mode`] for the per-step products of an LSTM `layer` (`[cells,
    /// projection]`): a vendor BLAS only where [`Self::vendor_blas_steps_for`] the layer.
    pub fn step_product_mode<const D: usize>(
        &self,
        tensor: &Tensor<D>,
        layer: [usize; 2],
    ) -> ProductMode {
        let mode = self.product_mode(tensor);
        ProductMode {
            vendor_blas: mode.vendor_blas && self.vendor_blas_steps_for(layer),
            ..mode
        }
    }

    /// Whether a layer of `d_cell` cells projected to `d_projection` is large enough for a
    /// vendor BLAS to run its per-step products (`vendor_blas_step_min`), where one runs at all.
    pub fn vendor_blas_steps_for(&self, [d_cell, d_projection]: [usize; 2]) -> bool {
        d_cell.saturating_mul(d_projection) >= self.vendor_blas_step_min
    }

    /// Whether the two directions run as one group on `tensor`: [`Self::fused_for`] and
    /// `paired_directions`.
    pub fn paired_for<const D: usize>(&self, tensor: &Tensor<D>) -> bool {
        self.paired_directions && self.fused_for(tensor)
    }

    /// Whether the fused kernels run on `device` (a one-element probe): false on a CPU backend,
    /// without this crate's `cubecl` feature, with burn's `fusion`, or with `fused` off. For an
    /// application to say so when a GPU run will use burn's operations.
    pub fn run_on(&self, device: &Device) -> bool {
        self.fused && cube_device(device)
    }

    /// How many rows of `bytes_per_row` bytes fit in one intermediate buffer on `like`'s device:
    /// [`Self::buffer_bytes`], lowered to the largest buffer that device allocates; at least 1.
    pub fn rows_per_buffer<const D: usize>(&self, like: &Tensor<D>, bytes_per_row: usize) -> usize {
        let limit = self.buffer_bytes.min(device_buffer_limit(like));
        (limit / bytes_per_row.max(1)).max(1)
    }

    /// [`Self::rows_per_buffer`] for work that runs in pieces only to bound its memory (the char
    /// CNN's convolutions): on a CPU device at most [`CPU_PIECE_BYTES`] a piece, since pieces
    /// cost no kernel launches there and smaller ones keep the peak memory down.
    pub fn rows_per_piece<const D: usize>(&self, like: &Tensor<D>, bytes_per_row: usize) -> usize {
        let rows = self.rows_per_buffer(like, bytes_per_row);
        match on_cube_device(like) {
            true => rows,
            false => rows.min((CPU_PIECE_BYTES / bytes_per_row.max(1)).max(1)),
        }
    }
}

/// Whether a vendor BLAS runs products on `tensor`'s device: cuBLAS found and a CUDA device.
#[cfg(feature = "cublas")]
fn vendor_blas_on<const D: usize>(tensor: &Tensor<D>) -> bool {
    crate::cublas_runs_on(tensor)
}

/// Without the `cublas` feature there is no vendor BLAS.
#[cfg(not(feature = "cublas"))]
fn vendor_blas_on<const D: usize>(_tensor: &Tensor<D>) -> bool {
    false
}

/// How one product runs ([`KernelSettings::product_mode`], [`crate::half_product`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProductMode {
    /// The 16-bit type of its operands (mixed precision; the result in `f32`); `None`: `f32`.
    pub half: Option<FloatDType>,
    /// Whether a vendor BLAS (cuBLAS on a CUDA device, with the `cublas` feature) runs it (the
    /// products it is asked for are not split along K: the library splits them itself).
    pub vendor_blas: bool,
    /// Where the host kernel runs it, with the instruction sets it may use: where its operands
    /// are `f32` tensors of burn's flex backend outside autodiff (`host_product.rs`, this
    /// crate's `flex` feature); `None`, or other operands: burn's matmul.
    pub host: Option<HostInstructions>,
    /// With `host`: the operands rounded to `bf16` and the sums in `f32`, on the unit this CPU
    /// has within `host` (AMX's tiles or AVX512-BF16, [`crate::host_bf16_products`]):
    /// [`Precision::Mixed`] on flex, set only where the CPU has such a unit (else the products
    /// run in `f32`, narrow ones through burn's matmul as with [`Precision::F32`]).
    pub host_bf16: bool,
}

impl ProductMode {
    /// In `f32` through burn's (cubek's) kernels.
    pub const F32: Self = Self {
        half: None,
        vendor_blas: false,
        host: None,
        host_bf16: false,
    };
}

/// The largest buffer, in bytes, that `device` allocates at once (a CubeCL device's page size:
/// wgpu on Vulkan `min(maxStorageBufferRange, 2 GiB − 1)`; less on some drivers, 128 MiB on
/// Mesa's lavapipe); `usize::MAX` on a CPU device or without the `cubecl` feature. For checking
/// that work which cannot run in pieces fits before it starts.
pub fn largest_buffer_bytes(device: &Device) -> usize {
    device_buffer_limit(&Tensor::<1>::zeros([1], device))
}

/// [`KernelSettings::buffer_bytes`] by default: 1 GiB.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 30;

/// [`KernelSettings::cube_encoder_chunk_tokens`] by default: 4,096 tokens, one call of the char
/// CNN for the ~2,500 distinct tokens of an `original` training batch of 128 × 20. Against
/// chunks of 1,024 (the host's) that step launched 698 kernels instead of 1,118 (the stand-in
/// driver's launch log of `bench_train --child cuda`) for 0.08% more of cuBLAS's FLOPs.
pub const DEFAULT_CUBE_ENCODER_CHUNK_TOKENS: usize = 4096;

/// [`KernelSettings::vendor_blas_step_min`]'s default: layers of 2^20 cells × projection and
/// more (`original`'s 4,096 × 512 is 2^21; `ptb-large.json`'s 1,200 × 256 and `small`'s 1,024 ×
/// 128 are below) run their per-step products through a vendor BLAS: the rule that the H200 rows
/// of docs/benchmarks.md measured (cuBLAS's steps faster at `original`, slower at `small`).
pub const DEFAULT_VENDOR_BLAS_STEP_MIN: usize = 1 << 20;

/// The largest piece of [`KernelSettings::rows_per_piece`] on a CPU device: 64 MiB (at the
/// `original` size, 64 MiB pieces of the char CNN ran as fast as 1 GiB ones).
pub const CPU_PIECE_BYTES: usize = 64 << 20;

/// The largest buffer `tensor`'s device allocates (a CubeCL device's page size: wgpu on
/// Vulkan `min(maxStorageBufferRange, 2 GiB − 1)`); unbounded elsewhere.
#[cfg(feature = "cubecl")]
fn device_buffer_limit<const D: usize>(tensor: &Tensor<D>) -> usize {
    crate::cube_tensor::cube_primitive(tensor).map_or(usize::MAX, |primitive| {
        usize::try_from(primitive.client.properties().memory.max_page_size).unwrap_or(usize::MAX)
    })
}

/// Unbounded: without the `cubecl` feature the buffers are burn's to make.
#[cfg(not(feature = "cubecl"))]
fn device_buffer_limit<const D: usize>(_tensor: &Tensor<D>) -> usize {
    usize::MAX
}

/// The precision of the large products (char CNN, highways, projections, the LSTM's products):
/// `f32` throughout (the default, AllenNLP's), or mixed (the products' operands in 16-bit floats,
/// their results and everything else in `f32`), as mixed-precision inference does on GPUs with
/// tensor cores (Micikevicius et al. 2018, "Mixed Precision Training"). burn runs a 16-bit
/// product on a CubeCL device with the `vulkan` (SPIR-V) compiler through cooperative-matrix
/// kernels where the driver offers them. On a CPU [`Precision::half_for`] keeps `f32` (burn's
/// CPU products gain nothing from 16 bits); the host kernels (inference's LSTMP recurrence and
/// the char CNN's convolutions, highways and projection, a training step's products) run `bf16`
/// products on AMX's tiles or AVX512-BF16 ([`crate::Bf16Matrix`], [`ProductMode::host_bf16`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Every product in `f32` (parity with AllenNLP).
    #[default]
    F32,
    /// The products' operands in `f16` (`bf16` where the device has no `f16` arithmetic),
    /// results, state, weights and optimizer state in `f32`, on a CubeCL device; in training
    /// the backward products run in 16 bits too, and the gradients need loss scaling
    /// (elmo-train's `LossScale`, [`Precision::scales_loss`]). On flex the host kernels run
    /// their products in `bf16`, in inference and training (without a loss scale), where the
    /// CPU has a unit for them within [`KernelSettings::host_instructions`] (AMX's tiles or
    /// AVX512-BF16, [`crate::host_bf16_products`]); elsewhere on a CPU everything stays `f32`.
    Mixed,
}

impl Precision {
    /// Whether training in this precision on `device` scales its loss (elmo-train's
    /// `LossScale`): mixed precision's 16-bit products on a CubeCL device, where `f16`'s
    /// narrow range loses small gradients ([`Self::half_for`]). A CPU's `bf16` products keep
    /// `f32`'s exponent range and need no scale.
    pub fn scales_loss(self, device: &Device) -> bool {
        self.half_for(&Tensor::<1>::zeros([1], device)).is_some()
    }

    /// The 16-bit type that products of `tensor` use: `None` for [`Precision::F32`], off a
    /// CubeCL device, or without 16-bit float arithmetic. Under autodiff too: a product's
    /// casts are differentiable ([`crate::half_product`]). (The tensor at hand says where it
    /// lives; no probe tensor is made per product.)
    pub fn half_for<const D: usize>(self, tensor: &Tensor<D>) -> Option<FloatDType> {
        if self == Self::F32 || !on_cube_device(tensor) {
            return None;
        }
        let device = tensor.device();
        [FloatDType::F16, FloatDType::BF16]
            .into_iter()
            .find(|&dtype| device.supports_dtype(dtype))
    }
}

/// Whether `device` is a CubeCL device (a one-element probe; always false without the `cubecl`
/// feature).
pub fn cube_device(device: &Device) -> bool {
    on_cube_device(&Tensor::<1>::zeros([1], device))
}

/// Whether `tensor` is on a CubeCL device (wgpu, CUDA, ...: its primitive is a `CubeTensor`),
/// where each new shape of an operation can need a kernel compiled at run time; false on a CPU
/// backend, with burn's `fusion`, and without this crate's `cubecl` feature.
#[cfg(feature = "cubecl")]
pub fn on_cube_device<const D: usize>(tensor: &Tensor<D>) -> bool {
    crate::cube_tensor::cube_primitive(tensor).is_some()
}

/// Whether `tensor` is on a CubeCL device: always false without the `cubecl` feature.
#[cfg(not(feature = "cubecl"))]
pub fn on_cube_device<const D: usize>(_tensor: &Tensor<D>) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::product;
    use burn::tensor::Distribution;

    #[test]
    fn no_kernel_runs_on_a_cpu_or_when_switched_off() {
        let device = Device::flex();
        let x = Tensor::<1>::zeros([3], &device);
        let on = KernelSettings::default();
        assert!(!on.fused_for(&x) && !on.split_for(&x) && !on.paired_for(&x));
        assert!(!on.run_on(&device));
        if let Some(gpu) = elmo_test_support::wgpu_device_or_skip("kernel_settings") {
            let y = Tensor::<1>::zeros([3], &gpu);
            assert_eq!(on.fused_for(&y), cfg!(feature = "cubecl"));
            assert!(!KernelSettings::COMPOSED.fused_for(&y));
            let apart = KernelSettings {
                paired_directions: false,
                ..on
            };
            assert!(!apart.paired_for(&y));
            assert_eq!(apart.split_for(&y), cfg!(feature = "cubecl"));
        }
    }

    /// Regression: `original` at 1,024 sentences on an H100 (wgpu) asked for a 3.6 GB input
    /// projection, over Vulkan's 2 GiB binding limit, and panicked.
    #[test]
    fn work_is_cut_to_the_buffer_limit() {
        let cpu = Tensor::<1>::zeros([1], &Device::flex());
        let small = KernelSettings {
            buffer_bytes: 1000,
            ..KernelSettings::default()
        };
        assert_eq!(small.rows_per_buffer(&cpu, 300), 3);
        assert_eq!(small.rows_per_buffer(&cpu, 5000), 1, "at least one row");
        assert_eq!(
            KernelSettings::default().rows_per_buffer(&cpu, 1 << 20),
            1024
        );
        let Some(gpu) = elmo_test_support::wgpu_device_or_skip("work_is_cut_to_the_buffer_limit")
        else {
            return;
        };
        let unbounded = KernelSettings {
            buffer_bytes: usize::MAX,
            ..KernelSettings::default()
        };
        let rows = unbounded.rows_per_buffer(&Tensor::<1>::zeros([1], &gpu), 1);
        assert_eq!(largest_buffer_bytes(&gpu), rows);
        assert_eq!(largest_buffer_bytes(&Device::flex()), usize::MAX);
        if cfg!(feature = "cubecl") {
            assert!(
                (1 << 20..usize::MAX).contains(&rows),
                "the device's own limit bounds a buffer: {rows}"
            );
        }
    }

    #[test]
    fn settings_missing_from_a_file_take_their_defaults() {
        let read: KernelSettings =
            serde_json::from_str(r#"{"split_products": false}"#).expect("valid JSON");
        assert_eq!(
            read,
            KernelSettings {
                split_products: false,
                ..KernelSettings::default()
            }
        );
    }

    /// By default `original`'s layers (4,096 cells, projection 512) run their per-step products
    /// through a vendor BLAS and `small`'s (1,024, 128) and `ptb-large.json`'s (1,200, 256)
    /// through cubek; `0` sends every layer's there, `usize::MAX` none.
    #[test]
    fn the_layer_size_picks_who_runs_the_step_products() {
        let original = [4096, 512];
        let small = [1024, 128];
        let ptb_large = [1200, 256];
        let default = KernelSettings::default();
        assert!(default.vendor_blas_steps_for(original));
        assert!(!default.vendor_blas_steps_for(small));
        assert!(!default.vendor_blas_steps_for(ptb_large));
        let every = KernelSettings {
            vendor_blas_step_min: 0,
            ..default
        };
        let none = KernelSettings {
            vendor_blas_step_min: usize::MAX,
            ..default
        };
        for layer in [original, small, ptb_large] {
            assert!(every.vendor_blas_steps_for(layer));
            assert!(!none.vendor_blas_steps_for(layer));
        }
        // The product saturates instead of overflowing.
        assert!(default.vendor_blas_steps_for([usize::MAX, 2]));
        assert!(!KernelSettings::COMPOSED.vendor_blas_steps_for(original));
    }

    /// A vendor BLAS runs only where the fused kernels run on a CUDA device with cuBLAS, and a
    /// time step's products only for a layer of `vendor_blas_step_min` or more: never here (no
    /// CUDA device), and a product that asks for one anyway is burn's.
    #[test]
    fn a_vendor_blas_is_asked_for_where_the_kernels_run() {
        let on = |device: &Device| Tensor::<2>::ones([3, 4], device);
        let cpu = on(&Device::flex());
        let all = KernelSettings::ALL;
        // On a CPU the host kernel is asked for (it runs on flex tensors outside autodiff).
        let host = ProductMode {
            host: Some(HostInstructions::Widest),
            ..ProductMode::F32
        };
        assert_eq!(all.product_mode(&cpu), host);
        assert_eq!(all.step_product_mode(&cpu, [4096, 512]), host);
        // Mixed precision asks the host kernel for `bf16` where the CPU has a unit for it, with
        // no 16-bit type on a CPU; without a unit its products are `f32`'s.
        let mixed = KernelSettings {
            precision: Precision::Mixed,
            ..all
        };
        let host_bf16 = ProductMode {
            host_bf16: crate::host_bf16_products(HostInstructions::Widest),
            ..host
        };
        assert_eq!(mixed.product_mode(&cpu), host_bf16);
        assert_eq!(
            KernelSettings::COMPOSED.product_mode(&cpu),
            ProductMode::F32
        );
        let Some(gpu) = elmo_test_support::wgpu_device_or_skip(
            "a_vendor_blas_is_asked_for_where_the_kernels_run",
        ) else {
            return;
        };
        let gpu = on(&gpu);
        let steps = KernelSettings {
            vendor_blas_step_min: 0,
            ..all
        };
        for settings in [all, steps, KernelSettings::COMPOSED] {
            assert!(!settings.product_mode(&gpu).vendor_blas);
            assert!(!settings.step_product_mode(&gpu, [4096, 512]).vendor_blas);
        }
        // A product that asks for one anyway is burn's.
        let rhs = Tensor::<2>::ones([4, 5], &gpu.device()).mul_scalar(0.5);
        let mode = ProductMode {
            vendor_blas: true,
            ..all.product_mode(&gpu)
        };
        crate::half_product(gpu.clone(), rhs.clone(), mode)
            .into_data()
            .assert_eq(&gpu.matmul(rhs).into_data(), true);
    }

    /// 16-bit types (and with them the loss scale of training) only on a GPU: a CPU's mixed
    /// precision is the host kernels' `bf16`, which keeps `f32`'s range.
    #[test]
    fn sixteen_bit_types_and_loss_scales_are_a_gpus() {
        let cpu = Device::flex();
        let on = |device: &Device| Tensor::<1>::zeros([1], device);
        assert_eq!(Precision::Mixed.half_for(&on(&cpu)), None);
        assert_eq!(Precision::F32.half_for(&on(&cpu)), None);
        assert!(!Precision::Mixed.scales_loss(&cpu));
        let Some(gpu) =
            elmo_test_support::wgpu_device_or_skip("sixteen_bit_types_and_loss_scales_are_a_gpus")
        else {
            return;
        };
        assert_eq!(Precision::F32.half_for(&on(&gpu)), None);
        let half = Precision::Mixed.half_for(&on(&gpu));
        // Training's products (under autodiff) as inference's.
        assert_eq!(
            Precision::Mixed.half_for(&on(&gpu.clone().autodiff())),
            half
        );
        if cfg!(feature = "cubecl") {
            // lavapipe computes in f16; wgpu on OpenGL has no 16-bit floats.
            assert_eq!(half.is_some(), elmo_test_support::sixteen_bit_floats(&gpu));
        }
        assert_eq!(Precision::Mixed.scales_loss(&gpu), half.is_some());
        assert!(!Precision::F32.scales_loss(&gpu));
        if half.is_none() {
            return;
        }
        // A product in half precision: within f16's rounding of the f32 product.
        let lhs = Tensor::<2>::random([33, 300], Distribution::Normal(0.0, 1.0), &gpu);
        let rhs = Tensor::<2>::random([300, 40], Distribution::Normal(0.0, 0.1), &gpu);
        let exact = lhs.clone().matmul(rhs.clone());
        let mixed = product(
            lhs,
            rhs,
            KernelSettings {
                precision: Precision::Mixed,
                ..KernelSettings::ALL
            },
        );
        let scale: f32 = exact.clone().abs().max().into_scalar();
        let error: f32 = (mixed - exact).abs().max().into_scalar();
        assert!(error <= 1e-2 * scale, "{error} of {scale}");
    }
}
