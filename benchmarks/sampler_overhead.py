"""What does watching a run cost? The sampler's CPU as a fraction of one core.

Runs the same 3-process workload (a parent burning CPU for a fixed time while
holding memory, two children holding memory) several times, interleaving
three ways: unsampled, sampled for memory only, and sampled as in a run's
timed part (memory plus the interference and telemetry samples: every
thread's schedstat and stat about once a second, its switches, migrations
and the tree's faults at both marks, /proc/stat, frequency and RAPL where
present). It reports, as medians over the reps:

- the orchestrator's CPU time per second of wall time
  (``getrusage(RUSAGE_SELF)``: the sampler thread is the only thing it
  runs), each sampled way minus unsampled: the sampler's cost, and the
  telemetry's share of it;
- where the full sampler's time went (its own counters);
- the floor: a thread waking at 20 Hz and reading nothing, which on a VM is
  a large part of the whole (each wake-up is a timer exit);
- the workload's own throughput (iterations per second), sampled vs unsampled.

``--threads N`` gives the parent N idle threads more, as a vLLM tree's ~70
OpenMP and runtime threads. Target: <= 0.5 % of one core. Every way is
measured side by side in one run; on a shared host read the differences,
not the absolute numbers.

    .venv/bin/python benchmarks/sampler_overhead.py [--seconds 8] [--reps 3] [--threads 64]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

from omni.measure.memory import MemorySource
from omni.measure.numa_pages import NumaSource
from omni.measure.procfs import ThreadSchedReader, read_threads_sched
from omni.measure.sampler import TreeSampler
from omni.measure.sources import tree_sampler

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


MODES = ("off", "memory", "full")


def one_rep(seconds: float, mb: int, mode: str, threads: int) -> tuple[float, float, TreeSampler | None]:
    """(orchestrator CPU per wall second, workload rate, the sampler) of one
    workload, unsampled (``off``), or sampled with marks that bound its
    timed part: ``loaded`` (telemetry on, ``full``) or ``load`` (memory only)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, str(seconds), str(mb), str(threads)], stdout=subprocess.PIPE, text=True
    )
    proc.stdout.readline()
    cpu0, t0 = cpu_self(), time.monotonic()
    sampler = None
    if mode != "off":
        sampler = tree_sampler(proc.pid, cpus=tuple(sorted(os.sched_getaffinity(0)))).start()
        sampler.mark("loaded" if mode == "full" else "load")
    rate = float(proc.stdout.readline())
    if sampler:
        sampler.mark("steady")
        sampler.stop()
    cpu, wall = cpu_self() - cpu0, time.monotonic() - t0
    proc.wait()
    proc.stdout.close()
    return cpu / wall, rate, sampler


def wake_floor(seconds: float, interval: float = 0.05) -> float:
    """CPU per wall second of a thread that wakes every ``interval`` and does nothing."""
    start, t0 = time.thread_time(), time.monotonic()
    next_t = t0
    while time.monotonic() - t0 < seconds:
        next_t += interval
        time.sleep(max(0.0, next_t - time.monotonic()))
    return (time.thread_time() - start) / (time.monotonic() - t0)


def thread_reads(threads: int, reps: int = 200) -> tuple[float, float]:
    """ms of CPU to read every thread's schedstat and stat in a process of
    ``threads`` idle threads more: opened each time, and kept open."""
    stop = threading.Event()
    started = [threading.Thread(target=stop.wait, daemon=True) for _ in range(threads)]
    for thread in started:
        thread.start()
    reader, pids = ThreadSchedReader(), [os.getpid()]
    try:
        reader.read(pids)
        out = []
        for read in (lambda: read_threads_sched(pids), lambda: reader.read(pids)):
            start = time.thread_time()
            for _ in range(reps):
                read()
            out.append(1000 * (time.thread_time() - start) / reps)
        return out[0], out[1]
    finally:
        stop.set()
        reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="idle threads more in the workload's parent")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, TreeSampler | None]]] = {mode: [] for mode in MODES}
    floors = []
    for rep in range(args.reps):
        for mode in MODES[rep % 3 :] + MODES[: rep % 3]:  # each way first in turn
            results[mode].append(one_rep(args.seconds, args.mb, mode, args.threads))
        floors.append(wake_floor(min(args.seconds, 5.0)))
    cpu = {mode: [r[0] for r in results[mode]] for mode in MODES}
    off = statistics.median(cpu["off"])

    def pct(values) -> str:
        return f"{100 * statistics.median(values):.3f} % ({', '.join(f'{100 * v:.3f}' for v in values)})"

    print(
        f"workload: 3 processes (+{args.threads} idle threads), {args.mb} MiB each, "
        f"{args.seconds:g} s, {args.reps} reps each way, interleaved"
    )
    samplers = [r[2] for r in results["full"]]
    print(f"samples per sampled rep: {statistics.median(len(s.source(MemorySource).samples) for s in samplers):.0f}")
    print(f"orchestrator CPU, unsampled: {pct(cpu['off'])} of one core")
    print(f"sampler cost, memory only: {pct([c - off for c in cpu['memory']])} of one core")
    print(f"sampler cost, with telemetry: {pct([c - off for c in cpu['full']])} of one core (target <= 0.5 %)")
    full = sorted(samplers, key=lambda s: s.cost()[0])[len(samplers) // 2]  # the median rep
    cpu_s, share = full.cost()
    span = cpu_s / share
    numa_cpu_s = full.source(NumaSource).cpu_s
    parts = {
        "interference and telemetry samples": full.timed_cpu_s,
        "numa_maps reads": numa_cpu_s,
        "everything else (20 Hz RssAnon, tree, Pss, wake-ups)": cpu_s - full.timed_cpu_s - numa_cpu_s,
    }
    print("where one full rep's sampler time went, % of one core:")
    for name, spent in parts.items():
        print(f"  {name}: {100 * spent / span:.3f} % ({1000 * spent:.1f} ms of {span:.1f} s)")
    print(f"floor, a thread waking at 20 Hz reading nothing: {pct(floors)} of one core")
    opened, kept = thread_reads(max(args.threads, 64))
    print(
        f"every thread's schedstat and stat, {max(args.threads, 64) + 1} threads: opened each time {opened:.2f} ms, "
        f"kept open {kept:.2f} ms"
    )
    rates = {mode: statistics.median(r[1] for r in results[mode]) for mode in MODES}
    print(f"workload throughput with telemetry/unsampled: {rates['full'] / rates['off']:.4f}")


if __name__ == "__main__":
    main()
