#!/usr/bin/env bash
# Runs on the lent GPU machine: the same training benchmark (`bench_train --child wgpu`) with
# several builds of `bench_train`, in turns, to measure a change or a burn feature on the GPU.
# Prepare here (each build's release `bench_train`, stripped and xz-compressed):
#   strip -o .device/NAME BINARY && xz -f .device/NAME        (for each NAME to compare)
#   run(command="bash xtask/device/compare-builds-gpu.sh NAME...", carry=[".gl", ".device"])
# `bench_train` (from prepare.sh) is always one of them, as the baseline. Each run has
# RUN_TIMEOUT seconds (90): a build with burn's `autotune` did not finish its warm-up step in 90 s
# on an H200 (it measures every matmul shape's candidate kernels first; session 40).
# Output: $OUT/compare-builds.log (also printed), one `RESULT build=NAME …` line per run.
set -uo pipefail
source xtask/device/setup.sh
log="$OUT/compare-builds.log"
builds=(bench_train "$@")
for name in "${builds[@]:1}"; do
    xz -dc ".device/$name.xz" > "/tmp/$name" && chmod +x "/tmp/$name"
done
repo="$PWD"
shapes=(
    "--preset $repo/examples/configs/ptb-large.json --batch-size 64 --unroll-steps 35 --vocab-size 10002"
    "--preset $repo/examples/configs/ptb-small.json --batch-size 128 --unroll-steps 35 --vocab-size 10002"
    "--preset small --batch-size 32 --unroll-steps 20"
)
run_round() {
    for shape in "$@"; do
        for name in "${builds[@]}"; do
            # shellcheck disable=SC2086 # the shape is a list of arguments
            timeout "${RUN_TIMEOUT:-90}" "/tmp/$name" --child wgpu --steps 10 $shape 2>&1 \
                | grep '^RESULT' \
                | sed "s|^RESULT |RESULT build=$name shape=${shape// /_} |" | tee -a "$log"
        done
    done
}
echo "commit $(cat .device/commit), builds: ${builds[*]}, $(date -u)" | tee "$log"
# N_SHAPES (3): how many of the shapes to run, from the first (`ptb-large` 64 × 35).
run_round "${shapes[@]:0:${N_SHAPES:-3}}"
if [ "$SECONDS" -lt 240 ]; then
    run_round "${shapes[0]}"
fi
echo "done after ${SECONDS} s" | tee -a "$log"
