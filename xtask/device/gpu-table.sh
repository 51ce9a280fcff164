#!/usr/bin/env bash
# The GPU table of docs/benchmarks.md in one call on a lent GPU machine (from the repository
# root), after `bash xtask/device/prepare.sh` here:
#   run(command="bash xtask/device/gpu-table.sh", carry=[".gl", ".device"], timeout_s=560)
# Side by side in the same minutes, each elmo-rs line against the PyTorch peer on CUDA:
#   1. inference (`bench_embed`, all layers read back to the host), `original` and `small`, batch
#      64 / 256 / 1024: elmo-rs wgpu with the fused inference kernels and paired directions
#      (`wgpu`, WGSL kernels), with the large products through burn's matmul choice instead of
#      the kernel of their shape (`wgpu-burnmm`, `large_product.rs`), with `--precision
#      mixed` (`wgpu-mixed`: f16 operands), burn's operations (`wgpu-composed`, the path before
#      the fused kernels, at batch 64), and the `vulkan` build's `wgpu` and `wgpu-mixed` (SPIR-V
#      kernels; f16 products on tensor cores where the driver offers cooperative matrices);
#      the peer is AllenNLP's per-step loop (`xtask/peer/elmo_pytorch.py`) in f32;
#   2. training (`bench_train`, `wgpu-burnmm` and `wgpu`): the `original` shape at bilm-tf's
#      per-GPU 128 × 20 with a 50k vocabulary sampled 8192, then the PTB shapes at 256 and 512
#      rows; the peer (`xtask/peer/bilm_train_pytorch.py`) in f32 and with bf16 autocast (AMP).
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

embed() {
    within 40 /tmp/bench_embed --peer python3 --peer-device cuda \
        --peer-script xtask/peer/elmo_pytorch.py --batches 5 "$@"
}
train() {
    within 60 /tmp/bench_train --backends wgpu-burnmm,wgpu --peer python3 --peer-device cuda --peer-amp bf16 \
        --peer-script xtask/peer/bilm_train_pytorch.py --steps 8 "$@"
}

# A process's first minutes on the GPU are slow (docs/benchmarks.md): one untimed run first.
timeout 60 /tmp/bench_embed --child original wgpu --batches 1 --batch-size 64 > /dev/null 2>&1

# With `.device/bench_embed_spirv.xz` (built with the `vulkan` feature: SPIR-V kernels on
# NVIDIA's Vulkan, f16 products on cooperative matrices): its rows after the WGSL ones.
spirv() {
    if [ -f .device/bench_embed_spirv.xz ]; then
        [ -x /tmp/bench_embed_spirv ] || {
            xz -dc .device/bench_embed_spirv.xz > /tmp/bench_embed_spirv
            chmod +x /tmp/bench_embed_spirv
        }
        within 40 /tmp/bench_embed_spirv --batches 5 "$@"
    fi
}

embed --shapes original --backends wgpu-composed,wgpu-burnmm,wgpu,wgpu-mixed --batch-size 64
embed --shapes original --backends wgpu-burnmm,wgpu,wgpu-mixed --batch-size 256,1024
spirv --shapes original --backends wgpu,wgpu-mixed --batch-size 64,1024
embed --shapes small --backends wgpu --batch-size 64,256,1024

train --preset original --batch-size 128 --unroll-steps 20 --vocab-size 50000 --negatives 8192
train --preset examples/configs/ptb-large.json --batch-size 256 --unroll-steps 35 --vocab-size 10002
train --preset examples/configs/ptb-small.json --batch-size 512 --unroll-steps 35 --vocab-size 10002

echo "done after ${SECONDS} s" | tee -a "$log"
stop_sampler
