#!/usr/bin/env python3
"""Where a training step leaves a GPU without work, from the stand-in driver's timeline
(`fake-cuda`'s $FAKECUDA_TIMELINE): the stretches between consecutive launches (or a launch and
a read back) longer than a threshold, which on a GPU are idle time unless work queued earlier
is still running there.

    FAKECUDA_TIMELINE=/tmp/tl bench_train --child cuda --steps 8 ARGS
    python3 xtask/device/launch_gaps.py /tmp/tl.PID [THRESHOLD_MS [KERNEL]]

A step ends at its largest read back (the gradient norm's partial sums); the warm-up step and
what follows the last step's read are left out. Prints the median over the steps of the
launches, reads and waits a step, of the stretches longer than THRESHOLD_MS (0.5 by default),
of their total and of the longest, and of the time from a step's read to the next step's first
launch of KERNEL (a name's part: `copy_kernel_t_i32` for the first char ids the token encoder
reads; the device has no work but the update's in between). The stand-in's own device-to-device
copies and memsets (host work here, queued on a GPU) are left out of every stretch.
"""
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    threshold = 1000 * float(sys.argv[2]) if len(sys.argv) > 2 else 500.0
    kernel = sys.argv[3] if len(sys.argv) > 3 else "copy_kernel_t_i32"
    events = []
    copying_since, copying = None, 0.0
    for line in open(sys.argv[1]):
        parts = line.split(" ")
        if len(parts) < 4:
            continue
        time = float(parts[0])
        if parts[1] == "copy":
            copying_since = time
        elif parts[1] == "copied" and copying_since is not None:
            copying += time - copying_since
            copying_since = None
        elif parts[1] in ("launch", "read", "wait"):
            # Times with the stand-in's copies so far taken out.
            events.append((time - copying, parts[1], int(parts[3]), parts[2]))
    largest = max((e[2] for e in events if e[1] == "read"), default=None)
    ends = [i for i, e in enumerate(events) if e[1] == "read" and e[2] == largest]
    if len(ends) < 2:
        sys.exit(f"{sys.argv[1]}: fewer than two steps")
    rows = []
    for a, b in zip(ends, ends[1:]):
        step = events[a + 1 : b + 1]
        count = {k: sum(1 for e in step if e[1] == k) for k in ("launch", "read", "wait")}
        times = [events[a][0]] + [e[0] for e in step if e[1] != "wait"]
        gaps = [y - x for x, y in zip(times, times[1:]) if y - x > threshold]
        first = next((e[0] for e in step if e[1] == "launch" and kernel in e[3]), events[a][0])
        rows.append((count, len(gaps), sum(gaps), max(gaps, default=0.0), first - events[a][0]))
    median = lambda f: statistics.median(f(r) for r in rows)
    print(
        f"{len(rows)} steps, median a step: {median(lambda r: r[0]['launch']):.0f} launches, "
        f"{median(lambda r: r[0]['read']):.0f} reads, {median(lambda r: r[0]['wait']):.0f} waits; "
        f"{median(lambda r: r[1]):.0f} stretches over {threshold / 1000:g} ms without a launch, "
        f"{median(lambda r: r[2]) / 1000:.2f} ms in them, the longest "
        f"{median(lambda r: r[3]) / 1000:.2f} ms; from the read to the next step's first "
        f"{kernel} {median(lambda r: r[4]) / 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
