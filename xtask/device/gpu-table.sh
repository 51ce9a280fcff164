#!/usr/bin/env bash
# The GPU table of docs/benchmarks.md in one call on a lent GPU machine (from the repository
# root), after `bash xtask/device/prepare.sh` here:
#   run(command="bash xtask/device/gpu-table.sh", carry=[".gl", ".device"], timeout_s=560)
# Side by side in the same minutes, each elmo-rs line against the PyTorch peer on CUDA, in
# sections (`SECTIONS="inference spirv train mixedtrain where"`, the default, in that order;
# `quality` only when named):
#   inference: `bench_embed` (all layers read back to the host), `original` and `small`, batch
#      64 / 256 / 1024: elmo-rs wgpu with the fused inference kernels and paired directions
#      (`wgpu`, WGSL kernels), with the large products through burn's matmul choice instead of
#      the kernel of their shape (`wgpu-burnmm`, `large_product.rs`), with a step's whole
#      products through that kernel too (`wgpu-stepshaped`), with `--precision mixed`
#      (`wgpu-mixed`: f16 operands), and burn's operations (`wgpu-composed`); the
#      peer is AllenNLP's per-step loop (`xtask/peer/elmo_pytorch.py`) in f32;
#   spirv: the `vulkan` build's `wgpu-mixed` (SPIR-V kernels, f16 products on cooperative
#      matrices), `original` and `small` at 64 / 256 / 1024, against the same peer;
#   train: `bench_train` (`wgpu-burnmm`, `wgpu`): the `original` shape at bilm-tf's per-GPU
#      128 × 20 with a 50k vocabulary sampled 8192, then the PTB shapes at 256 and 512 rows;
#      the peer (`xtask/peer/bilm_train_pytorch.py`) in f32 and with bf16 autocast (AMP);
#   mixedtrain: the `vulkan` build's `bench_train` with `--precision mixed` (`wgpu-mixed`: f16
#      products forward and backward, loss scaling) at the `original` and `ptb-large` shapes,
#      against the peer in f32 and with f16 autocast and its GradScaler;
#   quality: `elmo train --backend vulkan` on PTB (`ptb-small.json` at 128 × 35, Adam, 400
#      steps or QUALITY_STEPS), `--precision f32` then `mixed`, the same seed: their
#      validation perplexities side by side
#      (needs `.device/elmo_spirv.xz` and `.device/ptb/`, which `prepare.sh` packs);
#   cudablas, cuda, cudatrain, cudaextra, cudaprobe (run where `.device-cuda/` was carried
#      instead of `.device/`, `CUDA=1 prepare.sh`, checked here first by `cuda-check.sh`):
#      cuBLAS's products against the host's (`--blas-check`, a few seconds), the `cuda` build's
#      inference rows (`cuda` with every kernel and its products through cuBLAS, `cuda-mixed`
#      with f16 operands), its training rows (`original` 128 × 20 and `ptb-large` 256 × 35;
#      `cuda`, `cuda-mixed`, both with cubek's products instead of cuBLAS's, `-cubek`, and
#      with every layer's per-step products through cuBLAS or cubek, `-blassteps`,
#      `-cubeksteps`, where by default the layer's size picks)
#      against the peer in f32 and with bf16 autocast, then that build's `wgpu` (WGSL, as the
#      default build), `cuda-cubek` and `cuda-blassteps` inference rows, and
#      `--matmul-probe cuda` in f32 and f16 (each cubek kernel per shape; NVRTC compiles each,
#      so it goes last); cudawhere: where a CUDA training step's time goes (launch cost,
#      phases, every kernel's GPU time at `original` 128 × 20 and `ptb-large` 256 × 35). An
#      inference child compiles its kernels with NVRTC (up to a second each) in its untimed
#      first pass;
#   targets (only when named): issue 48's target rows with the `cuda` build's defaults, a
#      short call (`original`, `ptb-large` and `ptb-small` 512-row training, inference at 64 /
#      256 / 1,024);
#   cpu (only when named): the machine's CPU, all its cores (`nproc`), `flex` against the
#      peer on the CPU with as many threads: inference `original` and `small` at batch 64,
#      training the `original` shape at 32 × 20;
#   where: `original` with `elmo embed`'s GPU defaults (1,024 sentences, the token cache), a
#      batch of 256 split into token encoder and LSTM time, an embedder
#      call's phases and a second pass (WGSL f32 and SPIR-V mixed), and its kernels' GPU time
#      ($OUT/kernels-*.txt).
# With `.device-cuda/` only: run(command="SECTIONS='cudablas cudatrain cuda cudawhere cudaextra
# cudaprobe cpu' bash xtask/device/gpu-table.sh", carry=[".gl", ".device-cuda"], timeout_s=560).
# Every section checks the time left, so that the call ends within its limit with what it has.
# Output: $OUT/gpu-table.log (also printed), $OUT/gpu-memory.csv (nvidia-smi every 200 ms).
set -uo pipefail
source xtask/device/setup.sh
log="$OUT/gpu-table.log"
budget="${BUDGET_S:-540}"

gpu_header "$log"

# Runs "$@" when at least $1 seconds of the budget are left (and for at most that long).
within() {
    local need="$1"
    shift
    local left=$((budget - SECONDS))
    if [ "$left" -lt "$need" ]; then
        echo "== skipped (${left} s left): $*" | tee -a "$log"
        return
    fi
    echo "== $* (at ${SECONDS} s)" | tee -a "$log"
    timeout "$left" "$@" 2>&1 | grep -v '^error: XDG_RUNTIME_DIR' | tee -a "$log"
}

# Inference rows of bench binary $1 (skipped where that build was not carried) against the
# peer: 10 batches of 64 or 256 sentences, 5 of 1,024 (one sample of 5 small batches moved by
# up to 2x between two calls).
embed_with() {
    local bench="$1"
    shift
    [ -x "$bench" ] || return 0
    within 40 "$bench" --peer python3 --peer-device cuda \
        --peer-script xtask/peer/elmo_pytorch.py "$@"
}
embed_sizes() {
    "$@" --batch-size 64,256 --batches 10
    "$@" --batch-size 1024 --batches 5
}
# Training rows of bench binary $1 against the peer ($train_steps timed steps).
train_with() {
    local bench="$1"
    shift
    [ -x "$bench" ] || return 0
    within 60 "$bench" --peer python3 --peer-device cuda \
        --peer-script xtask/peer/bilm_train_pytorch.py --steps "$train_steps" "$@"
}
# The default build (WGSL kernels); its training against the peer in f32 and with bf16 autocast.
embed() { embed_with /tmp/bench_embed "$@"; }
train() { train_with /tmp/bench_train --backends wgpu-burnmm,wgpu --peer-amp bf16 "$@"; }
# The `vulkan` build (`.device/bench_*_spirv.xz`: SPIR-V kernels on NVIDIA's Vulkan, f16
# products on cooperative matrices) with `--precision mixed`; its training against the peer's
# f16 autocast.
spirv() { embed_with /tmp/bench_embed_spirv "$@"; }
train_spirv() { train_with /tmp/bench_train_spirv --backends wgpu-mixed --peer-amp f16 "$@"; }

# The `cuda` build (`.device-cuda/bench_*_cuda.xz`: CubeCL's CUDA runtime, kernels compiled by
# NVRTC; its `wgpu` is the default build's WGSL path); its training against the peer's bf16
# autocast.
cuda() { embed_with /tmp/bench_embed_cuda "$@"; }
train_cuda() {
    train_with /tmp/bench_train_cuda \
        --backends "$cuda_train_backends" \
        --peer-amp bf16 "$@"
}

# A process's first minutes on the GPU are slow (docs/benchmarks.md): one untimed run first.
for bench in /tmp/bench_embed /tmp/bench_embed_cuda; do
    [ -x "$bench" ] && timeout 60 "$bench" --child original wgpu --batches 1 --batch-size 64 \
        > /dev/null 2>&1 && break
done

# Where an inference batch's time goes: the token encoder and the LSTM stacks timed apart
# (`ELMO_BENCH_BREAKDOWN`), then every kernel's GPU time (cubecl's profiling logger, summed
# by `kernel_times.py` per batch: 3 calls, the first launches left out). A profile runs in a
# folder under the repository's `target/` (its `cubecl.toml` turns the logger on), so that
# CubeCL still finds the carried compilation cache in `target/environment/`.
breakdown() {
    local bench="$1" backend="$2" shape="$3" batch="$4"
    within 30 env ELMO_BENCH_BREAKDOWN=1 "$bench" --child "$shape" "$backend" --batches 5 \
        --batch-size "$batch"
}
# Every kernel's GPU time in the command after $1 (a name) and $2 (the calls or training steps
# it makes, warm-up included), summed per call into $OUT/kernels-$1.txt.
profile_run() {
    local name="$1" calls="$2"
    shift 2
    local dir="$PWD/target/profile-$name"
    [ $((budget - SECONDS)) -ge 60 ] || { echo "== skipped profile $name" | tee -a "$log"; return; }
    rm -rf "$dir" && mkdir -p "$dir"
    printf '[profiling.logger]\nlevel = "full"\nfile = "%s/kernels.log"\nappend = false\n' "$dir" \
        > "$dir/cubecl.toml"
    echo "== profile $name (at ${SECONDS} s)" | tee -a "$log"
    (cd "$dir" && timeout 60 "$@" > /dev/null 2>&1)
    python3 xtask/device/kernel_times.py "$dir/kernels.log" "$calls" 25 > "$OUT/kernels-$name.txt"
    # The whole log too, for `launch_shapes.py` to join with the stand-in's launches of the
    # same run (`cuda-check.sh`): the GPU time of each matmul problem.
    xz -c "$dir/kernels.log" > "$OUT/kernels-$name.log.xz"
    head -n 32 "$OUT/kernels-$name.txt" | tee -a "$log"
}
profile() {
    local bench="$1" backend="$2" shape="$3" batch="$4"
    profile_run "$(basename "$bench")-$backend-$shape-$batch" 3 \
        "$bench" --child "$shape" "$backend" --batches 2 --batch-size "$batch"
}

# The training shapes of issue 48's targets and the timed steps of a training row.
source xtask/device/train-shapes.sh

# The sections, in the order of `SECTIONS` (default: all); the targets' rows first.
section_inference() {
    embed_sizes embed --shapes original --backends wgpu-composed,wgpu-burnmm,wgpu,wgpu-stepshaped,wgpu-mixed
    embed_sizes embed --shapes small --backends wgpu-composed,wgpu-burnmm,wgpu,wgpu-stepshaped
}
section_spirv() {
    embed_sizes spirv --shapes original,small --backends wgpu-mixed
}
section_train() {
    train "${original_128[@]}"
    train "${ptb_large_256[@]}"
    train --preset examples/configs/ptb-small.json --batch-size 512 --unroll-steps 35 --vocab-size 10002
}
section_mixedtrain() {
    train_spirv "${original_128[@]}"
    train_spirv "${ptb_large_256[@]}"
}
section_cuda() {
    [ -x /tmp/bench_embed_cuda ] || return 0
    # One child first with its whole stderr in the log: where NVRTC or the driver refuses,
    # the table would keep only the first line of the panic.
    within 60 /tmp/bench_embed_cuda --child small cuda-mixed --batches 1 --batch-size 8
    embed_sizes cuda --shapes original,small --backends cuda,cuda-mixed
}
# The same build's other rows, for comparison: its WGSL path and cubek's products.
section_cudaextra() {
    embed_sizes cuda --shapes original,small --backends wgpu,cuda-cubek,cuda-blassteps
}
# cuBLAS's products of uploaded operands in every layout the `cuda` build hands it, against the
# host's (a wrong stride or leading dimension shows here, not as a bad loss).
section_cudablas() {
    [ -x /tmp/bench_train_cuda ] || return 0
    within 30 /tmp/bench_train_cuda --blas-check cuda
}
# Issue 48's target rows only, with the `cuda` build's defaults (a short call): `original`
# training 128 × 20 (with cubek's per-step products and the char CNN's calls of 1,024 tokens
# beside) against the peer in f32 and bf16 AMP, inference `original` and `small` at 64 / 256 /
# 1,024, then `ptb-large` and `ptb-small` training.
section_targets() {
    train_with /tmp/bench_train_cuda --backends cuda,cuda-mixed,cuda-cubeksteps,cuda-chunk1024 \
        --peer-amp bf16 "${original_128[@]}"
    embed_sizes cuda --shapes original,small --backends cuda,cuda-mixed
    train_with /tmp/bench_train_cuda --backends cuda,cuda-mixed,cuda-blassteps,cuda-chunk1024 \
        --peer-amp bf16 "${ptb_large_256[@]}"
    train_with /tmp/bench_train_cuda --backends cuda,cuda-mixed --peer-amp bf16 "${ptb_small_512[@]}"
}
section_cudatrain() {
    train_cuda "${original_128[@]}"
    train_cuda "${ptb_large_256[@]}"
}
section_cudaprobe() {
    [ -x /tmp/bench_train_cuda ] || return 0
    within 60 /tmp/bench_train_cuda --matmul-probe cuda
    within 60 /tmp/bench_train_cuda --matmul-probe cuda f16
}
# Where a CUDA training step's time goes: the launch cost, each phase of a step (the device
# synchronised at every boundary) and every kernel's GPU time over 3 steps (warm-up included).
section_cudawhere() {
    [ -x /tmp/bench_train_cuda ] || return 0
    within 30 /tmp/bench_train_cuda --launch-probe cuda
    train_where original "${original_128[@]}"
    train_where ptb-large "${ptb_large_256[@]}"
}
# One training shape (the arguments after $1, its name): the phases of 4 steps, then the
# kernels of 3.
train_where() {
    local name="$1"
    shift
    within 60 /tmp/bench_train_cuda --backends cuda --steps 4 --phases "$@"
    profile_run "train-cuda-$name" 3 /tmp/bench_train_cuda --backends cuda --steps 2 "$@"
}
# The machine's CPU, all its cores, against the peer on the same cores (the CPU tables are
# measured on 2 vCPUs): inference `original` and `small` at batch 64, training the `original`
# shape at 32 × 20, both with the default build's `flex`.
section_cpu() {
    local embed_bench train_bench cores
    cores=$(nproc)
    for embed_bench in /tmp/bench_embed /tmp/bench_embed_cuda; do [ -x "$embed_bench" ] && break; done
    for train_bench in /tmp/bench_train /tmp/bench_train_cuda; do [ -x "$train_bench" ] && break; done
    [ -x "$embed_bench" ] && within 60 "$embed_bench" --shapes original,small --backends flex \
        --batch-size 64 --batches 3 --threads "$cores" --peer python3 \
        --peer-script xtask/peer/elmo_pytorch.py
    [ -x "$train_bench" ] && within 90 "$train_bench" --preset original --batch-size 32 \
        --unroll-steps 20 --steps 3 --backends flex --threads "$cores" --peer python3 \
        --peer-script xtask/peer/bilm_train_pytorch.py
}
section_quality() {
    if [ ! -x /tmp/elmo_spirv ] || [ ! -f .device/ptb/ptb.train.txt.xz ]; then
        echo "== skipped quality: no .device/elmo_spirv.xz or .device/ptb/" | tee -a "$log"
        return
    fi
    local data=/tmp/ptb steps="${QUALITY_STEPS:-400}"
    mkdir -p "$data"
    for f in train valid; do xz -dc ".device/ptb/ptb.$f.txt.xz" > "$data/ptb.$f.txt"; done
    /tmp/elmo_spirv vocab --quiet --out "$data/vocab.txt" "$data/ptb.train.txt"
    for precision in f32 mixed; do
        within 150 /tmp/elmo_spirv train --quiet --preset examples/configs/ptb-small.json \
            --batch-size 128 --optimizer adam --lr 0.002 --negatives 2048 \
            --train "$data/ptb.train.txt" --valid "$data/ptb.valid.txt" --vocab "$data/vocab.txt" \
            --out "/tmp/ptb-$precision" --steps "$steps" --checkpoint-every $((steps / 2)) \
            --log-every 50 --seed 1 --backend vulkan --precision "$precision"
        cp "/tmp/ptb-$precision/metrics.jsonl" "$OUT/quality-$precision.jsonl" 2>/dev/null
        grep -s '"valid"' "/tmp/ptb-$precision/metrics.jsonl" | tee -a "$log"
    done
}
section_where() {
    # `elmo embed`'s defaults on a GPU: 1,024 sentences a call and the 64 MiB token cache (on a
    # GPU its look-ups read the new words' vectors back before the LSTMs run).
    embed --shapes original --backends wgpu --batch-size 1024 --batches 5 --token-cache-mib 64
    breakdown /tmp/bench_embed wgpu original 256
    [ -x /tmp/bench_embed_spirv ] && breakdown /tmp/bench_embed_spirv wgpu-mixed original 256
    profile /tmp/bench_embed wgpu original 256
    [ -x /tmp/bench_embed_spirv ] && profile /tmp/bench_embed_spirv wgpu-mixed original 256
}
for section in ${SECTIONS:-inference spirv train mixedtrain where}; do
    "section_$section"
done

echo "done after ${SECONDS} s" | tee -a "$log"
stop_sampler
