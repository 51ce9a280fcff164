#!/usr/bin/env bash
# Runs on the lent GPU machine (the device tool's `run`, from the repository root), after
# `xtask/device/prepare.sh` here:
#   run(command="bash xtask/device/bench-train-gpu.sh", carry=[".gl", ".device"], timeout_s=540)
# `cargo xtask bench train` on one GPU: elmo-rs through wgpu with its fused kernels, the same
# binary with the two directions' LSTM stacks run apart (`wgpu-apart`, `paired_directions: false`)
# and with the LSTM's step products not split (`wgpu-whole`, `split_products: false`), and the
# PyTorch peer on CUDA, for the shapes of docs/benchmarks.md (session 15), one after the other in
# the same minutes (burn's own operations, `wgpu-unfused`, were measured in session 40);
# first, the cost of one kernel launch on each (`bench_train --launch-probe`, a torch loop).
# Variables (below): BACKENDS, BASELINE, PROBE, PHASES, LOSS_CHECK, WARM. Session 42's call:
#   PROBE=0 PHASES=0 LOSS_CHECK=1 BASELINE=bench_train_c06e71c BACKENDS=wgpu bash xtask/device/bench-train-gpu.sh
# Output: $OUT/bench-train-gpu.log (also printed), $OUT/gpu-memory.csv (nvidia-smi every 200 ms).
set -uo pipefail
source xtask/device/setup.sh
log="$OUT/bench-train-gpu.log"

gpu_header "$log"

# The cost of one kernel launch (µs per elementwise op issued in a row, to the results): wgpu as
# built (and with cubecl's submissions batched by 128 tasks instead of 32), then PyTorch on CUDA.
# PROBE=0 leaves it out.
if [ "${PROBE:-1}" = 1 ]; then
    {
        echo "== launch probe"
        timeout 60 /tmp/bench_train --launch-probe wgpu
        CUBECL_WGPU_MAX_TASKS=128 timeout 60 /tmp/bench_train --launch-probe wgpu | sed 's/^LAUNCH /LAUNCH max_tasks=128 /'
        timeout 60 python3 - <<'PY'
import time, torch
for shape, n in [((1, 1), 5000), ((64, 1200), 2000)]:
    x = torch.zeros(shape, device="cuda")
    for _ in range(100):
        x = x + 1.0
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        x = x + 1.0
    issued = time.perf_counter() - start
    torch.cuda.synchronize()
    total = time.perf_counter() - start
    print(f"LAUNCH backend=torch-cuda shape={shape[0]}x{shape[1]} ops={n} "
          f"issue_us={1e6 * issued / n:.1f} total_us={1e6 * total / n:.1f}")
PY
    } 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$log"
fi
# BACKENDS: the variants of this build to run (default `wgpu-apart,wgpu-whole,wgpu`);
# BASELINE=NAME: also run `.device/NAME.xz` (another build's `bench_train`, stripped and
# compressed here) on each shape first, as `RESULT build=NAME …`, to measure a change.
if [ -n "${BASELINE:-}" ]; then
    xz -dc ".device/$BASELINE.xz" > "/tmp/$BASELINE" && chmod +x "/tmp/$BASELINE"
fi
bench() {
    echo "== $*" | tee -a "$log"
    # A shape's first process ran at a third to a half of the speed of the next ones (session
    # 42, cause not established); one untimed process per build first, unless WARM=0.
    if [ "${WARM:-1}" = 1 ]; then
        for build in ${BASELINE:+"/tmp/$BASELINE"} /tmp/bench_train; do
            timeout 100 "$build" --child wgpu --steps 2 "$@" > /dev/null 2>&1
        done
    fi
    if [ -n "${BASELINE:-}" ]; then
        timeout 100 "/tmp/$BASELINE" --child wgpu --steps 10 "$@" 2>&1 | grep '^RESULT' \
            | sed "s|^RESULT |RESULT build=$BASELINE |" | tee -a "$log"
    fi
    timeout 150 /tmp/bench_train --backends "${BACKENDS:-wgpu-apart,wgpu-whole,wgpu}" \
        --peer python3 --peer-device cuda \
        --peer-script xtask/peer/bilm_train_pytorch.py --steps 10 "$@" 2>&1 \
        | grep -v XDG_RUNTIME_DIR | tee -a "$log"
}
bench --preset examples/configs/ptb-large.json --batch-size 64 --unroll-steps 35 --vocab-size 10002
bench --preset examples/configs/ptb-small.json --batch-size 128 --unroll-steps 35 --vocab-size 10002
bench --preset small --batch-size 32 --unroll-steps 20
# PHASES=0 leaves out the phases of a step (`--phases`).
if [ "${PHASES:-1}" = 1 ]; then
    bench --phases --preset examples/configs/ptb-large.json --batch-size 64 \
        --unroll-steps 35 --vocab-size 10002
fi
# LOSS_CHECK=1: every step's loss with the fused kernels and with burn's operations
# (`wgpu-unfused`): the same model, data and seed, so equal to float rounding.
if [ "${LOSS_CHECK:-0}" = 1 ]; then
    echo "== loss check" | tee -a "$log"
    timeout 150 /tmp/bench_train --backends wgpu-unfused,wgpu --steps 5 --preset small \
        --batch-size 32 --unroll-steps 20 2>&1 | grep -v XDG_RUNTIME_DIR | tee -a "$log"
fi
# The largest batches of session 15, while the call has time left (the machine's minutes are few).
if [ "$SECONDS" -lt 330 ]; then
    bench --preset examples/configs/ptb-large.json --batch-size 256 --unroll-steps 35 --vocab-size 10002
fi
if [ "$SECONDS" -lt 420 ]; then
    bench --preset examples/configs/ptb-small.json --batch-size 512 --unroll-steps 35 --vocab-size 10002
fi
echo "done after ${SECONDS} s" | tee -a "$log"

stop_sampler
