#!/usr/bin/env bash
# Runs on the lent GPU machine after `xtask/device/prepare.sh` here:
#   run(command="bash xtask/device/matmul-probe-gpu.sh", carry=[".gl", ".device"], timeout_s=240)
# Each of cubek's matmul kernels (`elmo_model::cube_matmul::MatmulKernel`: burn's choice,
# SimpleUnit and DoubleUnit with their largest and smallest tiles, the plane GEMM) on the
# product shapes of a `ptb-large.json` 256 × 35 training step (`bench_train --matmul-probe`):
# µs, TFLOPS and the largest difference from burn's product, to pick a kernel per shape.
# Output: $OUT/matmul-probe.log (also printed).
set -uo pipefail
source xtask/device/setup.sh
timeout 200 /tmp/bench_train --matmul-probe wgpu 2>&1 | grep -v XDG_RUNTIME_DIR \
    | tee "$OUT/matmul-probe.log"
