//! `cargo xtask bench train`: biLM training throughput (targets of both directions per second) and
//! peak memory, per backend, on a synthetic Zipfian corpus; optionally against the PyTorch peer
//! (`xtask/peer/bilm_train_pytorch.py`) of the same shape in the same run.
//!
//! Each backend runs in its own child process so that its peak RSS (`VmHWM`) is its own.
//! Flags: `--preset small` (or a config JSON),
//! `--backends flex,ndarray[,wgpu][,wgpu-unfused][,wgpu-whole][,wgpu-apart]` (`wgpu-unfused`:
//! wgpu with burn's operations instead of the fused kernels (`KernelSettings::COMPOSED`), the
//! baseline that the fused ones are measured against; `wgpu-whole`: the fused kernels with the
//! LSTM's step products not split along K (`split_products: false`); `wgpu-apart`: the two
//! directions' LSTM stacks run apart instead of as one group (`paired_directions: false`);
//! `wgpu-burnmm`: the large products through burn's matmul choice, not the kernel of their
//! shape (`shaped_matmul: false`)),
//! `--steps 3` (after one warm-up),
//! `--batch-size 32`, `--unroll-steps 20`, `--vocab-size 50000`, `--negatives 8192`,
//! `--peer PYTHON` (a Python with torch), `--peer-device cpu|cuda` (where the peer runs),
//! `--peer-amp bf16|f16` (also the peer with automatic mixed precision, a second ratio),
//! `--peer-instructions avx2` (the peer limited to AVX2, against `flex-avx2`: the host kernels
//! limited alike, an AVX2 machine's code on an AVX-512 one),
//! `--peer-script PATH` (default: `xtask/peer/bilm_train_pytorch.py` of the repository that
//! `cargo run` runs in, else of the one built from), `--threads N`, `--rounds N` (run every
//! implementation N times, alternating, and report each one's median and its ratio to the
//! peer's: on a shared, noisy machine the ratio of medians taken in the same minutes is the
//! number to quote).
//! Each implementation of elmo-rs also prints every step's loss (`LOSSES name: …`, warm-up
//! first): one model, seed and corpus, so two implementations agree to float rounding.
//! With `--phases` each backend also prints its step's phases (ms per step, the device
//! synchronised at every phase boundary: see `elmo_train::StepProfile`).
//! `--launch-probe BACKEND` instead times one elementwise operation issued many times in a row
//! (µs per operation on a 1-element and a `[64, 1200]` tensor, to the device's results): on a
//! GPU, the cost of one kernel launch that a training step pays ~1,700 times (docs/benchmarks.md).
//! `--matmul-probe BACKEND [f16]` times each of cubek's matmul kernels on the training step's
//! and `original` inference's product shapes, whole and (training's long inner dimensions) split
//! as the step splits them, with `f16` in 16 bits (`MATMUL` lines: µs, TFLOPS, largest
//! difference from burn's `f32` product).
//!
//! Built with the `elmo` binary's features (`cargo xtask bench train`), so no second build of
//! burn.

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use elmo_test_support::bench::{flag_value, peak_rss_mib};
use elmo_train::batcher::Batcher;
use elmo_train::language_model::CarriedState;
use elmo_train::loss_scale::{LossScale, ScaledStep};
use elmo_train::optimizer::build_optimizer;
use elmo_train::optimizer_step::{StepSettings, optimizer_step_overlapping};
use elmo_train::run::seeded_model;
use elmo_train::{StepInput, StepProfile, TrainConfig, Vocabulary};
use rand::{Rng, SeedableRng};

mod common;
use common::{backend_and_kernels, bench_device, child_error};

/// A Zipfian corpus over `w0 … w{V-4}` (sentences of 10-30 words).
fn write_corpus(path: &std::path::Path, n_vocab: usize, n_sentences: usize) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("corpus file"));
    let n_words = n_vocab - 3;
    for _ in 0..n_sentences {
        let len = rng.random_range(10..30);
        let words: Vec<String> = (0..len)
            .map(|_| {
                let u: f64 = rng.random();
                let k = ((u * (n_words as f64 + 1.0).ln()).exp() as usize).saturating_sub(1);
                format!("w{}", k.min(n_words - 1))
            })
            .collect();
        writeln!(out, "{}", words.join(" ")).expect("write corpus");
    }
}

struct Settings {
    preset: String,
    steps: usize,
    batch_size: usize,
    unroll_steps: usize,
    vocab_size: usize,
    negatives: usize,
    phases: bool,
}

fn child(name: &str, s: &Settings) {
    let (backend, kernels) = backend_and_kernels(name);
    let base = bench_device(backend);
    let train_device = base.clone().autodiff();
    let mut config =
        TrainConfig::from_preset_or_file(&s.preset).expect("--preset: a preset or a config file");
    config.batch_size = s.batch_size;
    config.unroll_steps = s.unroll_steps;
    config.negatives = s.negatives;
    let vocab = Vocabulary::from_tokens((0..s.vocab_size - 3).map(|k| format!("w{k}")));
    let dir = std::env::temp_dir().join(format!("elmo-bench-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let corpus = dir.join("corpus.txt");
    write_corpus(&corpus, s.vocab_size, 20_000);
    let mut model = seeded_model(&config, &vocab, 0, &train_device).with_kernels(kernels);
    let mut optimizer = build_optimizer(&config.optimizer, kernels);
    let profile = StepProfile::new();
    let shape = config.batch_shape();
    let mut batcher = Batcher::new(vec![corpus], false, Arc::new(vocab.clone()), shape, Some(1));
    let mut state: Option<CarriedState> = None;
    let mut prefetched = None;
    let mut targets = 0usize;
    let mut losses_per_step = Vec::with_capacity(s.steps + 1);
    // Mixed precision scales the loss as `elmo train --precision mixed` does.
    let mut loss_scale = kernels
        .precision
        .scales_loss(&base)
        .then(LossScale::default);
    let mut skipped = 0usize;
    let mut start = Instant::now();
    for step in 0..=s.steps {
        if step == 1 {
            // Step 0 is the warm-up (allocations, autotuning).
            start = Instant::now();
            targets = 0;
            profile.take();
        }
        // As `Trainer::step`: the next batch is read and prepared while the device runs this
        // step.
        let mut next_input = |step: usize| {
            let batch = batcher.next_batch().expect("batch").expect("endless");
            StepInput::prepare(&batch, &config, vocab.len(), 1, step as u64)
        };
        let input = match prefetched.take() {
            Some(input) => input,
            None => next_input(step),
        };
        let (next, losses) = optimizer_step_overlapping(
            model,
            &mut optimizer,
            &input,
            &mut state,
            StepSettings {
                config: &config,
                n_vocab: vocab.len(),
                seed: 1,
                step: step as u64,
                lr_scale: 1.0,
                device: &train_device,
                tower_devices: &[],
                loss_scale: loss_scale.map(|s| s.scale),
                profile: s.phases.then_some(&profile),
            },
            || prefetched = Some(next_input(step + 1)),
        )
        .unwrap_or_else(|error| {
            let source = std::error::Error::source(&error).map(ToString::to_string);
            panic!("{error}: {}", source.unwrap_or_default())
        });
        model = next;
        if let Some(loss_scale) = &mut loss_scale {
            skipped += usize::from(losses.skipped);
            loss_scale.update(ScaledStep::of(&losses));
        }
        targets += (losses.n_forward + losses.n_backward) as usize;
        losses_per_step.push(format!("{:.6}", losses.loss));
    }
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    let phases = profile.take();
    let profiled: f64 = phases.iter().map(|(_, t)| t.as_secs_f64()).sum();
    for (phase, total) in &phases {
        println!(
            "PHASE {name}: {phase}: {:.1} ms per step ({:.0}%)",
            1000.0 * total.as_secs_f64() / s.steps as f64,
            100.0 * total.as_secs_f64() / profiled
        );
    }
    // Every step's loss (warm-up first), to compare implementations: one model, seed and data.
    println!("LOSSES {name}: {}", losses_per_step.join(" "));
    if let Some(loss_scale) = loss_scale {
        println!(
            "LOSS_SCALE {name}: {} after {skipped} skipped steps",
            loss_scale.scale
        );
    }
    if let Some(line) = common::cublas_line(name, backend) {
        println!("{line}");
    }
    println!(
        "RESULT backend={name} targets={targets} seconds={seconds:.3} tokens_per_s={:.1} peak_rss_mib={:.0} parameters={}",
        targets as f64 / seconds,
        peak_rss_mib(),
        model.n_parameters()
    );
}

/// `--launch-probe`: µs per `add_scalar` issued `n` times in a row, after a warm-up, to the read
/// of the result (which waits for the device).
fn launch_probe(backend: &str) {
    use burn::tensor::Tensor;
    let device = bench_device(backend);
    for (shape, n) in [([1, 1], 5000), ([64, 1200], 2000)] {
        let mut x = Tensor::<2>::zeros(shape, &device);
        for _ in 0..100 {
            x = x.add_scalar(1.0);
        }
        let _ = x.clone().sum().into_scalar::<f32>();
        let start = Instant::now();
        for _ in 0..n {
            x = x.add_scalar(1.0);
        }
        let issued = start.elapsed();
        let value = x.slice([0..1, 0..1]).into_scalar::<f32>();
        let total = start.elapsed();
        let micros = |d: std::time::Duration| 1e6 * d.as_secs_f64() / n as f64;
        println!(
            "LAUNCH backend={backend} shape={}x{} ops={n} issue_us={:.1} total_us={:.1} (value {value})",
            shape[0],
            shape[1],
            micros(issued),
            micros(total)
        );
    }
}

/// `--matmul-probe BACKEND [f16]`: µs and TFLOPS of each of cubek's matmul kernels
/// (`elmo_kernels::MatmulKernel`) on the product shapes of a `ptb-large.json`
/// training step at 256 × 35 (the full softmax's chunk of 419 rows of a 10k vocabulary, the
/// LSTM's weight gradient over 8,960 rows, one time step's products, the char CNN's highway),
/// the batched products that the training step runs where it splits K (`split_product.rs`: a
/// step's `∂z·Wᵀ` of both directions in 32 slices, the softmax's `∂z·W` in 6 at `ptb-large` and
/// in 32 at `original`'s 8,192 sampled candidates), and of `original` inference (a step's state
/// product and projection at 256 and 1,024 sentences, both directions, and the input
/// projection of 27 steps), each product repeated after a warm-up, with its largest difference
/// from burn's `f32` product; with `f16` the operands in `f16` (the tensor-core kernels,
/// `--precision mixed`).
#[cfg(feature = "kernels")]
fn matmul_probe(backend: &str, half: bool) {
    use burn::tensor::{Distribution, Tensor};
    let device = bench_device(backend);
    let normal = Distribution::Normal(0.0, 1.0);
    let random = |shape: [usize; 2]| Tensor::<2>::random(shape, normal, &device);
    let random3 = |shape: [usize; 3]| Tensor::<3>::random(shape, normal, &device);
    // `[m, k] · [k, n]`, both factors row-major.
    let plain = |what, m, k, n| (what, random([m, k]), random([k, n]));
    // (what, lhs, rhs): a transposed factor as the training step has it.
    let shapes = [
        (
            "logits h·Wt",
            random([419, 256]),
            random([10_002, 256]).transpose(),
        ),
        plain("softmax dz·W", 419, 10_002, 256),
        (
            "softmax dzt·h",
            random([419, 10_002]).transpose(),
            random([419, 256]),
        ),
        (
            "lstm xt·dz",
            random([8_960, 1_200]).transpose(),
            random([8_960, 4_800]),
        ),
        plain("lstm step h·W", 128, 256, 4_800),
        (
            "lstm step dz·Wt",
            random([128, 4_800]),
            random([256, 4_800]).transpose(),
        ),
        plain("highway x·W", 8_960, 1_100, 2_200),
        plain("original step h·W 256", 512, 512, 16_384),
        plain("original step h·W 1024", 2_048, 512, 16_384),
        plain("original step c·Wp 256", 512, 4_096, 512),
        plain("original x·Wx 256", 13_824, 512, 16_384),
    ];
    for (what, lhs, rhs) in shapes {
        probe_product(what, lhs, rhs, half);
    }
    // `[b, m, k] · [b, k, n]`: the split products (slices of K as batches, row-major slices).
    let batched = |what, b, m, k, n| (what, random3([b, m, k]), random3([b, k, n]));
    let split = [
        batched("split step dz·Wt 2x256 32", 64, 256, 150, 256),
        batched("split softmax dz·W 419 6", 6, 419, 1_667, 256),
        batched("split sampled dz·W 512 32", 32, 512, 256, 512),
    ];
    for (what, lhs, rhs) in split {
        probe_product(what, lhs, rhs, half);
    }
}

/// One `--matmul-probe` product with every kernel: a `MATMUL` line each (µs over 20 runs after
/// a warm-up, TFLOPS, largest difference from burn's `f32` product), or why it did not launch.
///
/// # Shapes
/// - lhs: `[.., M, K]`; rhs: `[.., K, N]`
#[cfg(feature = "kernels")]
fn probe_product<const D: usize>(
    what: &str,
    lhs: burn::tensor::Tensor<D>,
    rhs: burn::tensor::Tensor<D>,
    half: bool,
) {
    use burn::tensor::FloatDType;
    use elmo_kernels::{MatmulKernel, matmul_with, to_half};
    let precision = if half { "f16" } else { "f32" };
    let half_type = half.then_some(FloatDType::F16);
    let dims = lhs.dims();
    let batches: usize = dims[..D - 2].iter().product();
    let [m, k, n] = [dims[D - 2], dims[D - 1], rhs.dims()[D - 1]];
    let shape = match batches {
        1 => format!("{m}x{k}x{n}"),
        _ => format!("{batches}x{m}x{k}x{n}"),
    };
    let expected = lhs.clone().matmul(rhs.clone());
    let (lhs, rhs) = (to_half(lhs, half_type), to_half(rhs, half_type));
    for kernel in MatmulKernel::ALL {
        let run = || matmul_with(lhs.clone(), rhs.clone(), kernel);
        let product = match run() {
            Ok(product) => product,
            Err(error) => {
                println!(
                    "MATMUL {what} {shape} {precision} kernel={} unavailable: {error}",
                    kernel.name()
                );
                continue;
            }
        };
        let difference = match (product.cast(FloatDType::F32) - expected.clone())
            .abs()
            .max()
            .try_into_scalar::<f32>()
        {
            Ok(difference) => difference,
            Err(error) => {
                println!(
                    "MATMUL {what} {shape} {precision} kernel={} failed: {error:?}",
                    kernel.name()
                );
                break;
            }
        };
        let n_runs = 20;
        let start = Instant::now();
        let mut last = None;
        for _ in 0..n_runs {
            last = run().ok();
        }
        let _ = last.map(|p| {
            p.flatten::<1>(0, D - 1)
                .narrow(0, 0, 1)
                .into_scalar::<f32>()
        });
        let seconds = start.elapsed().as_secs_f64() / n_runs as f64;
        println!(
            "MATMUL {what} {shape} {precision} kernel={} us={:.1} tflops={:.2} max_difference={difference:.2e}",
            kernel.name(),
            1e6 * seconds,
            2.0 * (batches * m * k * n) as f64 / seconds / 1e12
        );
    }
}

/// `--blas-check BACKEND`: cuBLAS's products (`elmo_kernels::cublas_product`) of operands made
/// on the host and uploaded, in the layouts the training and inference paths hand it (row-major,
/// a transposed view of either factor, rows sliced out of a larger tensor, batched, one right
/// factor for every batch, `f16` operands), each against the host's product: a `BLAS` line per
/// case and whether all were within `1e-4` (`f32`) or `1e-3` (`f16`) of the result's scale. No
/// kernel of CubeCL runs (views and uploads only), so it also checks the stand-in cuBLAS of
/// `cuda-check.sh`.
#[cfg(feature = "cuda-runtime")]
fn blas_check(backend: &str) -> bool {
    use burn::tensor::{DType, Tensor, TensorData, f16};
    let device = bench_device(backend);
    // Deterministic values in [-1, 1), exact in f16.
    let values = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 + seed * 13) % 64) as f32 / 32.0 - 1.0)
            .collect()
    };
    let upload = |shape: &[usize], seed: usize, half: bool| -> (Tensor<3>, Vec<f32>) {
        let host = values(shape.iter().product(), seed);
        let data = match half {
            true => TensorData::new(
                host.iter().map(|&x| f16::from_f32(x)).collect(),
                shape.to_vec(),
            ),
            false => TensorData::new(host.clone(), shape.to_vec()),
        };
        (Tensor::<3>::from_data(data, &device), host)
    };
    // The host's `[b, m, k]·[b or 1, k, n]` from row-major values.
    let reference = |a: &[f32], b: &[f32], [batch, m, k, n]: [usize; 4], shared: bool| {
        let mut out = vec![0f64; batch * m * n];
        for s in 0..batch {
            let b_at = if shared { 0 } else { s * k * n };
            for i in 0..m {
                for j in 0..n {
                    out[(s * m + i) * n + j] = (0..k)
                        .map(|l| a[(s * m + i) * k + l] as f64 * b[b_at + l * n + j] as f64)
                        .sum();
                }
            }
        }
        out
    };
    let transpose = |x: &[f32], rows: usize, cols: usize| -> Vec<f32> {
        (0..rows * cols)
            .map(|i| x[(i % rows) * cols + i / rows])
            .collect()
    };
    let (m, k, n) = (37, 70, 45);
    let mut all_ok = true;
    let mut check =
        |case: &str, product: Result<Tensor<3>, String>, expected: Vec<f64>, half: bool| {
            let outcome = product.and_then(|out| {
                if out.dtype() != DType::F32 {
                    return Err(format!("result in {:?}", out.dtype()));
                }
                out.into_data()
                    .try_into_vec::<f32>()
                    .map_err(|e| format!("{e:?}"))
            });
            let line = match outcome {
                Ok(got) if got.len() == expected.len() => {
                    let scale = expected.iter().fold(1f64, |a, &b| a.max(b.abs()));
                    let difference = got
                        .iter()
                        .zip(&expected)
                        .fold(0f64, |a, (&g, &e)| a.max((g as f64 - e).abs()));
                    let ok = difference <= if half { 1e-3 } else { 1e-4 } * scale;
                    all_ok &= ok;
                    format!(
                        "max_difference={difference:.2e} scale={scale:.1} {}",
                        if ok { "ok" } else { "FAILED" }
                    )
                }
                Ok(got) => {
                    all_ok = false;
                    format!("FAILED: {} values for {}", got.len(), expected.len())
                }
                Err(error) => {
                    all_ok = false;
                    format!("FAILED: {error}")
                }
            };
            println!("BLAS {case}: {line}");
        };
    let product = |l: Tensor<3>, r: Tensor<3>| elmo_kernels::cublas_product(l, r, None);
    for half in [false, true] {
        let kind = if half { "f16" } else { "f32" };
        let (a, a_host) = upload(&[1, m, k], 1, half);
        let (b, b_host) = upload(&[1, k, n], 2, half);
        let expected = reference(&a_host, &b_host, [1, m, k, n], false);
        check(
            &format!("{kind} row-major"),
            product(a.clone(), b.clone()),
            expected.clone(),
            half,
        );
        // The right factor as a transposed view of `[n, k]` (a weight read as `Wᵀ`).
        let (bt, bt_host) = upload(&[1, n, k], 3, half);
        let expected_t = reference(&a_host, &transpose(&bt_host, n, k), [1, m, k, n], false);
        check(
            &format!("{kind} right transposed"),
            product(a.clone(), bt.swap_dims(1, 2)),
            expected_t,
            half,
        );
        // The left factor as a transposed view of `[k, m]` (a weight gradient's `xᵀ`).
        let (at, at_host) = upload(&[1, k, m], 4, half);
        let expected_t = reference(&transpose(&at_host, k, m), &b_host, [1, m, k, n], false);
        check(
            &format!("{kind} left transposed"),
            product(at.swap_dims(1, 2), b.clone()),
            expected_t,
            half,
        );
        // Rows 5..25 of a larger left factor (an offset into its buffer).
        let (big, big_host) = upload(&[1, 40, k], 5, half);
        let rows = big.narrow(1, 5, 20);
        let expected = reference(&big_host[5 * k..25 * k], &b_host, [1, 20, k, n], false);
        check(
            &format!("{kind} sliced rows"),
            product(rows, b.clone()),
            expected,
            half,
        );
        // Batched, and one right factor for every batch.
        let (a3, a3_host) = upload(&[3, m, k], 6, half);
        let (b3, b3_host) = upload(&[3, k, n], 7, half);
        let expected = reference(&a3_host, &b3_host, [3, m, k, n], false);
        check(
            &format!("{kind} batched"),
            product(a3.clone(), b3),
            expected,
            half,
        );
        let expected = reference(&a3_host, &b_host, [3, m, k, n], true);
        check(
            &format!("{kind} shared right factor"),
            product(a3, b.clone()),
            expected,
            half,
        );
    }
    println!("BLAS check: {}", if all_ok { "all ok" } else { "FAILED" });
    all_ok
}

fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or("?")
        .to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str, default: &str| flag_value(&args, flag, default);
    let number = |flag: &str, default: &str| -> usize {
        get(flag, default)
            .parse()
            .unwrap_or_else(|_| panic!("{flag} takes a number"))
    };
    let settings = Settings {
        preset: get("--preset", "small"),
        steps: number("--steps", "3"),
        batch_size: number("--batch-size", "32"),
        unroll_steps: number("--unroll-steps", "20"),
        vocab_size: number("--vocab-size", "50000"),
        negatives: number("--negatives", "8192"),
        phases: args.iter().any(|a| a == "--phases"),
    };
    if let Some(i) = args.iter().position(|a| a == "--launch-probe") {
        launch_probe(args.get(i + 1).map_or("wgpu", String::as_str));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--blas-check") {
        let backend = args.get(i + 1).map_or("cuda", String::as_str);
        #[cfg(feature = "cuda-runtime")]
        let passed = blas_check(backend);
        // A check that cannot run fails: CI must not pass a build that left cuBLAS out.
        #[cfg(not(feature = "cuda-runtime"))]
        let passed = {
            eprintln!(
                "--blas-check {backend}: this build has no `cuda` feature (`--features cuda`)"
            );
            false
        };
        if !passed {
            std::process::exit(1);
        }
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--matmul-probe") {
        #[cfg(feature = "kernels")]
        matmul_probe(
            args.get(i + 1).map_or("wgpu", String::as_str),
            args.get(i + 2).is_some_and(|a| a == "f16"),
        );
        #[cfg(not(feature = "kernels"))]
        eprintln!("--matmul-probe {i}: built without the `kernels` feature");
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], &settings);
        return;
    }
    let backends = get("--backends", "flex,ndarray");
    let threads = get("--threads", "");
    let peer = get("--peer", "");
    let peer_device = get("--peer-device", "cpu");
    let peer_script = get(
        "--peer-script",
        &common::peer_script("bilm_train_pytorch.py"),
    );
    let rounds = number("--rounds", "1").max(1);
    let exe = std::env::current_exe().expect("own path");
    let common = [
        ("--preset", settings.preset.clone()),
        ("--steps", settings.steps.to_string()),
        ("--batch-size", settings.batch_size.to_string()),
        ("--unroll-steps", settings.unroll_steps.to_string()),
        ("--vocab-size", settings.vocab_size.to_string()),
        ("--negatives", settings.negatives.to_string()),
    ];
    println!(
        "preset {}, batch {} x {} steps, vocabulary {} ({} softmax, {} negatives), {} timed steps after one warm-up",
        settings.preset,
        settings.batch_size,
        settings.unroll_steps,
        settings.vocab_size,
        if settings.vocab_size > 2 * settings.negatives {
            "sampled"
        } else {
            "full"
        },
        settings.negatives,
        settings.steps
    );
    let mut runs: Vec<(String, Command)> = backends
        .split(',')
        .map(|backend| {
            let mut command = Command::new(&exe);
            command.args(["--child", backend]);
            if settings.phases {
                command.arg("--phases");
            }
            for (flag, value) in &common {
                command.args([flag, value.as_str()]);
            }
            (format!("elmo-rs {backend}"), command)
        })
        .collect();
    if !peer.is_empty() {
        let mut command = Command::new(&peer);
        command.arg(&peer_script);
        for (flag, value) in &common {
            command.args([flag, value.as_str()]);
        }
        if !threads.is_empty() {
            command.args(["--threads", &threads]);
        }
        command.args(["--device", &peer_device]);
        let limited = common::limit_peer(&mut command, &get("--peer-instructions", "widest"));
        runs.push((format!("PyTorch peer ({peer_device}{limited})"), command));
    }
    let peer_index = (!peer.is_empty()).then(|| runs.len() - 1);
    let peer_amp = get("--peer-amp", "off");
    if !peer.is_empty() && peer_amp != "off" {
        let (_, f32_peer) = &runs[runs.len() - 1];
        let mut command = Command::new(f32_peer.get_program());
        command.args(f32_peer.get_args()).args(["--amp", &peer_amp]);
        for (key, value) in f32_peer.get_envs() {
            if let Some(value) = value {
                command.env(key, value);
            }
        }
        runs.push((
            format!("PyTorch peer ({peer_device}, AMP {peer_amp})"),
            command,
        ));
    }
    let amp_index = (runs.len() > peer_index.map_or(usize::MAX, |i| i + 1)).then(|| runs.len() - 1);
    for (_, command) in &mut runs {
        if !threads.is_empty() {
            command.env("RAYON_NUM_THREADS", &threads);
        }
    }
    // Per implementation: targets/s of each round, peak RSS of the last.
    let mut measured: Vec<(Vec<f64>, String)> = vec![(Vec::new(), String::new()); runs.len()];
    for _ in 0..rounds {
        for ((name, command), (speeds, rss)) in runs.iter_mut().zip(&mut measured) {
            let output = command.output().expect("run benchmark child");
            let stdout = String::from_utf8_lossy(&output.stdout);
            for line in
                (stdout.lines()).filter(|l| l.starts_with("PHASE ") || l.starts_with("CUBLAS "))
            {
                println!("{line}");
            }
            for line in stdout.lines().filter_map(|l| l.strip_prefix("LOSSES ")) {
                let losses = line.split_once(": ").map_or(line, |(_, losses)| losses);
                println!("LOSSES {name}: {losses}");
            }
            match stdout.lines().find(|l| l.starts_with("RESULT")) {
                Some(line) => {
                    speeds.push(field(line, "tokens_per_s").parse().unwrap_or(f64::NAN));
                    *rss = field(line, "peak_rss_mib");
                    let gpu = field(line, "peak_gpu_mib");
                    if gpu != "?" {
                        *rss = format!("{rss} (GPU {gpu})");
                    }
                }
                None => eprintln!(
                    "{name} failed ({}): {}",
                    output.status,
                    child_error(&output.stderr)
                ),
            }
        }
    }
    let median = |speeds: &[f64]| -> Option<f64> {
        let mut sorted = speeds.to_vec();
        sorted.sort_by(f64::total_cmp);
        (!sorted.is_empty()).then(|| sorted[sorted.len() / 2])
    };
    let median_of = |index: Option<usize>| index.and_then(|i| median(&measured[i].0));
    let (peer_median, amp_median) = (median_of(peer_index), median_of(amp_index));
    println!(
        "| implementation | targets/s (median of {rounds}) | rounds | vs peer | vs AMP peer | peak RSS (MiB) |"
    );
    println!("|---|---|---|---|---|---|");
    let ratio = |m: f64, to: Option<f64>| to.map_or(String::new(), |p| format!("{:.2}x", m / p));
    for ((name, _), (speeds, rss)) in runs.iter().zip(&measured) {
        let Some(m) = median(speeds) else {
            println!("| {name} | failed | | | | |");
            continue;
        };
        let all: Vec<String> = speeds.iter().map(|v| format!("{v:.0}")).collect();
        println!(
            "| {name} | {m:.1} | {} | {} | {} | {rss} |",
            all.join(", "),
            ratio(m, peer_median),
            ratio(m, amp_median)
        );
    }
}
