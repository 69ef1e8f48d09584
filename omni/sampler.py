"""Memory of a whole process tree, sampled from outside.

Engines never report their own memory: a vLLM run is three processes (main,
EngineCore, Worker) and what matters is their sum. Each tick reads
``/proc/PID/status`` of every process in the tree (cheap: RssAnon, plus the
CPU and memory binding the process actually has); every few ticks it reads
``/proc/PID/smaps_rollup`` for Pss_Anon, which walks the page tables (costly)
but counts pages shared between processes once.

This kernel has no ``/proc/PID/task/TID/children`` (CONFIG_PROC_CHILDREN is
off on many distro kernels), so the tree is found from the ppid field of
``/proc/*/stat``, which costs one read per process on the host: done every
``tree_every`` ticks, not every tick. A pid once seen stays in the tree while
it lives, so a child that daemonizes (setsid, reparented to init) is still
counted.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field

from omni.topology import parse_cpulist

KIB_PER_MIB = 1024


def read_status(pid: int) -> dict[str, str] | None:
    """``/proc/PID/status`` as a dict, ``None`` if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def kib(value: str | None) -> int:
    # status/smaps line value: "  123456 kB"
    return int(value.split()[0]) if value else 0


def read_pss_anon_kib(pid: int) -> int | None:
    """Pss_Anon from ``smaps_rollup`` (Linux >= 5.x), ``None`` if unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss_Anon:"):
                    return kib(line.split(":", 1)[1])
    except OSError:
        return None
    return None


def parent_map() -> dict[int, list[int]]:
    """ppid -> children, from ``/proc/*/stat`` (field 4, after the ``(comm)``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "1234 (python3) S 1200 ...": comm may contain spaces and parens
        ppid = int(stat[stat.rindex(b")") + 2 :].split(b" ", 2)[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(root: int, children: dict[int, list[int]]) -> set[int]:
    found, stack = {root}, [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


@dataclass
class ProcessSeen:
    """What one process of the tree looked like the last time we read it."""

    pid: int
    name: str
    cpus_allowed: list[int]
    mems_allowed: list[int]


@dataclass(frozen=True)
class Sample:
    t: float  # monotonic seconds
    phase: str
    rss_anon_kib: int
    n_procs: int


@dataclass(frozen=True)
class PssSample:
    t: float
    phase: str
    pss_anon_kib: int


@dataclass
class TreeSampler:
    """Background thread sampling a process tree until :meth:`stop`.

    ``interval`` is the RssAnon period (0.05 s = 20 Hz); Pss_Anon is read every
    ``pss_every`` ticks (and right after each phase mark) and the tree
    refreshed every ``tree_every`` ticks.
    """

    root_pid: int
    interval: float = 0.05
    pss_every: int = 4
    tree_every: int = 4
    samples: list[Sample] = field(default_factory=list)
    pss_samples: list[PssSample] = field(default_factory=list)
    seen: dict[int, ProcessSeen] = field(default_factory=dict)
    phase_marks: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._pids: set[int] = {self.root_pid}
        self._phase = "start"
        self._pss_due = self._tree_due = False
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.root_pid}", daemon=True)

    def start(self) -> "TreeSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def mark(self, phase: str) -> None:
        """Record that the engine entered ``phase`` (called by the log reader)."""
        self.phase_marks.append((time.monotonic(), phase))
        self._phase = phase
        # after-load and steady need the whole tree, and a Pss sample, in their phase
        self._tree_due = self._pss_due = True

    def tree_pids(self) -> set[int]:
        return set(self._pids)

    def _loop(self) -> None:
        tick = 0
        next_t = time.monotonic()
        while not self._stop.is_set():
            if tick % self.tree_every == 0 or self._tree_due:
                self._tree_due = False
                self._refresh_tree()
            self._sample_rss()
            if tick % self.pss_every == 0 or self._pss_due:
                self._pss_due = False
                self._sample_pss()
            tick += 1
            next_t += self.interval
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def _refresh_tree(self) -> None:
        self._pids |= descendants(self.root_pid, parent_map())

    def _sample_rss(self) -> None:
        total, alive = 0, set()
        for pid in self._pids:
            status = read_status(pid)
            if status is None or status.get("State", "").startswith("Z"):
                continue
            alive.add(pid)
            total += kib(status.get("RssAnon"))
            self.seen[pid] = ProcessSeen(
                pid,
                status.get("Name", "?"),
                parse_cpulist(status.get("Cpus_allowed_list", "")),
                parse_cpulist(status.get("Mems_allowed_list", "")),
            )
        # keep the root even when it is momentarily unreadable: it may be exec'ing
        self._pids = alive | {self.root_pid}
        if alive:
            self.samples.append(Sample(time.monotonic(), self._phase, total, len(alive)))

    def _sample_pss(self) -> None:
        values = [read_pss_anon_kib(pid) for pid in self._pids]
        values = [v for v in values if v is not None]
        if values:
            self.pss_samples.append(PssSample(time.monotonic(), self._phase, sum(values)))


@dataclass(frozen=True)
class MemorySummary:
    """Peak, after-load and steady values of one series, in MiB."""

    peak_mb: float | None
    after_load_mb: float | None
    steady_mb: float | None
    count: int
    interval_ms: float | None


def summarize_series(points: list[tuple[float, str, int]]) -> MemorySummary:
    """Reduce ``(t, phase, kib)`` points to peak, after-load and steady.

    after-load is the first sample taken once the engine said ``loaded``;
    steady is the median of samples in the ``steady`` phase (after the
    timed work); ``None`` when the engine never got there.
    """
    if not points:
        return MemorySummary(None, None, None, 0, None)
    values = [p[2] / KIB_PER_MIB for p in points]
    loaded = [p[2] / KIB_PER_MIB for p in points if p[1] in ("loaded", "steady")]
    steady = [p[2] / KIB_PER_MIB for p in points if p[1] == "steady"]
    gaps = [b[0] - a[0] for a, b in zip(points, points[1:])]
    return MemorySummary(
        peak_mb=max(values),
        after_load_mb=loaded[0] if loaded else None,
        steady_mb=statistics.median(steady) if steady else None,
        count=len(points),
        interval_ms=statistics.mean(gaps) * 1000 if gaps else None,
    )


def summarize(sampler: TreeSampler) -> dict:
    """The sampler's findings as row columns."""
    rss = summarize_series([(s.t, s.phase, s.rss_anon_kib) for s in sampler.samples])
    pss = summarize_series([(s.t, s.phase, s.pss_anon_kib) for s in sampler.pss_samples])
    return {
        "rss_anon_tree_mb": rss.peak_mb,
        "rss_anon_after_load_mb": rss.after_load_mb,
        "rss_anon_steady_mb": rss.steady_mb,
        "rss_samples": rss.count,
        "rss_interval_ms": rss.interval_ms,
        "pss_anon_tree_mb": pss.peak_mb,
        "pss_anon_after_load_mb": pss.after_load_mb,
        "pss_anon_steady_mb": pss.steady_mb,
        "pss_samples": pss.count,
        "pss_interval_ms": pss.interval_ms,
        "n_procs": max((s.n_procs for s in sampler.samples), default=None),
    }
