#!/usr/bin/env bash
# Sourced by the scripts that run on the lent GPU machine (from the repository root): unpacks
# the Vulkan loader (`.gl/`) and the benchmark binaries (`.device/`, `.device-autotune/`,
# `.device-cuda/`, made by `prepare.sh` here), points Vulkan at NVIDIA's driver and the `cuda`
# build at NVRTC and the CUDA headers, and sets OUT (the device tool's result folder).
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
for packed in .device*/*.xz; do
    bench="$(basename "$packed" .xz)"
    [ -f "$packed" ] && xz -dc "$packed" > "/tmp/$bench" && chmod +x "/tmp/$bench"
done
export CUBECL_AUTOTUNE_LEVEL="${CUBECL_AUTOTUNE_LEVEL:-minimal}"

# The `cuda` build compiles its kernels with NVRTC at run time: NVRTC and the CUDA headers of
# the `nvidia-*` wheels that the machine's CUDA build of PyTorch installed (`CUDA_PATH` names
# the folder holding `include/`; cudarc finds `libnvrtc.so.*` through LD_LIBRARY_PATH), with
# the headers those wheels lack (`.device-cuda/cuda-headers.tar.xz`): CCCL's in `include/cccl`,
# where cubecl-cuda looks, and the C runtime's `include/crt`, which `mma.h` includes.
if [ -f .device-cuda/cuda-headers.tar.xz ]; then
    nvrtc="$(python3 -c 'import nvidia, glob; print(*[f for p in nvidia.__path__
        for f in glob.glob(p + "/**/libnvrtc.so.*", recursive=True)][:1])' 2>/dev/null)"
    if [ -n "$nvrtc" ]; then
        wheel_cuda="$(dirname "$(dirname "$nvrtc")")"
        mkdir -p /tmp/cuda/include
        cp -rs "$wheel_cuda/include/." /tmp/cuda/include/
        export CUDA_PATH=/tmp/cuda
        export LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    # cuBLAS (the `cuda` build's products, `cuda_blas.rs`), from the wheel PyTorch runs with.
    cublas="$(python3 -c 'import nvidia, glob; print(*[f for p in nvidia.__path__
        for f in glob.glob(p + "/**/libcublas.so.*", recursive=True)][:1])' 2>/dev/null)"
    if [ -n "$cublas" ]; then
        export LD_LIBRARY_PATH="$(dirname "$cublas"):$LD_LIBRARY_PATH"
    fi
    echo "cuda: cuBLAS ${cublas:-not found (cubek kernels run the products)}"
    mkdir -p "${CUDA_PATH:-/usr/local/cuda}/include"
    tar -xJf .device-cuda/cuda-headers.tar.xz -C "${CUDA_PATH:-/usr/local/cuda}/include"
    echo "cuda: NVRTC ${nvrtc:-from the system}, headers in ${CUDA_PATH:-/usr/local/cuda}/include"
fi
# The kernels `cuda-check.sh` compiled here with the same NVRTC for sm_90 (CubeCL's compilation
# cache, keyed by the binaries' build id): the `cuda` rows load them instead of compiling.
if [ -f .device-cuda/kernel-cache.tar.xz ]; then
    mkdir -p target/environment
    tar -xJf .device-cuda/kernel-cache.tar.xz -C target/environment
    export CUBECL_ENVIRONMENT=elmo-device
    echo "cuda: kernel cache of $(ls target/environment/elmo-device.db*) unpacked"
fi

# Writes the header of a device log ($1): the commit, the GPU and driver, torch; then samples the
# GPU's memory and use every 200 ms into $OUT/gpu-memory.csv (stopped by `stop_sampler`).
gpu_header() {
    {
        echo "commit $(cat .device*/commit 2>/dev/null | head -n 1 || echo unknown), $(date -u)"
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
    } 2>&1 | tee "$1"
    nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -lms 200 \
        > "$OUT/gpu-memory.csv" 2>/dev/null &
    sampler=$!
}
stop_sampler() {
    kill "${sampler:-}" 2>/dev/null
}
