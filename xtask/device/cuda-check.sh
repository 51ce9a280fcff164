#!/usr/bin/env bash
# Runs the `cuda` build's part of the lent-GPU call on this machine, without a GPU: the benchmark
# binaries carried in `.device-cuda/` (`CUDA=1 prepare.sh`) against a stand-in driver
# (`fake-cuda/libcuda.c`, built here with cc; `fake-cuda/libcublas.c` stands in for cuBLAS, whose
# products it computes on the host for `--blas-check` only) and NVIDIA's real NVRTC and headers (the wheels of
# the GPU machine's PyTorch, from PyPI, plus `.device-cuda/cuda-headers.tar.xz` as `setup.sh`
# unpacks it), then checks every PTX module NVRTC produced with `ptxas -arch=sm_90a`. What it
# catches before device time is spent: a kernel NVRTC or ptxas refuses, a header the carry lacks,
# a driver call or a host-side path that fails on CUDA (its layouts, its feature set). What it
# cannot: numbers (no kernel runs; speeds printed here are host-side only) or the driver's JIT.
# The kernels NVRTC compiled are kept in CubeCL's compilation cache (the environment
# `elmo-device` in `target/environment/`, started empty) and packed as
# `.device-cuda/kernel-cache.tar.xz`, which `setup.sh` unpacks on the GPU machine: the same
# binaries there (the cache is keyed by their build id and by sm_90, an H100's or H200's) find
# these kernels compiled and spend their device time running them.
#
#   CUDA=1 SPIRV=0 bash xtask/device/prepare.sh && bash xtask/device/cuda-check.sh
#
# Exit status 0 when every row ran and every module assembles. Needs python3 with pip, cc, xz.
set -euo pipefail
cd "$(dirname "$0")/../.."
source xtask/device/train-shapes.sh
work="${CUDA_CHECK_DIR:-/tmp/elmo-cuda-check}"
mkdir -p "$work/wheels" "$work/bin"
[ -f .device-cuda/bench_embed_cuda.xz ] || { echo "no .device-cuda: run CUDA=1 prepare.sh" >&2; exit 2; }

# NVRTC 13.0 and the runtime's headers as the GPU machine's torch 2.11.0+cu130 installs them;
# ptxas of the same release from the nvcc wheel.
for wheel in nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvcc==13.0.88; do
    name="${wheel%%==*}"
    if [ ! -d "$work/wheels/$name" ]; then
        python3 -m pip download --quiet --no-deps "$wheel" -d "$work/wheels/dl"
        mkdir -p "$work/wheels/$name"
        unzip -qo "$work/wheels/dl/${name//-/_}-"*.whl -d "$work/wheels/$name"
    fi
done
lib="$(dirname "$(ls "$work"/wheels/nvidia-cuda-nvrtc/nvidia/*/lib/libnvrtc.so.* | head -n 1)")"
ptxas="$(ls "$work"/wheels/nvidia-cuda-nvcc/nvidia/*/bin/ptxas | head -n 1)"
rm -rf "$work/cuda" && mkdir -p "$work/cuda/include"
for name in nvidia-cuda-runtime nvidia-cuda-nvrtc; do
    cp -rs "$(ls -d "$work"/wheels/$name/nvidia/*/include)/." "$work/cuda/include/"
done
tar -xJf .device-cuda/cuda-headers.tar.xz -C "$work/cuda/include"
cc -O1 -shared -fPIC -Wall -o "$work/libcuda.so.1" xtask/device/fake-cuda/libcuda.c
cc -O1 -shared -fPIC -Wall -o "$work/libcublas.so.13" xtask/device/fake-cuda/libcublas.c -lm
ln -sf libcublas.so.13 "$work/libcublas.so"
for bench in bench_embed_cuda bench_train_cuda; do
    xz -dc ".device-cuda/$bench.xz" > "$work/bin/$bench" && chmod +x "$work/bin/$bench"
done

export LD_LIBRARY_PATH="$work:$lib" CUDA_PATH="$work/cuda" CUBECL_AUTOTUNE_LEVEL=minimal
export FAKECUDA_PTX_DIR="$work/ptx" FAKECUDA_REPORT="$work/launches/report"
export FAKECUBLAS_REPORT="$work/launches/cublas"
export CUBECL_ENVIRONMENT=elmo-device
rm -f .device-cuda/kernel-cache.tar.xz target/environment/elmo-device.db*
rm -rf "$work/ptx" "$work/launches" && mkdir -p "$work/ptx" "$work/launches"
log="$work/log.md"
echo "cuda-check of $(cat .device-cuda/commit), $(date -u)" | tee "$log"
# gpu-table.sh's `cudatrain` rows of one training shape (the arguments).
train_rows() {
    "$work/bin/bench_train_cuda" --backends "$cuda_train_backends" --steps "$train_steps" "$@"
}
SECONDS=0
{
    # gpu-table.sh's `cudablas` section: cuBLAS's products of uploaded operands in every layout
    # the `cuda` build hands it, which the stand-in computes on the host.
    FAKECUBLAS_COMPUTE=1 "$work/bin/bench_train_cuda" --blas-check cuda
    # gpu-table.sh's `cuda`, `cudaextra`, `cudatrain` and `cudaprobe` sections (inference with
    # fewer batches).
    "$work/bin/bench_embed_cuda" --shapes original,small \
        --backends cuda-cubek,cuda,cuda-mixed,cuda-blassteps --batch-size 64,256,1024 --batches 2
    # The training rows with as many steps as the GPU times (`train-shapes.sh`): each step's
    # batch has its own shapes, and a kernel first needed in a timed step would be compiled
    # there, on the GPU's time.
    train_rows "${original_128[@]}"
    train_rows "${ptb_large_256[@]}"
    train_rows "${ptb_small_512[@]}"
    # The f32 probe only: the f16 one compiles every cubek kernel per shape, some to 3 MB of PTX
    # that NVRTC takes minutes over here.
    "$work/bin/bench_train_cuda" --matmul-probe cuda | grep -c "kernel=" \
        | sed 's/^/matmul probe f32 rows: /'
    # The cache at work: a later process finds the kernels compiled (its first pass loads
    # them instead of running NVRTC).
    "$work/bin/bench_embed_cuda" --shapes original --backends cuda --batch-size 64 --batches 2 \
        | grep '| original' | sed 's/^/again, from the kernel cache: /'
} 2>&1 | tee -a "$log"
# The training rows once more, as the GPU runs them (`cuda`, `cuda-mixed`), with CubeCL's
# compilation logger on (a `cubecl.toml` in a folder of the repository, which still finds the
# cache in `target/environment/`): the kernels that their steps compile there, which the GPU
# would compile inside its timed steps.
again="$PWD/target/compile-check"
rm -rf "$again" && mkdir -p "$again"
printf '[compilation.logger]\nlevel = "basic"\nfile = "%s/compiled.log"\nappend = true\n' \
    "$again" > "$again/cubecl.toml"
# The batches differ from run to run, and with them a few kernels' variants (the vectorisation
# of an elementwise kernel over a batch's distinct tokens): a row whose run compiled kernels runs
# again, up to 3 more times, until a run compiles none, so that the packed cache holds them.
compiled_again() {
    local name="$1" compiled run
    shift
    for run in 1 2 3 4; do
        (cd "$again" && "$work/bin/bench_train_cuda" --backends "$cuda_train_backends" \
            --steps "$train_steps" "$@" > /dev/null 2>&1)
        compiled="$(grep -c 'Compiling' "$again/compiled.log" 2>/dev/null || true)"
        echo "training rows again ($name, run $run): ${compiled:-0} kernels compiled" \
            | tee -a "$log"
        rm -f "$again/compiled.log"
        [ "${compiled:-0}" = 0 ] && break
    done
}
compiled_again original "${original_128[@]}"
compiled_again ptb-large "${ptb_large_256[@]}"
compiled_again ptb-small "${ptb_small_512[@]}"
# What the `cudawhere` section's kernel profiles launch (`gpu-table.sh`'s `train_where`: the
# same binary and arguments), launch by launch with each matmul's problem, kept in
# `$work/launches-train-cuda-NAME.log`: joined with the GPU's profile of the same run
# (`$OUT/kernels-train-cuda-NAME.log.xz`), `launch_shapes.py` gives the GPU time of each
# product shape.
launch_census() {
    local name="$1" file="$work/launches-train-cuda-$1.log"
    shift
    rm -f "$work"/launch-log.*
    (cd "$again" && FAKECUDA_LAUNCHES="$work/launch-log" "$work/bin/bench_train_cuda" \
        --backends cuda --steps 2 "$@" > /dev/null 2>&1)
    mv "$work"/launch-log.* "$file"
    python3 xtask/device/launch_shapes.py "$file" 3 > "$file.txt"
    head -n 12 "$file.txt" | tee -a "$log"
}
rm -f "$again/cubecl.toml"
launch_census original "${original_128[@]}"
launch_census ptb-large "${ptb_large_256[@]}"
echo "ran in ${SECONDS}s" | tee -a "$log"
tar -cJf .device-cuda/kernel-cache.tar.xz -C target/environment \
    $(cd target/environment && ls elmo-device.db*)
echo "kernel cache: $(du -h target/environment/elmo-device.db | cut -f1) packed as" \
    "$(du -h .device-cuda/kernel-cache.tar.xz | cut -f1) in .device-cuda/kernel-cache.tar.xz" \
    | tee -a "$log"

failed_rows="$(grep -ci "failed" "$log" || true)"
# Each distinct module once (the children compile many of the same kernels).
modules=0
bad_modules=0
while read -r _ ptx; do
    modules=$((modules + 1))
    if ! "$ptxas" -arch=sm_90a -o /dev/null "$ptx" 2> "$ptx.err"; then
        bad_modules=$((bad_modules + 1))
        echo "ptxas refuses $ptx: $(head -n 3 "$ptx.err")" | tee -a "$log"
    fi
done < <(md5sum "$work"/ptx/*.ptx | sort -u -k1,1)
launches="$(cat "$work"/launches/report.* | awk '/^launches/ {n += $2} END {print n}')"
gemms="$(cat "$work"/launches/cublas.* 2>/dev/null | awk '/^gemms/ {n += $2} END {print n + 0}')"
echo "rows failed: $failed_rows; distinct PTX modules: $modules, refused by ptxas: $bad_modules;" \
    "kernel launches: $launches; cuBLAS products: $gemms (log: $log)" | tee -a "$log"
[ "$failed_rows" = 0 ] && [ "$bad_modules" = 0 ] && [ "$modules" -gt 0 ]
