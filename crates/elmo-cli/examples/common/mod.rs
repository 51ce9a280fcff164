//! What the benchmark examples (`bench_embed`, `bench_train`) share: the backend variants they
//! measure (one backend with some of `KernelSettings` off), the device of a backend name, and the
//! telling line of a failed child's stderr.

use std::path::PathBuf;
use std::process::Command;

use burn::tensor::Device;
use elmo_model::{HostInstructions, KernelSettings, Precision};

#[cfg(feature = "cuda-runtime")]
#[path = "../../src/kernel_cache.rs"]
mod kernel_cache;

/// A child's backend and kernels from its name, `BACKEND[-VARIANT[-VARIANT…]]`: `flex-composed`
/// and `wgpu-composed` (also `-unfused`) run burn's operations only; `-apart` (directions not
/// paired), `-whole` (step products not split), `-burnmm` (burn's matmul choice for the large
/// products), `-stepshaped` (an inference step's whole products through the kernel of their
/// shape too), `-mixed` (`Precision::Mixed`), `-cubek` (cubek's kernels, not cuBLAS, on CUDA:
/// `vendor_blas` off), `-blassteps` (cuBLAS for every LSTM's per-step products too) and
/// `-cubeksteps` (cubek's for every LSTM's per-step products; by default a layer's size picks,
/// `vendor_blas_step_min`) and `-chunkN` (the char CNN's calls of N distinct tokens on a GPU,
/// `cube_encoder_chunk_tokens`) are the
/// GPU backend (`wgpu`, `cuda`) with one setting changed each, in the order named
/// (`cuda-mixed-cubek`); `-avx512`, `-avx2` and `-portable` are a CPU backend whose host kernels
/// use AVX-512 without AMX's tiles, AVX2 (or the target's default) at most (`flex-avx2`: an AVX2
/// machine's kernels on an AVX-512 one; `flex-mixed-avx512`: `bf16` products on AVX512-BF16, as
/// a CPU without AMX runs them); a name without a variant is a backend with every kernel.
pub fn backend_and_kernels(name: &str) -> (&str, KernelSettings) {
    let mut parts = name.split('-');
    let backend = parts.next().unwrap_or(name);
    let mut kernels = KernelSettings::ALL;
    for variant in parts {
        kernels = match variant {
            "composed" | "unfused" => KernelSettings::COMPOSED,
            "apart" => KernelSettings {
                paired_directions: false,
                ..kernels
            },
            "whole" => KernelSettings {
                split_products: false,
                ..kernels
            },
            "burnmm" => KernelSettings {
                shaped_matmul: false,
                ..kernels
            },
            "stepshaped" => KernelSettings {
                shaped_step_products: true,
                ..kernels
            },
            "mixed" => KernelSettings {
                precision: Precision::Mixed,
                ..kernels
            },
            "cubek" => KernelSettings {
                vendor_blas: false,
                ..kernels
            },
            "blassteps" => KernelSettings {
                vendor_blas_step_min: 0,
                ..kernels
            },
            "cubeksteps" => KernelSettings {
                vendor_blas_step_min: usize::MAX,
                ..kernels
            },
            "avx512" => KernelSettings {
                host_instructions: HostInstructions::Avx512,
                ..kernels
            },
            "avx2" => KernelSettings {
                host_instructions: HostInstructions::Avx2,
                ..kernels
            },
            "portable" => KernelSettings {
                host_instructions: HostInstructions::Portable,
                ..kernels
            },
            chunk if chunk.starts_with("chunk") => KernelSettings {
                cube_encoder_chunk_tokens: chunk["chunk".len()..]
                    .parse()
                    .unwrap_or_else(|_| panic!("-chunkN takes a number of tokens, not {chunk}")),
                ..kernels
            },
            other => panic!("unknown backend variant {other} in {name}"),
        };
    }
    (backend, kernels)
}

/// Limits the PyTorch peer run by `command` to the instruction sets of an AVX2 machine where
/// `instructions` is `avx2` (MKL's products, ATen's vector kernels and oneDNN's, through their
/// documented environment variables), so that it is measured against `flex-avx2`, or to AVX-512
/// with its `bf16` dot products and without AMX's tiles where it is `avx512` (oneDNN's
/// `AVX512_CORE_BF16`: a Zen 4's instructions, against `flex-mixed-avx512`); `widest` leaves it
/// as it is. What it is called in the table: `""`, `", AVX2"` or `", no AMX"`.
///
/// # Panics
/// On any other name.
pub fn limit_peer(command: &mut Command, instructions: &str) -> &'static str {
    match instructions {
        "widest" => "",
        "avx2" => {
            command.envs([
                ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
                ("ATEN_CPU_CAPABILITY", "avx2"),
                ("ONEDNN_MAX_CPU_ISA", "AVX2"),
            ]);
            ", AVX2"
        }
        "avx512" => {
            command.envs([
                ("MKL_ENABLE_INSTRUCTIONS", "AVX512"),
                ("ATEN_CPU_CAPABILITY", "avx512"),
                ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16"),
            ]);
            ", no AMX"
        }
        other => panic!("--peer-instructions takes widest, avx512 or avx2, not {other}"),
    }
}

/// How many products of this process cuBLAS ran and how many it was handed but did not run
/// (with the last reason), as a `CUBLAS` line for the parent to print: whether the `cuda` rows
/// ran cuBLAS at all. `None` in a build without the `cuda` feature or on another backend.
pub fn cublas_line(name: &str, backend: &str) -> Option<String> {
    #[cfg(feature = "cuda-runtime")]
    if backend == "cuda" {
        let stats = elmo_kernels::cublas_stats();
        let last = stats
            .last_failure
            .map_or(String::new(), |why| format!(" (last: {why})"));
        return Some(format!(
            "CUBLAS {name}: {} products run, {} not run{last}",
            stats.calls, stats.failures
        ));
    }
    let _ = (name, backend);
    None
}

/// The device of `backend`, with the CLI's matmul and allocator settings on its CPU backends
/// (`vulkan`: wgpu pinned to Vulkan, SPIR-V kernels, in a build with the `vulkan` feature;
/// `cuda` in one with `cuda`).
pub fn bench_device(backend: &str) -> Device {
    #[cfg(feature = "flex")]
    if backend == "flex" {
        elmo_model::cpu_matmul::pack_small_batch_weights();
    }
    if backend == "flex" || backend == "ndarray" {
        elmo_model::cpu_memory::keep_large_allocations();
    }
    #[cfg(feature = "vulkan")]
    if backend == "vulkan" {
        return Device::vulkan(burn::tensor::DeviceKind::DefaultDevice);
    }
    #[cfg(feature = "cuda-runtime")]
    if backend == "cuda" {
        kernel_cache::cache_compiled_kernels();
        return Device::cuda(0);
    }
    elmo_test_support::bench::device(backend)
}

/// What a failed child said: its first panic's message (the cause: a runtime thread's panic
/// is followed by the main thread's on the closed channel), else the last line of its stderr
/// that says something (not Rust's backtrace note, not wgpu's XDG_RUNTIME_DIR notice, which
/// every wgpu process prints on a machine without a desktop session).
pub fn child_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    // A panic's message is the line after "panicked at", before Rust's backtrace notes.
    if let Some(i) = lines.iter().position(|l| l.contains("panicked at")) {
        let message = lines.get(i + 1).copied().unwrap_or("");
        return format!("{} {message}", lines[i].trim());
    }
    lines
        .iter()
        .rfind(|l| !l.contains("XDG_RUNTIME_DIR") && !l.starts_with("note: "))
        .copied()
        .unwrap_or("no output")
        .to_string()
}

/// The PyTorch peer script `xtask/peer/NAME` of the repository being run: `cargo run` names its
/// package's directory in `CARGO_MANIFEST_DIR` at run time, which is right even when the binary
/// was built from another clone sharing the target directory (whose path `env!` would give);
/// a binary run directly falls back to the path it was built from.
pub fn peer_script(name: &str) -> String {
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let script = package.join("../../xtask/peer").join(name);
    script.to_string_lossy().into_owned()
}
