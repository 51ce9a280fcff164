//! `cargo xtask bench embed`: ELMo inference throughput (tokens/s) and peak memory for random
//! weights in the published `small` and `original` shapes, per backend.
//!
//! Each (shape, backend) runs in its own child process so that its peak RSS (`VmHWM`) is its own.
//! Options: `--shapes small,original` `--backends flex,ndarray` (`flex-composed`: flex without
//! the host loop of the recurrence, burn's operations only; `wgpu`: the fused inference kernels,
//! directions paired; `wgpu-apart`: not paired; `wgpu-whole`: step products not split;
//! `wgpu-composed`: burn's operations only; `wgpu-burnmm`: large products through burn's matmul
//! choice; `wgpu-mixed`, `flex-mixed`: `--precision mixed`; `vulkan`: wgpu
//! pinned to Vulkan, SPIR-V kernels) `--batches N` `--batch-size B[,B...]` (one row per
//! size; a batch is one call of the LSTM) `--text zipf|uniform` `--threads N` (sets
//! RAYON_NUM_THREADS for the children)
//! `--token-cache-mib M` (the token-embedding cache of `elmo embed`, empty before the warm-up
//! batch; 0, the default, encodes every batch's words anew).
//! `--peer PYTHON` also runs the PyTorch peer (`xtask/peer/elmo_pytorch.py`, AllenNLP's loop) on
//! each shape and batch size in the same run, with `--threads` threads (default 2) on
//! `--peer-device cpu|cuda` (default cpu), and prints its ratio; `--peer-precision f32,bf16`
//! runs it in each precision listed (`bf16`: under `torch.autocast`; default `f32`), each
//! elmo-rs row then giving its ratio to each; `--peer-instructions avx2`
//! limits it to AVX2 (against `flex-avx2`, the host kernels limited alike: an AVX2 machine's
//! code on an AVX-512 one), `avx512` to AVX-512 with bf16 dot products and without AMX
//! (against `flex-mixed-avx512`: a Zen 4's instructions on a Xeon with AMX).
//! The first line names the CPU (model, cores, SIMD flags), so that every table says where it
//! was measured.
//! On a GPU backend (and the peer on CUDA) the timed batches are the steady state of a long run:
//! one untimed pass over them first compiles every kernel their shapes need; its seconds are the
//! table's `first pass` (`0` on the CPU, which compiles nothing).
//! `ELMO_BENCH_BREAKDOWN=1` also prints the time of the same batches embedded again (their
//! kernels compiled), of the token encoder and of the LSTM stacks, and of the biLM's layers
//! computed, read back as one stacked tensor and made a `Vec`.

use std::process::Command;
use std::time::Instant;

use burn::tensor::Device;
use elmo_model::options::BiLmOptions;
use elmo_model::{BiLmConfig, CharIdBatch, EmbedderConfig};

use elmo_test_support::bench::{flag_value, peak_rss_mib};

mod common;
use common::{backend_and_kernels, bench_device, child_error};

/// The CPU this runs on: model name, logical cores and the SIMD extensions that matter to the
/// matmul kernels (from `/proc/cpuinfo`; "unknown" elsewhere).
fn cpu_description() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let value = |key: &str| {
        info.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let model = value("model name").unwrap_or_else(|| "unknown CPU".into());
    let flags = value("flags").unwrap_or_default();
    let simd: Vec<&str> = flags
        .split_whitespace()
        .filter(|f| {
            matches!(
                *f,
                "avx2"
                    | "fma"
                    | "avx512f"
                    | "avx512bw"
                    | "avx512_bf16"
                    | "avx512_fp16"
                    | "amx_tile"
            )
        })
        .collect();
    let cores = info.lines().filter(|l| l.starts_with("processor")).count();
    format!("CPU: {model}, {cores} logical cores, {}", simd.join(" "))
}

/// The published shapes (`elmo train`'s presets).
fn options(shape: &str) -> BiLmOptions {
    elmo_train::TrainConfig::preset(shape)
        .unwrap_or_else(|| panic!("unknown shape {shape} (tiny, small, medium, original)"))
        .model
}

/// Deterministic sentences of 15-25 tokens. With `zipf`, words are drawn from a 20,000-type
/// vocabulary with Zipf(1) frequencies (as natural text: a batch repeats its frequent words);
/// with `uniform`, every token is a fresh random word (no repetition: the worst case).
fn sentences(n: usize, seed: u64, text: &str) -> Vec<Vec<String>> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let word = |mut id: usize| -> String {
        // A fixed spelling per word id: 1-9 letters.
        let len = 1 + id % 9;
        (0..len)
            .map(|_| {
                id = id.wrapping_mul(2654435761).wrapping_add(12345) % 1_000_003;
                (b'a' + (id % 26) as u8) as char
            })
            .collect()
    };
    const VOCAB: usize = 20_000;
    let harmonic: f64 = (1..=VOCAB).map(|r| 1.0 / r as f64).sum();
    (0..n)
        .map(|_| {
            let len = 15 + next() % 11;
            (0..len)
                .map(|_| match text {
                    "uniform" => word(next()),
                    _zipf => {
                        // Inverse CDF of Zipf(1) by a short scan over the harmonic sum.
                        let u = (next() % 1_000_000) as f64 / 1_000_000.0 * harmonic;
                        let (mut acc, mut rank) = (0.0, 1usize);
                        while rank < VOCAB {
                            acc += 1.0 / rank as f64;
                            if acc >= u {
                                break;
                            }
                            rank += 1;
                        }
                        word(rank)
                    }
                })
                .collect()
        })
        .collect()
}

/// What a child measures.
struct ChildSettings<'a> {
    batches: usize,
    batch_size: usize,
    text: &'a str,
    token_cache_mib: usize,
}

fn child(shape: &str, name: &str, s: &ChildSettings) {
    let (backend, kernels) = backend_and_kernels(name);
    let device = bench_device(backend);
    device.seed(0);
    let options = options(shape);
    let bilm = BiLmConfig { options }.init(&device).with_kernels(kernels);
    // `elmo embed`'s path: length batches, one read-back of the sentences' layers, handed out
    // per sentence (`embed_each_view`, what its HDF5 writer gets).
    // A batch is one call of the LSTM (sentences have at most 25 tokens and 2 boundaries).
    let config = EmbedderConfig {
        batch_size: s.batch_size,
        max_batch_positions: s.batch_size * 27,
        token_cache_bytes: s.token_cache_mib.saturating_mul(1 << 20),
        ..EmbedderConfig::default()
    };
    let data: Vec<Vec<Vec<String>>> = (0..s.batches)
        .map(|b| sentences(s.batch_size, b as u64, s.text))
        .collect();
    // A GPU backend compiles a kernel for each new shape it meets (the large products' tiles
    // follow their rows, which follow the batch's sentence lengths); NVRTC takes up to a second
    // a kernel. The timed batches measure the steady state of a long run: one untimed pass over
    // them first, by an embedder of its own so that the timed one's token cache starts empty.
    let first_pass = if compiles_kernels(backend) {
        let mut warm = config
            .clone()
            .init(bilm.clone(), &device)
            .expect("embedder");
        let start = Instant::now();
        for batch in &data {
            embed_batch(&mut warm, batch);
        }
        start.elapsed().as_secs_f64()
    } else {
        0.0
    };
    let mut embedder = config.init(bilm.clone(), &device).expect("embedder");
    embed_batch(&mut embedder, &sentences(s.batch_size, 999, s.text));
    let tokens: usize = data.iter().flatten().map(Vec::len).sum();
    let start = Instant::now();
    for batch in &data {
        embed_batch(&mut embedder, batch);
    }
    let seconds = start.elapsed().as_secs_f64();
    if std::env::var("ELMO_BENCH_BREAKDOWN").is_ok() {
        // The same batches again: every kernel of their shapes compiled by now.
        let start = Instant::now();
        for batch in &data {
            embed_batch(&mut embedder, batch);
        }
        eprintln!(
            "breakdown: embed {seconds:.3} s, the same batches again {:.3} s",
            start.elapsed().as_secs_f64()
        );
        let data: Vec<CharIdBatch> = data
            .iter()
            .map(|b| CharIdBatch::from_sentences(b))
            .collect();
        breakdown(&bilm, &data, &device);
    }
    let cache = embedder.token_cache();
    let hit_rate = cache.map_or(0.0, |c| {
        100.0 * c.hits() as f64 / (c.hits() + c.misses()).max(1) as f64
    });
    if let Some(line) = common::cublas_line(&format!("{name} {shape}"), backend) {
        println!("{line}");
    }
    println!(
        "RESULT shape={shape} backend={backend} batch={} tokens={tokens} seconds={seconds:.3} tokens_per_s={:.1} peak_rss_mib={:.0} cache_hit_percent={hit_rate:.1} first_pass_s={first_pass:.3}",
        s.batch_size,
        tokens as f64 / seconds,
        peak_rss_mib()
    );
}

/// Embeds `batch` as `elmo embed` does, each sentence's vectors borrowed from the batch's
/// read-back (its writer copies them into the HDF5 file); returns the values handed out.
fn embed_batch(embedder: &mut elmo_model::Embedder, batch: &[Vec<String>]) -> usize {
    let mut n_values = 0;
    embedder
        .embed_each_view(batch, |_, vectors| {
            n_values += vectors.values().len();
            Ok::<_, elmo_model::ElmoError>(())
        })
        .expect("embed");
    n_values
}

/// Whether `backend` (a name without its variant) compiles kernels at run time, shape by shape:
/// the CubeCL ones (WGSL, SPIR-V, CUDA through NVRTC), not the CPU's.
fn compiles_kernels(backend: &str) -> bool {
    matches!(backend, "wgpu" | "vulkan" | "cuda")
}

/// Waits until `tensor` is computed: reads one of its values to the host (`into_data` alone may
/// return before the device has run, its bytes copied at their first access).
fn wait_for<const D: usize>(tensor: burn::tensor::Tensor<D>) {
    let one = tensor.flatten::<1>(0, D - 1).narrow(0, 0, 1);
    one.into_data().try_into_vec::<f32>().expect("a value");
}

/// Time of the token encoder alone and of the LSTM stacks alone, then of an embedder call's
/// phases: the biLM's layers computed and stacked as one `[L + 1, B, T, 2P]` tensor
/// (synchronised by reading one value), read back to the host, and made a `Vec<f32>` (stderr).
fn breakdown(bilm: &elmo_model::BiLm, data: &[CharIdBatch], device: &Device) {
    let (mut compute, mut read_back, mut to_vec, mut bytes) = (0.0, 0.0, 0.0, 0usize);
    for batch in data {
        let start = Instant::now();
        let out = bilm
            .forward_batch_cached(batch, device, None, None)
            .expect("forward");
        let stacked = burn::tensor::Tensor::stack::<4>(out.layers, 0);
        wait_for(stacked.clone());
        compute += start.elapsed().as_secs_f64();
        let start = Instant::now();
        // A device's data may come lazily: the copy to the host happens at the first access.
        let host = stacked.into_data();
        read_back += start.elapsed().as_secs_f64();
        bytes += host.num_elements() * 4;
        let start = Instant::now();
        let values = host.try_into_vec::<f32>().expect("f32 values");
        to_vec += start.elapsed().as_secs_f64();
        drop(values);
    }
    eprintln!(
        "breakdown: embedder phases: layers computed {compute:.3} s, read back {read_back:.3} s \
         ({:.0} MB), to a Vec {to_vec:.3} s",
        bytes as f64 / 1e6
    );
    let (mut encoder, mut stacks) = (0.0, 0.0);
    for batch in data {
        let with = batch.with_sentence_boundaries();
        let start = Instant::now();
        let embedding = bilm.encode_tokens(&with, device);
        wait_for(embedding.clone());
        encoder += start.elapsed().as_secs_f64();
        let start = Instant::now();
        let out = bilm.run_stacks(embedding, &with.lengths, None);
        wait_for(out.forward[1].clone());
        wait_for(out.backward[1].clone());
        stacks += start.elapsed().as_secs_f64();
    }
    eprintln!("breakdown: token encoder {encoder:.3} s, LSTM stacks {stacks:.3} s");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str, default: &str| flag_value(&args, flag, default);
    let batches: usize = get("--batches", "3").parse().expect("--batches N");
    let batch_sizes: Vec<usize> = (get("--batch-size", "64").split(','))
        .map(|b| b.parse().expect("--batch-size N[,N...]"))
        .collect();
    let text = get("--text", "zipf");
    assert!(
        matches!(text.as_str(), "zipf" | "uniform"),
        "--text must be zipf or uniform, not {text}"
    );
    let token_cache_mib: usize = get("--token-cache-mib", "0")
        .parse()
        .expect("--token-cache-mib M");
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let settings = ChildSettings {
            batches,
            batch_size: batch_sizes[0],
            text: &text,
            token_cache_mib,
        };
        child(&args[i + 1], &args[i + 2], &settings);
        return;
    }
    let shapes = get("--shapes", "small,original");
    let backends = get("--backends", "flex,ndarray");
    let threads = get("--threads", "");
    let peer = get("--peer", "");
    let peer_device = get("--peer-device", "cpu");
    let peer_instructions = get("--peer-instructions", "widest");
    let peer_precisions = get("--peer-precision", "f32");
    let peer_script = get("--peer-script", &common::peer_script("elmo_pytorch.py"));
    let exe = std::env::current_exe().expect("own path");
    println!("{}", cpu_description());
    println!(
        "text: {text}, batches of 15-25 tokens, {batches} batches after one warm-up, \
         token cache {token_cache_mib} MiB"
    );
    println!(
        "| shape | batch | backend | tokens/s | peak RSS (MiB) | token cache hits (%) | vs peer | first pass (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let field = |line: &str, k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or("?")
            .to_string()
    };
    for (shape, batch_size) in
        (shapes.split(',')).flat_map(|shape| batch_sizes.iter().map(move |&b| (shape, b)))
    {
        // The peer first, so that elmo-rs's rows can say their ratio to it (to each of its
        // precisions).
        let peer_precisions: Vec<&str> = match peer.is_empty() {
            true => Vec::new(),
            false => peer_precisions.split(',').collect(),
        };
        let peer_speeds: Vec<(&str, Option<f64>)> = (peer_precisions.iter()).map(|&precision| {
            let peer_threads = if threads.is_empty() { "2" } else { &threads };
            let mut command = Command::new(&peer);
            command.args([
                &peer_script,
                shape,
                peer_threads,
                &batches.to_string(),
                &batch_size.to_string(),
                &peer_device,
                precision,
            ]);
            let limited = common::limit_peer(&mut command, &peer_instructions);
            let output = command.output().expect("run the PyTorch peer");
            let stdout = String::from_utf8_lossy(&output.stdout);
            match stdout.lines().find(|l| l.starts_with("RESULT")) {
                Some(line) => {
                    let speed = field(line, "tokens_per_s");
                    let on = match peer_device.as_str() {
                        "cpu" => format!("{peer_threads} threads{limited}"),
                        other => other.to_string(),
                    };
                    println!(
                        "| {shape} | {batch_size} | PyTorch peer ({on}, {precision}) | {speed} | {} | | 1.00x | {} |",
                        field(line, "peak_rss_mib"),
                        field(line, "first_pass_s")
                    );
                    (precision, speed.parse::<f64>().ok())
                }
                None => {
                    println!(
                        "| {shape} | {batch_size} | PyTorch peer ({precision}) | failed ({}): {} | | | | |",
                        output.status,
                        child_error(&output.stderr)
                    );
                    (precision, None)
                }
            }
        }).collect();
        for backend in backends.split(',') {
            let mut command = Command::new(&exe);
            command.args([
                "--child",
                shape,
                backend,
                "--batches",
                &batches.to_string(),
                "--batch-size",
                &batch_size.to_string(),
                "--text",
                &text,
                "--token-cache-mib",
                &token_cache_mib.to_string(),
            ]);
            if !threads.is_empty() {
                command.env("RAYON_NUM_THREADS", &threads);
            }
            let output = command.output().expect("run child");
            let stdout = String::from_utf8_lossy(&output.stdout);
            for line in stdout.lines().filter(|l| l.starts_with("CUBLAS ")) {
                println!("{line}");
            }
            match stdout.lines().find(|l| l.starts_with("RESULT")) {
                Some(line) => {
                    let speed = field(line, "tokens_per_s");
                    let ratios: Vec<String> = (peer_speeds.iter())
                        .filter_map(|&(precision, theirs)| {
                            let ours = speed.parse::<f64>().ok()?;
                            let ratio = ours / theirs?;
                            Some(match peer_speeds.len() {
                                1 => format!("{ratio:.2}x"),
                                _ => format!("{ratio:.2}x {precision}"),
                            })
                        })
                        .collect();
                    let ratio = ratios.join(", ");
                    println!(
                        "| {shape} | {batch_size} | {backend} | {speed} | {} | {} | {ratio} | {} |",
                        field(line, "peak_rss_mib"),
                        field(line, "cache_hit_percent"),
                        field(line, "first_pass_s")
                    );
                }
                None => println!(
                    "| {shape} | {batch_size} | {backend} | failed ({}): {} | | | | |",
                    output.status,
                    child_error(&output.stderr)
                ),
            }
        }
    }
}
