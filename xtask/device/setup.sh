#!/usr/bin/env bash
# Sourced by the scripts that run on the lent GPU machine (from the repository root): unpacks
# the Vulkan loader (`.gl/`) and the benchmark binaries (`.device/`, made by `prepare.sh` here),
# points Vulkan at NVIDIA's driver, and sets OUT (the device tool's result folder).
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
for bench in bench_train bench_embed; do
    if [ -f ".device/$bench.xz" ]; then
        xz -dc ".device/$bench.xz" > "/tmp/$bench" && chmod +x "/tmp/$bench"
    fi
done
export CUBECL_AUTOTUNE_LEVEL="${CUBECL_AUTOTUNE_LEVEL:-minimal}"
