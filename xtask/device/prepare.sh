#!/usr/bin/env bash
# Prepares, on this (CPU) machine, what the lent GPU machine needs to run
# `xtask/device/bench-train-gpu.sh`: that machine has no Rust and no Vulkan loader.
#   - `.device/bench_train.xz`: the release `bench_train` example, stripped and compressed;
#   - `.gl/*.deb`: the Vulkan loader and GL libraries (Debian packages, unpacked there).
# Both folders are ignored by git (.git/info/exclude) and travel with the device tool's `carry`:
#   run(command="bash xtask/device/bench-train-gpu.sh", carry=[".gl", ".device"], timeout_s=540)
set -euo pipefail
cd "$(dirname "$0")/../.."

for ignored in /.gl/ /.device/; do
    grep -qxF "$ignored" .git/info/exclude 2>/dev/null || echo "$ignored" >> .git/info/exclude
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
cargo build --release -p elmo-cli --example bench_train
mkdir -p .device
strip -o .device/bench_train "$CARGO_TARGET_DIR/release/examples/bench_train"
xz -f -6 .device/bench_train
git rev-parse HEAD > .device/commit

if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
    mkdir -p .gl /tmp/amd64/partial
    apt_options=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    apt-get "${apt_options[@]}" update -qq
    (cd .gl && apt-get "${apt_options[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
du -sh .device .gl
