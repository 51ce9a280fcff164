#!/usr/bin/env python3
"""Sums the GPU time of each kernel in a cubecl profiling log (`[profiling.logger] level = "full"`).

usage: kernel_times.py LOG STEPS [TOP]

LOG holds one entry per launch, `| <duration> | <kernel name>: <kernel info> CubeCount (x, y, z)`,
the info spanning many lines. The first launch of each kernel (its compilation is in its time)
is left out; the rest is divided by STEPS (the training steps the run made, warm-up included) to
give milliseconds per step, grouped by kernel, launch grid and, for matmuls, tiling and layouts.
"""
import re
import sys
from collections import defaultdict

UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
ENTRY = re.compile(r"^\| ([0-9.]+)(ns|µs|us|ms|s) +\| (.*)$")


def short_name(name):
    """`a::b::kernel::Kernel<generics>` → `kernel::Kernel` (or the matmul family's loader)."""
    base = name.split("<", 1)[0]
    return "::".join(base.split("::")[-2:])


def describe(lines):
    """A grouping key for one entry: kernel, grid, and for matmuls the tiling and layouts."""
    text = "\n".join(lines)
    head = lines[0]
    name = head.split(": ", 1)[0]
    key = short_name(name)
    if "matmul" in name:
        tile = re.search(r"tile_size: TileSize \{\s*m: (\d+),\s*n: (\d+),\s*k: (\d+)", text)
        stage = re.search(r"stage_size: StageSize \{\s*m: (\d+),\s*n: (\d+)", text)
        layouts = re.search(r"lhs_layout: (\w+),\s*rhs_layout: (\w+)", text)
        tile_matmul = re.search(r"tile_matmul: (\w+)", text)
        plane = re.search(r"plane_dim: (\d+)", text)
        parts = []
        if tile_matmul:
            parts.append(tile_matmul.group(1))
        if plane:
            parts.append("plane " + plane.group(1))
        if tile:
            parts.append("tile %sx%sx%s" % tile.groups())
        if stage:
            parts.append("stage %sx%s" % stage.groups())
        if layouts:
            parts.append("%s·%s" % layouts.groups())
        key += " [" + ", ".join(parts) + "]"
    grid = re.search(r"CubeCount (\([^)]*\)|\w+.*)$", lines[-1])
    if grid:
        key += " grid " + grid.group(1).replace(" ", "")
    return key


def entries(path):
    current = None
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            line = line.rstrip("\n")
            match = ENTRY.match(line)
            if match:
                if current:
                    yield current
                value, unit, rest = match.groups()
                current = (float(value) * UNITS[unit], [rest])
            elif current:
                current[1].append(line)
    if current:
        yield current


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, steps = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    total = defaultdict(float)
    count = defaultdict(int)
    by_name = defaultdict(float)
    seen = set()
    skipped = 0.0
    for ms, lines in entries(path):
        name = lines[0].split(": ", 1)[0]
        key = describe(lines)
        if key not in seen:
            seen.add(key)
            skipped += ms
            continue
        total[key] += ms
        count[key] += 1
        by_name[short_name(name)] += ms
    all_ms = sum(total.values())
    print(f"KERNELS {path}: {sum(count.values()) / steps:.0f} launches and {all_ms / steps:.1f} ms "
          f"of GPU time per step ({steps} steps; first launches, {skipped:.0f} ms, left out)")
    print("| ms per step | share | launches per step | µs per launch | kernel |")
    print("|---|---|---|---|---|")
    for key, ms in sorted(total.items(), key=lambda item: -item[1])[:top]:
        print(f"| {ms / steps:.2f} | {100 * ms / all_ms:.1f}% | {count[key] / steps:.1f} | "
              f"{1e3 * ms / count[key]:.1f} | {key} |")
    print("by kernel:")
    for name, ms in sorted(by_name.items(), key=lambda item: -item[1])[:top]:
        print(f"  {ms / steps:9.2f} ms  {100 * ms / all_ms:5.1f}%  {name}")


if __name__ == "__main__":
    main()
