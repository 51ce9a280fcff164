#!/usr/bin/env bash
# Prepares, on this (CPU) machine, what the lent GPU machine needs to run
# `xtask/device/gpu-table.sh` (or `bench-train-gpu.sh`): that machine has no Rust and no Vulkan
# loader.
#   - `.device/bench_train.xz`, `.device/bench_embed.xz`: the benchmark examples in the dev
#     profile of the README's commands (dependencies optimised as in a release build; no second
#     build of burn), stripped and compressed, and `.device/bench_{train,embed}_spirv.xz` and
#     `.device/elmo_spirv.xz` (the `elmo` binary) built with the `vulkan` feature;
#   - `.device/ptb/`: PTB's train and valid text for gpu-table's `quality` section, copied
#     (compressed) from `../shared/data/lm/ptb` when it is there (never committed);
#   - with AUTOTUNE=1, `.device-autotune/`: the benchmarks built with burn's `autotune` and the
#     default ones, for `autotune-gpu.sh` (carried instead of `.device`);
#   - with CUDA=1, `.device-cuda/`: the benchmarks built with the `cuda` feature (CubeCL's CUDA
#     runtime beside wgpu's WGSL one, another build of burn) and the headers that NVRTC
#     needs beside the CUDA headers of the machine's PyTorch wheels (`nvidia-cuda-cccl` and
#     `nvidia-cuda-crt` from PyPI, `cuda-headers.tar.xz`), for `gpu-table.sh`'s `cuda`
#     sections (carried instead of `.device`);
#   - `.gl/*.deb`: the Vulkan loader and GL libraries (Debian packages, unpacked there).
# Both folders are ignored by git (.git/info/exclude) and travel with the device tool's `carry`:
#   run(command="bash xtask/device/gpu-table.sh", carry=[".gl", ".device"], timeout_s=560)
set -euo pipefail
cd "$(dirname "$0")/../.."

# (`git rev-parse --git-path`: in a worktree `.git` is a file.)
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
for ignored in /.gl/ /.device/ /.device-autotune/ /.device-cuda/; do
    grep -qxF "$ignored" "$exclude" 2>/dev/null || echo "$ignored" >> "$exclude"
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
# Builds the benchmarks with features $1 (none: the default build) and packs them stripped and
# compressed as $2/bench_{train,embed}$3.xz.
pack_benches() {
    local features="$1" folder="$2" suffix="$3"
    mkdir -p "$folder"
    cargo build -p elmo-cli ${features:+--features "$features"} --example bench_train --example bench_embed
    for bench in bench_train bench_embed; do
        strip -o "$folder/$bench$suffix" "$CARGO_TARGET_DIR/debug/examples/$bench"
        xz -f -6 "$folder/$bench$suffix"
    done
}
# The default build (WGSL kernels), then the opt-in `vulkan` one (SPIR-V kernels, f16 products
# on cooperative matrices): `.device/bench_*_spirv.xz` and the `elmo` binary, a second build
# of burn the first time (SPIRV=0 leaves it out).
pack_benches "" .device ""
if [ "${SPIRV:-1}" = 1 ]; then
    pack_benches vulkan .device _spirv
    cargo build -p elmo-cli --features vulkan --bin elmo
    strip -o .device/elmo_spirv "$CARGO_TARGET_DIR/debug/elmo"
    xz -f -6 .device/elmo_spirv
fi
# With AUTOTUNE=1: the benchmarks with burn's autotune (a third build of burn) for
# `autotune-gpu.sh`, in their own folder (beside `.device` they would pass the 64 MiB carry
# limit), with the default build's beside them.
if [ "${AUTOTUNE:-0}" = 1 ]; then
    pack_benches autotune .device-autotune _autotune
    cp .device/bench_train.xz .device/bench_embed.xz .device-autotune/
    git rev-parse HEAD > .device-autotune/commit
fi
# With CUDA=1: the benchmarks with the `cuda` feature (their wgpu rows run the same WGSL
# kernels as the default build's), and the headers NVRTC needs that a CUDA build of PyTorch
# does not install, in the version of CUDA 13.0 (the lent H100's driver): CCCL's `cuda/` and
# `nv/` (`cuda/barrier` for the kernels that use barriers) and the C runtime's `crt/`
# (`mma.h` includes `crt/mma.h`: the tensor-core kernels of `--precision mixed`).
if [ "${CUDA:-0}" = 1 ]; then
    pack_benches cuda .device-cuda _cuda
    # The kernel cache belongs to the binaries that filled it (`cuda-check.sh` packs a new one).
    rm -f .device-cuda/kernel-cache.tar.xz
    wheel_dir="$(mktemp -d)"
    python3 -m pip download --quiet --no-deps "nvidia-cuda-cccl==${CCCL_VERSION:-13.0.85}" \
        "nvidia-cuda-crt==${CRT_VERSION:-13.0.88}" -d "$wheel_dir"
    (cd "$wheel_dir" && for wheel in ./*.whl; do unzip -q "$wheel" 'nvidia/*/include/*'; done \
        && tar -cJf cuda-headers.tar.xz -C nvidia/*/include cccl/cuda cccl/nv crt)
    rm -f .device-cuda/cccl.tar.xz
    mv "$wheel_dir/cuda-headers.tar.xz" .device-cuda/
    rm -rf "$wheel_dir"
    git rev-parse HEAD > .device-cuda/commit
fi
if [ -d ../shared/data/lm/ptb ]; then
    mkdir -p .device/ptb
    cp ../shared/data/lm/ptb/ptb.train.txt.xz ../shared/data/lm/ptb/ptb.valid.txt.xz .device/ptb/
fi
git rev-parse HEAD > .device/commit

if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
    mkdir -p .gl /tmp/amd64/partial
    apt_options=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    apt-get "${apt_options[@]}" update -qq
    (cd .gl && apt-get "${apt_options[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
du -sh .device* .gl
