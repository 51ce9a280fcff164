#!/usr/bin/env bash
# Runs on the lent GPU machine after `xtask/device/prepare.sh` here:
#   run(command="bash xtask/device/profile-kernels-gpu.sh", carry=[".gl", ".device"], timeout_s=300)
# Where a wgpu training step's GPU time goes: cubecl's profiling logger (level "full") times every
# kernel launch on the GPU, and `kernel_times.py` sums the times per kernel, launch grid and
# matmul tiling. Shapes: those of `bench-train-gpu.sh`; 2 steps after the warm-up each.
# Output: $OUT/kernels-NAME.txt (the summary, also printed), $OUT/kernels-NAME.log.xz (the log).
set -uo pipefail
source xtask/device/setup.sh
repo="$PWD"
profile() {
    local name="$1"
    shift
    local dir="/tmp/profile-$name"
    rm -rf "$dir" && mkdir -p "$dir"
    printf '[profiling.logger]\nlevel = "full"\nfile = "%s/kernels.log"\nappend = false\n' "$dir" \
        > "$dir/cubecl.toml"
    echo "== $name: $*"
    (cd "$dir" && timeout 120 /tmp/bench_train --child wgpu --steps 2 "$@" 2>&1 \
        | grep -v XDG_RUNTIME_DIR)
    sleep 2
    python3 "$repo/xtask/device/kernel_times.py" "$dir/kernels.log" 3 30 > "$OUT/kernels-$name.txt"
    head -n 14 "$OUT/kernels-$name.txt"
    xz -c "$dir/kernels.log" > "$OUT/kernels-$name.log.xz"
}
profile ptb-large-64 --preset "$repo/examples/configs/ptb-large.json" --batch-size 64 \
    --unroll-steps 35 --vocab-size 10002
profile small-32 --preset small --batch-size 32 --unroll-steps 20
profile ptb-small-128 --preset "$repo/examples/configs/ptb-small.json" --batch-size 128 \
    --unroll-steps 35 --vocab-size 10002
echo "done after ${SECONDS} s"
