#!/usr/bin/env python3
"""What a run of the `cuda` build launches, from the stand-in driver's launch log, and, given
cubecl's profiling log of the same command on a GPU, the GPU time of each matrix product shape.

usage: launch_shapes.py LAUNCHES STEPS [PROFILE]

LAUNCHES: `$FAKECUDA_LAUNCHES.<pid>` of `fake-cuda/libcuda.c` (one line per launch: the kernel,
its grid and block, and the 32-bit words of its parameters passed by value, where CubeCL puts a
kernel's shapes and strides). STEPS: the training steps of the run (warm-up included), to give
per-step figures. A matmul's problem `[batch, M, K]·[batch, K, N]` is read from those words
(cubek passes the left factor's rows and columns, the batch, the right factor's rows and
columns and the output's, in that order).

Without PROFILE it lists the products per step with their GFLOP, the most launched other
kernels, and the kernel families that launch the most threads per step (grid × block): a
memory-bound kernel's work grows with its threads, so these are where to look first for GPU
time outside the products before a GPU profile says it.

PROFILE: cubecl's profiling log (`[profiling.logger] level = "full"`, as `gpu-table.sh`'s
`profile_run` writes) of the same binary and arguments on a GPU. Both list the launches in the
order they were made, so launch i of one is launch i of the other (checked by kernel name);
each kernel's first launch (compilation or loading) is left out, as `kernel_times.py` does.
"""
import re
import sys
from collections import defaultdict

from kernel_times import entries, short_name

SUFFIX = re.compile(r"_(lhs|t|f|e|c|i|in)_[a-z0-9_]*$")


def family(ptx_name):
    """`module-00069:matmul_entry_lhs_f32_..._9af5d31f` → `matmul_entry`."""
    name = ptx_name.split(":", 1)[1]
    name = re.sub(r"_[0-9a-f]{8}$", "", name)
    return SUFFIX.sub("", name)


def matmul_problem(words):
    """(batch, M, K, N) from a matmul's parameter words: `M K [batch ...] K N M N`."""
    for i in range(len(words) - 5):
        m, k = words[i], words[i + 1]
        for j in range(i + 2, min(i + 6, len(words) - 3)):
            if words[j] == k and words[j + 2] == m and words[j + 3] == words[j + 1]:
                batch = words[i + 2] if j > i + 2 else 1
                return batch, m, k, words[j + 1]
    return None


def launches(path):
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 5:
                continue
            grid = tuple(int(x) for x in parts[1].split())
            block = tuple(int(x) for x in parts[2].split())
            words = [int(x) for x in parts[4].replace("|", " ").split()]
            yield parts[0], grid, block, words


def profile_entries(path):
    """(milliseconds, kernel module name) per launch of a cubecl profiling log."""
    for ms, lines in entries(path):
        yield ms, short_name(lines[0].split(": ", 1)[0]).split("::")[0]


def key_of(name, grid, words):
    fam = family(name)
    cubes = grid[0] * grid[1] * grid[2]
    if fam == "matmul_entry":
        problem = matmul_problem(words)
        dtype = "f16" if "lhs_f16" in name else "bf16" if "lhs_bf16" in name else "f32"
        if problem:
            b, m, k, n = problem
            return f"matmul {dtype} [{b}, {m}, {k}]·[{b}, {k}, {n}] ({cubes} cubes)", 2.0 * b * m * k * n
        return f"matmul {dtype} ? ({cubes} cubes)", 0.0
    return f"{fam} ({cubes} cubes)", 0.0


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, steps = sys.argv[1], float(sys.argv[2])
    profile = list(profile_entries(sys.argv[3])) if len(sys.argv) > 3 else None
    rows = list(launches(path))
    count, flops, ms = defaultdict(int), defaultdict(float), defaultdict(float)
    threads, launched = defaultdict(int), defaultdict(int)
    seen = set()
    mismatched = 0
    for i, (name, grid, block, words) in enumerate(rows):
        key, flop = key_of(name, grid, words)
        count[key] += 1
        fam = family(name)
        launched[fam] += 1
        threads[fam] += grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
        flops[key] += flop
        if profile is None:
            continue
        if i >= len(profile):
            mismatched += 1
            continue
        time, module = profile[i]
        if not name.split(":", 1)[1].startswith(module):
            mismatched += 1
        function = name.split(":", 1)[0]
        if function in seen:
            ms[key] += time
        else:
            seen.add(function)
    n = len(rows)
    print(f"LAUNCHES {path}: {n / steps:.0f} per step ({steps:g} steps)")
    if profile is not None:
        print(f"joined with {sys.argv[3]}: {len(profile)} profiled launches, {mismatched} of "
              f"{n} not matching by name (the runs differ where this is not 0)")
        total = sum(ms.values())
        print(f"GPU time {total / steps:.1f} ms per step (first launch of each kernel left out)")
        print("| ms per step | share | launches per step | TFLOP/s | kernel |")
        print("|---|---|---|---|---|")
        for key, t in sorted(ms.items(), key=lambda item: -item[1])[:40]:
            rate = f"{flops[key] / (t * 1e9):.2f}" if flops[key] and t else ""
            print(f"| {t / steps:.2f} | {100 * t / max(total, 1e-9):.1f}% | {count[key] / steps:.1f} | "
                  f"{rate} | {key} |")
        return
    print("matrix products per step:")
    print("| launches per step | GFLOP per step | problem |")
    print("|---|---|---|")
    products = [k for k in count if k.startswith("matmul")]
    for key in sorted(products, key=lambda k: -flops[k]):
        print(f"| {count[key] / steps:.1f} | {flops[key] / steps / 1e9:.1f} | {key} |")
    print("other kernels per step (most launched):")
    others = [k for k in count if not k.startswith("matmul")]
    for key in sorted(others, key=lambda k: -count[k])[:25]:
        print(f"  {count[key] / steps:7.1f}  {key}")
    # Threads launched: a memory-bound kernel's work grows with them (one or a few values each).
    print("kernel families per step (most threads launched, millions; products left out):")
    print("| M threads per step | launches per step | family |")
    print("|---|---|---|")
    kernels = [f for f in threads if f != "matmul_entry"]
    for fam in sorted(kernels, key=lambda f: -threads[f])[:25]:
        print(f"| {threads[fam] / steps / 1e6:.2f} | {launched[fam] / steps:.1f} | {fam} |")


if __name__ == "__main__":
    main()
