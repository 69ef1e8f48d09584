"""What does watching a run cost? The sampler's CPU as a fraction of one core.

Runs the same 3-process workload (a parent burning CPU for a fixed time while
holding memory, two children holding memory) several times, alternating
sampled at 20 Hz and unsampled, and reports:

- the orchestrator's CPU time per second of wall time while sampling
  (``getrusage(RUSAGE_SELF)``: the sampler thread is the only thing it runs),
  minus the same figure unsampled;
- the workload's own throughput (iterations per second) sampled vs unsampled.

The sampler runs as in a run's timed part (between the ``loaded`` and
``steady`` marks): memory at 20 Hz plus the interference and telemetry
samples (every thread's schedstat, stat and sched, /proc/stat, faults,
frequency and RAPL where present). ``--threads N`` gives the parent N idle
threads more, as a vLLM tree's ~70 OpenMP and runtime threads.

Target: <= 0.5 % of one core. Both are measured side by side in one
run; on a shared host read the ratio, not the absolute numbers.

    .venv/bin/python benchmarks/sampler_overhead.py [--seconds 8] [--reps 3] [--threads 64]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from omni.sampler import TreeSampler

WORKLOAD = r"""
import mmap, subprocess, sys, threading, time
seconds, mb, threads = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
idle = threading.Event()
for _ in range(threads): threading.Thread(target=idle.wait, daemon=True).start()
m = mmap.mmap(-1, mb << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for o in range(0, mb << 20, 4096): m[o] = 1
kids = [subprocess.Popen([sys.executable, "-m", "omni.engines.synthetic", "--child", str(mb)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(2)]
for k in kids: k.stdout.readline()
print("ready", flush=True)
n, end = 0, time.perf_counter() + seconds
while time.perf_counter() < end:
    for i in range(10000): pass
    n += 10000
for k in kids: k.stdin.close(); k.wait()
print(n / seconds, flush=True)
"""


def cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_rep(seconds: float, mb: int, sampled: bool, threads: int) -> tuple[float, float, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(seconds), str(mb), str(threads)], stdout=subprocess.PIPE, text=True
    )
    proc.stdout.readline()
    cpu0, t0 = cpu_self(), time.monotonic()
    sampler = None
    if sampled:
        sampler = TreeSampler(proc.pid, cpus=tuple(sorted(os.sched_getaffinity(0)))).start()
        sampler.mark("loaded")  # the timed part: interference and telemetry samples on
    rate = float(proc.stdout.readline())
    if sampler:
        sampler.mark("steady")
        sampler.stop()
    cpu, wall = cpu_self() - cpu0, time.monotonic() - t0
    proc.wait()
    proc.stdout.close()
    return cpu / wall, rate, len(sampler.samples) if sampler else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="idle threads more in the workload's parent")
    args = parser.parse_args()
    results: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    for rep in range(args.reps):
        for sampled in (False, True) if rep % 2 == 0 else (True, False):
            results[sampled].append(one_rep(args.seconds, args.mb, sampled, args.threads))
    on = statistics.median(r[0] for r in results[True])
    off = statistics.median(r[0] for r in results[False])
    rate_on = statistics.median(r[1] for r in results[True])
    rate_off = statistics.median(r[1] for r in results[False])
    samples = statistics.median(r[2] for r in results[True])
    print(
        f"workload: 3 processes (+{args.threads} idle threads), {args.mb} MiB each, "
        f"{args.seconds:g} s, {args.reps} reps each way"
    )
    print(f"samples per sampled rep: {samples:.0f} ({samples / args.seconds:.1f} Hz)")
    print(f"orchestrator CPU, sampled:   {on * 100:.3f} % of one core")
    print(f"orchestrator CPU, unsampled: {off * 100:.3f} % of one core")
    print(f"sampler cost: {(on - off) * 100:.3f} % of one core (target <= 0.5 %)")
    print(f"workload throughput sampled/unsampled: {rate_on / rate_off:.4f}")


if __name__ == "__main__":
    main()
