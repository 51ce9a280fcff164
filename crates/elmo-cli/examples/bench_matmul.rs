//! Throughput of burn matmul on the shapes ELMo uses (GFLOP/s), per backend; a diagnostic for
//! `cargo xtask bench`. `cargo run -p elmo-cli --example bench_matmul -- flex [--packed]`
//! (`--packed`: with `elmo_model::cpu_matmul::pack_small_batch_weights`, as the CLI runs flex).
use std::time::Instant;

use burn::tensor::{Device, Distribution, Tensor};

#[allow(deprecated)]
fn main() {
    let backend = std::env::args().nth(1).unwrap_or_else(|| "flex".into());
    let packed = std::env::args().any(|a| a == "--packed");
    if packed {
        elmo_model::cpu_matmul::pack_small_batch_weights();
    }
    let device = match backend.as_str() {
        "ndarray" => Device::ndarray(),
        _ => Device::flex(),
    };
    for (m, k, n) in [
        (64usize, 512usize, 16384usize),
        (64, 4096, 512),
        (1408, 512, 16384),
        (2642, 2048, 2048),
        (58000, 112, 1024),
        (64000, 16, 32),
    ] {
        let a = Tensor::<2>::random([m, k], Distribution::Default, &device);
        let b = Tensor::<2>::random([k, n], Distribution::Default, &device);
        let _ = a.clone().matmul(b.clone()).to_data();
        let reps = (2e10 / (2.0 * (m * k * n) as f64)).clamp(1.0, 200.0) as usize;
        let start = Instant::now();
        for _ in 0..reps {
            let _ = a.clone().matmul(b.clone()).to_data();
        }
        let s = start.elapsed().as_secs_f64() / reps as f64;
        println!(
            "{backend}{} [{m}x{k}]x[{k}x{n}]: {:.1} GFLOP/s ({:.2} ms)",
            if packed { " packed" } else { "" },
            2.0 * (m * k * n) as f64 / s / 1e9,
            s * 1e3
        );
    }
}
