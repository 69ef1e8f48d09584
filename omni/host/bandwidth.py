"""A slot's memory and cache read bandwidth, measured by likwid-bench.

likwid-bench (the LIKWID project's, Debian package ``likwid``) is a
maintained STREAM-like kernel suite: hand-written assembly loops per ISA,
each thread first-touching its own chunk of the buffer (``-W``), the rate
computed from the bytes the kernel moves. omni runs it inside the slot's own
binding (``numactl --physcpubind=<slot CPUs> --membind=<node>``): likwid
builds its thread domain ``N`` from the CPUs the process may use, so the
threads land on the slot's CPUs and nowhere else, and the memory policy puts
every page on the node asked for.

The kernel is the read-only ``load`` one, widest the ISA has
(``load_avx512`` with AVX-512, ``load_avx``, else ``load_sse``): decode of
an LLM reads weights and KV, it writes almost nothing, so a read roof is
the one it can meet (a triad's writes would lower it by the write-allocate
traffic). Two working sets:

- DRAM: far larger than the last-level cache the slot reaches
  (:func:`dram_buffer_bytes`);
- cache: half of that last-level cache, so a model whose working set fits
  in it is judged against the roof it actually runs under.

Pure parsing (:func:`parse_rate`, :func:`llc_bytes`) is apart from the run
(:func:`run_bandwidth`) so both are tested on canned text.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from omni.cpulist import format_cpulist, parse_cpulist
from omni.errors import OmniError
from omni.host.placement import numactl_path, pin_argv
from omni.host.topology import Slot

LIKWID_BENCH = "likwid-bench"
INSTALL_HINT = "install it with `apt-get install likwid` (scripts/bootstrap.sh does)"
MIB = 1 << 20
# A DRAM working set at least this many times the last-level cache and at least this big:
# a cache of tens of MB holds none of it between passes.
DRAM_LLC_MULTIPLE = 16
DRAM_MIN_BYTES = 512 * MIB
# what one run reads (``-i``: passes over the buffer, each thread its own part): a second or
# less of DRAM time, so a figure can be repeated often enough to find its best mode
RUN_READ_BYTES = 32 * 10**9
RATE_LINE = re.compile(r"^MByte/s:\s*([0-9.eE+-]+)\s*$", re.M)
VERSION_LINE = re.compile(r"Version\s+([0-9][0-9.]*)")


def load_kernel(cpu_flags: list[str] | tuple[str, ...]) -> str:
    """The widest read kernel this CPU runs (from /proc/cpuinfo's flags)."""
    flags = set(cpu_flags)
    if "avx512f" in flags:
        return "load_avx512"
    if "avx" in flags:
        return "load_avx"
    return "load_sse"


def parse_rate(text: str) -> float:
    """Bytes per second from likwid-bench's report (``MByte/s:  33015.06``:
    10^6 bytes, as STREAM counts them)."""
    found = RATE_LINE.findall(text)
    if len(found) != 1:
        raise OmniError(f"likwid-bench printed {len(found)} MByte/s lines, expected 1:\n{text[-1500:]}")
    return float(found[0]) * 1e6


def llc_bytes(cpus: tuple[int, ...] | list[int], root: str | Path = "/") -> int | None:
    """The last-level cache the CPUs reach: the sum of the distinct
    highest-level cache instances they share (an EPYC slot spanning two CCDs
    reaches two L3s). None when sysfs does not say."""
    base = Path(root) / "sys" / "devices" / "system" / "cpu"
    best: dict[int, dict[str, int]] = {}
    for cpu in cpus:
        for index in sorted((base / f"cpu{cpu}" / "cache").glob("index*")):
            try:
                level = int((index / "level").read_text())
                kind = (index / "type").read_text().strip()
                size = parse_size((index / "size").read_text().strip())
                shared = format_cpulist(parse_cpulist((index / "shared_cpu_list").read_text().strip()))
            except (OSError, ValueError):
                continue
            if kind in ("Unified", "Data"):
                best.setdefault(level, {})[shared] = size
    if not best:
        return None
    return sum(best[max(best)].values())


def parse_size(text: str) -> int:
    """sysfs cache size (``32768K``, ``1024K``, ``2M``) in bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def dram_buffer_bytes(llc: int | None) -> int:
    return max(DRAM_LLC_MULTIPLE * (llc or 0), DRAM_MIN_BYTES)


def cache_buffer_bytes(llc: int | None) -> int | None:
    return llc // 2 if llc else None


def likwid_bench() -> str:
    path = shutil.which(LIKWID_BENCH)
    if path is None:
        raise OmniError(f"{LIKWID_BENCH} not found: it measures the slot's bandwidth; {INSTALL_HINT}")
    return path


def likwid_version() -> str | None:
    done = subprocess.run([likwid_bench(), "-h"], capture_output=True, text=True, timeout=30)
    found = VERSION_LINE.search(done.stdout + done.stderr)
    return found.group(1) if found else None


def bandwidth_argv(cpus: tuple[int, ...], node: int, kernel: str, size: int, threads: int) -> list[str]:
    """likwid-bench bound as the slot's engine is (:func:`omni.host.placement.pin_argv`):
    its CPUs, and its memory on ``node``. numactl is required: without
    ``--membind`` the figure would not be the node's."""
    numactl = numactl_path()
    if numactl is None:
        raise OmniError("numactl not found: limits are measured inside the slot's binding; apt-get install numactl")
    kib = max(size // 1024, 4)
    bench = [likwid_bench(), "-t", kernel, "-i", str(iterations(kib * 1024)), "-W", f"N:{kib}kB:{threads}"]
    return pin_argv(Slot(index=0, node=node, cpus=tuple(cpus), mems=(node,)), bench, numactl)[0]


def iterations(size: int) -> int:
    """Passes over a ``size``-byte buffer that read :data:`RUN_READ_BYTES` (likwid's
    own calibration would spend seconds finding a count per run)."""
    return max(10, -(-RUN_READ_BYTES // size))


def run_bandwidth(argv: list[str], timeout_s: float = 300.0) -> float:
    """One likwid-bench run's read rate, bytes/s."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise OmniError(f"likwid-bench ran over {timeout_s:.0f} s: {' '.join(argv)}") from e
    if done.returncode != 0:
        raise OmniError(f"likwid-bench failed (exit {done.returncode}): {' '.join(argv)}\n{done.stderr[-1500:]}")
    return parse_rate(done.stdout)
