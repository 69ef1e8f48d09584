"""What does a mark's memory read cost on a large process? Pss and ``numa_maps`` by RSS.

At the ``loaded`` and ``steady`` marks the sampler reads each process's
``smaps_rollup`` (Pss_Anon) and ``numa_maps`` (pages per node), whatever
they cost: those values are a row's columns. Both walk the page tables of
every mapping, so their cost grows with the resident memory. A tiny model's
tree costs 15-20 ms a read; an 8B model holds about 16 GB of bf16 weights
and its KV cache besides.

This holds SIZE GiB of touched anonymous memory in a child process, for each
size given, and times omni's own reads of it (``read_pss_anon_kib``,
``read_numa_maps``) as the sampler's thread CPU time and wall time, median
and range over the reps. ``--no-thp`` advises the mapping against huge pages
(4 KiB pages: 512 times the page-table entries of 2 MiB pages), the case an
engine meets where THP is ``madvise`` or ``never`` and its allocator does not
ask for them.

    .venv/bin/python benchmarks/mark_read_cost.py [--sizes 0.5 2 8 16] [--reps 5] [--no-thp]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from omni.measure.procfs import read_numa_maps, read_pss_anon_kib

HOLDER = """
import mmap, sys
size, thp = int(sys.argv[1]), sys.argv[2] == "thp"
mem = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
mem.madvise(mmap.MADV_HUGEPAGE if thp else mmap.MADV_NOHUGEPAGE)
chunk = b"\\1" * (1 << 20)
for offset in range(0, size, len(chunk)):
    mem[offset : offset + len(chunk)] = chunk
print("ready", flush=True)
sys.stdin.read()
"""


def timed(read, pid: int) -> tuple[float, float, object]:
    """(thread CPU ms, wall ms, value) of one read."""
    cpu, wall = time.thread_time(), time.perf_counter()
    value = read(pid)
    return 1e3 * (time.thread_time() - cpu), 1e3 * (time.perf_counter() - wall), value


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def measure(gib: float, reps: int, thp: bool) -> dict[str, str]:
    size = int(gib * (1 << 30))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(size), "thp" if thp else "nothp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if holder.stdout.readline().strip() != "ready":
            raise SystemExit(
                f"the {gib} GiB holder did not start (rc {holder.wait()}): is there that much memory free?"
            )
        out: dict[str, str] = {}
        for name, read in (("pss", read_pss_anon_kib), ("numa_maps", read_numa_maps)):
            runs = [timed(read, holder.pid) for _ in range(reps)]
            out[f"{name} cpu ms"] = spread([r[0] for r in runs])
            out[f"{name} wall ms"] = spread([r[1] for r in runs])
        pss_kib = read_pss_anon_kib(holder.pid) or 0
        huge_kib = anon_huge_kib(holder.pid)
        out["resident"] = f"{pss_kib / (1 << 20):.2f} GiB, {huge_kib / (1 << 20):.2f} GiB in huge pages"
        return out
    finally:
        holder.stdin.close()
        holder.wait()


def anon_huge_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.5, 2, 8, 16], help="GiB held, one holder each")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-thp", action="store_true", help="advise the mapping against huge pages")
    args = parser.parse_args()
    thp_mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    print(f"THP enabled: {thp_mode}; mapping advised {'against' if args.no_thp else 'for'} huge pages")
    print("size GiB | resident | Pss cpu ms | Pss wall ms | numa_maps cpu ms | numa_maps wall ms")
    for gib in args.sizes:
        got = measure(gib, args.reps, thp=not args.no_thp)
        print(
            f"{gib:g} | {got['resident']} | {got['pss cpu ms']} | {got['pss wall ms']} | "
            f"{got['numa_maps cpu ms']} | {got['numa_maps wall ms']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
