#!/usr/bin/env bash
# burn's autotune against the kernels chosen in elmo-kernels, on a lent GPU (issue 48 item 2),
# after `AUTOTUNE=1 bash xtask/device/prepare.sh` here:
#   run(command="bash xtask/device/autotune-gpu.sh", carry=[".gl", ".device-autotune"], timeout_s=420)
# The same `original` rows (inference at 256 sentences, training at 128 × 20) from the default
# build (`wgpu`: each large product through the kernel of its shape, `large_product.rs`;
# `wgpu-burnmm`: burn's one fixed kernel) against the PyTorch peer on CUDA, then from the
# `autotune` build (`wgpu-burnmm`: burn's autotuned choice; `wgpu`: ours for the large
# products, autotuned for the rest) twice: on this fresh machine the first run tunes every
# shape it meets (its wall time holds the tuning's cost), the second reads the on-disk cache.
# The autotune runs use cubecl's default level (CUBECL_AUTOTUNE_LEVEL unset); the cache is
# cubecl's default, `target/environment` under the repository root. BUDGET_S (400) bounds the
# call. Not yet run on a GPU: on lavapipe (a dry run, SHAPE=tiny TRAIN_BATCH=8) a cold autotune
# of the inference rows did not end within 150 s.
# Output: $OUT/autotune.log (also printed).
set -uo pipefail
source xtask/device/setup.sh
log="$OUT/autotune.log"
gpu_header "$log"

budget="${BUDGET_S:-400}"

# Runs "$@" for at most 150 s and what is left of the budget (skipped under 30 s), and logs its
# wall time (a run cut by the limit says so: a cold autotune may take longer than that).
timed() {
    local start=$SECONDS left=$((budget - SECONDS))
    if [ "$left" -lt 30 ]; then
        echo "== skipped (${left} s left): $*" | tee -a "$log"
        return
    fi
    [ "$left" -gt 150 ] && left=150
    echo "== $* (at ${SECONDS} s, at most ${left} s)" | tee -a "$log"
    timeout "$left" "$@" 2>&1 | grep -v '^error: XDG_RUNTIME_DIR' | tee -a "$log"
    echo "== wall $((SECONDS - start)) s (exit ${PIPESTATUS[0]})" | tee -a "$log"
}

# SHAPE and TRAIN_BATCH change the rows (a dry run on a CPU: SHAPE=tiny TRAIN_BATCH=8).
shape="${SHAPE:-original}"
embed_rows=(--shapes "$shape" --batch-size 256 --batches 10)
train_rows=(--preset "$shape" --batch-size "${TRAIN_BATCH:-128}" --unroll-steps 20
    --vocab-size 50000 --negatives 8192 --steps 8)
# The default build against the peer, then the autotune build from a cold and a warm cache.
compare() {
    local bench="$1" peer_script="$2"
    shift 2
    timed "/tmp/$bench" --backends wgpu,wgpu-burnmm "$@" --peer python3 --peer-device cuda \
        --peer-script "$peer_script"
    for cache in cold warm; do
        echo "== autotune, $cache cache" | tee -a "$log"
        timed env -u CUBECL_AUTOTUNE_LEVEL "/tmp/${bench}_autotune" --backends wgpu-burnmm,wgpu "$@"
    done
}
compare bench_embed xtask/peer/elmo_pytorch.py "${embed_rows[@]}"
compare bench_train xtask/peer/bilm_train_pytorch.py "${train_rows[@]}"
echo "done after ${SECONDS} s" | tee -a "$log"
stop_sampler
