#!/usr/bin/env bash
# Runs on the lent GPU machine after `xtask/device/prepare.sh` here:
#   run(command="bash xtask/device/matmul-probe-gpu.sh", carry=[".gl", ".device"], timeout_s=300)
# Each of cubek's matmul kernels (`elmo_kernels::MatmulKernel`: burn's choice, SimpleUnit and
# DoubleUnit with their largest and smallest tiles, the plane GEMM, four tensor-core families)
# on the product shapes of a `ptb-large.json` 256 × 35 training step and of `original`
# inference (`bench_train --matmul-probe`): in f32 through WGSL, then in f16 through the
# `vulkan` build's SPIR-V (cooperative matrices): µs, TFLOPS and the largest difference from
# burn's f32 product, to pick a kernel per shape and precision.
# Output: $OUT/matmul-probe.log (also printed).
set -uo pipefail
source xtask/device/setup.sh
{
    timeout 120 /tmp/bench_train --matmul-probe wgpu
    [ -x /tmp/bench_train_spirv ] && timeout 150 /tmp/bench_train_spirv --matmul-probe wgpu f16
} 2>&1 | grep -v XDG_RUNTIME_DIR | tee "$OUT/matmul-probe.log"
