//! Throughput of burn matmul on the shapes ELMo uses (GFLOP/s), per backend; a diagnostic for
//! `cargo xtask bench`. `cargo run -p elmo-cli --example bench_matmul -- flex [--packed]`
//! (`--packed`: with `elmo_model::cpu_matmul::pack_small_batch_weights`, as the CLI runs flex;
//! `host`: the host LSTM loop's kernel, `elmo_kernels::matmul_packed`, on one thread, its weights
//! packed once as the loop packs them; `--instructions avx512|avx2|portable`: the kernel of that
//! instruction set at most, `elmo_kernels::PackedMatrix::pack_limited`; `--bf16`: the same
//! shapes' `bf16` products, `elmo_kernels::matmul_bf16`, on the unit this CPU has within the
//! limit, AMX's tiles or AVX512-BF16, a training step's shapes packed at each call and once;
//! `--shape MxKxN`: only that shape of the host's lists).
use std::time::Instant;

use burn::tensor::{Device, Distribution, Tensor};
use elmo_model::HostInstructions;

#[allow(deprecated)]
fn main() {
    // As the CLI and the other benches run the CPU backends (packing a weight allocates it).
    elmo_model::cpu_memory::keep_large_allocations();
    let backend = std::env::args().nth(1).unwrap_or_else(|| "flex".into());
    let packed = std::env::args().any(|a| a == "--packed");
    if packed {
        elmo_model::cpu_matmul::pack_small_batch_weights();
    }
    if backend == "host" {
        let args: Vec<String> = std::env::args().collect();
        let limit = match (args.iter().position(|a| a == "--instructions"))
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
        {
            None | Some("widest") => HostInstructions::Widest,
            Some("avx512") => HostInstructions::Avx512,
            Some("avx2") => HostInstructions::Avx2,
            Some("portable") => HostInstructions::Portable,
            Some(other) => {
                panic!("--instructions takes widest, avx512, avx2 or portable, not {other}")
            }
        };
        if args.iter().any(|a| a == "--bf16") {
            bf16_products(limit);
            return;
        }
        host_products(limit);
        return;
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
    ]
    .into_iter()
    .chain(TRAINING_SHAPES)
    {
        let a = Tensor::<2>::random([m, k], Distribution::Default, &device);
        let b = Tensor::<2>::random([k, n], Distribution::Default, &device);
        let name = format!("{backend}{}", if packed { " packed" } else { "" });
        time_product(&name, [m, k, n], 1, || {
            let _ = a.clone().matmul(b.clone()).to_data();
        });
    }
}

/// Runs `work` once, then `reps` times, and gives the seconds of one of those runs.
fn seconds_each(reps: usize, mut work: impl FnMut()) -> f64 {
    work();
    let start = Instant::now();
    for _ in 0..reps {
        work();
    }
    start.elapsed().as_secs_f64() / reps as f64
}

/// Runs `product` once, then times enough runs for ~20 GFLOP (at least `min_reps`, at most
/// 200) and prints its GFLOP/s.
fn time_product(name: &str, [m, k, n]: [usize; 3], min_reps: usize, product: impl FnMut()) {
    let flop = 2.0 * (m * k * n) as f64;
    let reps = (2e10 / flop).clamp(min_reps as f64, 200.0) as usize;
    let s = seconds_each(reps, product);
    println!(
        "{name} [{m}x{k}]x[{k}x{n}]: {:.1} GFLOP/s ({:.2} ms)",
        flop / s / 1e9,
        s * 1e3
    );
}

/// GFLOP/s of [`elmo_kernels::matmul_packed`] on the shapes of the host LSTM loop: one step's
/// `h·W_h` and projection at 1, 64 and 256 rows (at one row the weight streams from memory at
/// twice its GFLOP/s in GB/s), `h·W_h` at 4 rows, and a chunk's input projection; the kernel
/// of the widest instruction set up to `limit`. Then a training step's products on every
/// thread with the right factor packed at each call, the packing alone, and packed once.
fn host_products(limit: HostInstructions) {
    for (m, k, n) in HOST_SHAPES.into_iter().filter(wanted) {
        let b = elmo_kernels::PackedMatrix::pack_limited(&values(k * n, 1), n, limit);
        let a = values(m * k, 2);
        let mut c = vec![0.0f32; m * n];
        time_product("host", [m, k, n], 3, || {
            elmo_kernels::matmul_packed(&a, k, m, &b, &mut c, n)
        });
    }
    // A training step's products at `original` 32 x 20 (per step, then over all steps), on
    // every thread, the weights packed at each call as a large product packs them.
    for (m, k, n) in TRAINING_SHAPES.into_iter().filter(wanted) {
        let (a, b) = (values(m * k, 2), values(k * n, 1));
        let mut c = vec![0.0f32; m * n];
        time_product("host parallel", [m, k, n], 3, || {
            let b = elmo_kernels::PackedMatrix::pack_limited(&b, n, limit);
            elmo_kernels::matmul_packed_parallel(&a, k, m, &b, &mut c, n)
        });
        time_packing("f32", [k, n], || {
            drop(elmo_kernels::PackedMatrix::pack_limited(&b, n, limit))
        });
        let b = elmo_kernels::PackedMatrix::pack_limited(&b, n, limit);
        time_product("host parallel, packed once", [m, k, n], 3, || {
            elmo_kernels::matmul_packed_parallel(&a, k, m, &b, &mut c, n)
        });
    }
}

/// GFLOP/s of [`elmo_kernels::matmul_bf16`] (one thread) and `matmul_bf16_parallel` on the
/// host LSTM loop's shapes (as [`host_products`]) and the char CNN's highway at inference's
/// batches, on the `bf16` unit this CPU has within `limit`; then of `matmul_bf16_parallel` on
/// a training step's shapes with the right factor rounded and packed at each call, as
/// `--precision mixed` training packs them (against `host parallel` of [`host_products`]), the
/// packing alone, and the product with the factor packed once.
fn bf16_products(limit: HostInstructions) {
    let Some(unit) = elmo_kernels::Bf16Unit::at_most(limit) else {
        panic!("this CPU has no unit for bf16 products within {limit:?}");
    };
    for (m, k, n) in (HOST_SHAPES.into_iter().chain([(1408, 2048, 2048)])).filter(wanted) {
        let b = elmo_kernels::Bf16Matrix::pack(&values(k * n, 1), n, limit).expect("a unit");
        let a = values(m * k, 2);
        let mut c = vec![0.0f32; m * n];
        time_product(&format!("bf16 {unit:?}"), [m, k, n], 3, || {
            elmo_kernels::matmul_bf16(&a, k, m, &b, &mut c, n)
        });
        time_product(&format!("bf16 {unit:?} parallel"), [m, k, n], 3, || {
            elmo_kernels::matmul_bf16_parallel(&a, k, m, &b, &mut c, n)
        });
    }
    for (m, k, n) in TRAINING_SHAPES.into_iter().filter(wanted) {
        let (a, b) = (values(m * k, 2), values(k * n, 1));
        let mut c = vec![0.0f32; m * n];
        time_product(
            &format!("bf16 {unit:?} parallel, packed at each call"),
            [m, k, n],
            3,
            || {
                let b = elmo_kernels::Bf16Matrix::pack(&b, n, limit).expect("a unit");
                elmo_kernels::matmul_bf16_parallel(&a, k, m, &b, &mut c, n)
            },
        );
        time_packing("bf16", [k, n], || {
            drop(elmo_kernels::Bf16Matrix::pack(&b, n, limit).expect("a unit"))
        });
        let b = elmo_kernels::Bf16Matrix::pack(&b, n, limit).expect("a unit");
        time_product(
            &format!("bf16 {unit:?} parallel, packed once"),
            [m, k, n],
            3,
            || elmo_kernels::matmul_bf16_parallel(&a, k, m, &b, &mut c, n),
        );
    }
}

/// GB/s of `f32` values read by `pack` of a `[k, n]` right factor (into the host kernel's
/// panels, `elmo_kernels::PackedMatrix`, or rounded to `bf16` into AMX's tile layout,
/// `elmo_kernels::Bf16Matrix`, on rayon's threads, as a training step packs each product's
/// right factor).
fn time_packing(kind: &str, [k, n]: [usize; 2], pack: impl FnMut()) {
    let reps = (5e8 / (k * n) as f64).clamp(3.0, 200.0) as usize;
    let s = seconds_each(reps, pack);
    println!(
        "{kind} packing [{k}x{n}]: {:.1} GB/s of f32 read ({:.2} ms)",
        (k * n * 4) as f64 / s / 1e9,
        s * 1e3
    );
}

/// `[M, K, N]` of the host LSTM loop's products ([`host_products`]).
const HOST_SHAPES: [(usize, usize, usize); 8] = [
    (1, 512, 16384),
    (1, 4096, 512),
    (4, 512, 16384),
    (64, 512, 16384),
    (64, 4096, 512),
    (256, 512, 16384),
    (256, 4096, 512),
    (512, 512, 16384),
];

/// Whether `--shape MxKxN` names this shape, or is not given.
fn wanted(&(m, k, n): &(usize, usize, usize)) -> bool {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--shape") {
        None => true,
        Some(i) => args.get(i + 1) == Some(&format!("{m}x{k}x{n}")),
    }
}

/// `len` values in `[-0.5, 0.5)`, a fixed pattern per `seed`.
fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 + seed) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

/// `[M, K, N]` of a training step's products at `original` 32 x 20: a highway's product, its
/// input and weight gradients; the sampled softmax's logits (8,192 sampled and 640 targets), its
/// input and weight gradients; the token projection; a step's state product and its transpose,
/// the input projection of all steps, its input gradient, the weight gradients, the sampled
/// softmax's logits as the bench once had them.
const TRAINING_SHAPES: [(usize, usize, usize); 13] = [
    (640, 2048, 4096),
    (640, 4096, 2048),
    (2048, 640, 4096),
    (1280, 512, 8832),
    (1280, 8832, 512),
    (8832, 1280, 512),
    (640, 2048, 512),
    (32, 512, 16384),
    (32, 16384, 512),
    (640, 512, 16384),
    (640, 16384, 512),
    (512, 640, 16384),
    (1280, 512, 8192),
];
