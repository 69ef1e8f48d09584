"""The tree's memory: RssAnon of every process each tick, summed, and Pss_Anon
less often, and the row's peak, after-load and steady figures of each.

RssAnon comes from ``/proc/PID/statm`` through a kept descriptor, one
syscall a process a tick; a process whose statm is gone leaves the tree.
Pss_Anon comes from ``/proc/PID/smaps_rollup``, which walks the page tables
(costly: a 128 MiB process about 1.5 ms a read, a multi-GB vLLM worker tens
of ms) but counts pages shared between processes once: paced by what it
costs, and right after the ``loaded`` and ``steady`` marks, whose values a
row reports.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from omni.measure.procfs import KIB_PER_MIB, StatmReader, read_pss_anon_kib
from omni.measure.sampler import BUDGET, INTERVAL_S, Found, Pace, RunView, Source, Tree

PSS_PHASES = ("loaded", "steady")  # phase marks that trigger a Pss read: after-load and steady


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


class MemorySource(Source):
    """RssAnon every tick, Pss_Anon at most every ``interval`` and within ``budget`` of one core."""

    def __init__(self, interval: float = INTERVAL_S, budget: float = BUDGET) -> None:
        self.samples: list[Sample] = []
        self.pss_samples: list[PssSample] = []
        self._statm = StatmReader()
        self._kept: set[int] = set()  # pids whose statm is held open
        self._pss = Pace(interval, budget)

    def tick(self, tree: Tree, now: float) -> None:
        self._sample_rss(tree)
        if self._pss.ready(now):
            self._pss.run(now, lambda: self._sample_pss(tree))

    def mark(self, tree: Tree, phase: str) -> None:
        # Pss (a page-table walk: 15 ms a read of a tiny-model vLLM tree) right
        # after the marks whose values a row reports (after-load, steady) only
        if phase in PSS_PHASES:
            self._pss.due = True

    def stop(self) -> None:
        self._statm.close()

    def found(self, tree: Tree, run: RunView) -> Found:
        if not run.figures:
            return Found()
        rss = summarize_series([(s.t, s.phase, s.rss_anon_kib) for s in self.samples])
        pss = summarize_series([(s.t, s.phase, s.pss_anon_kib) for s in self.pss_samples])
        return Found(
            {
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
                "n_procs": max((s.n_procs for s in self.samples), default=None),
            }
        )

    def _sample_rss(self, tree: Tree) -> None:
        pids = list(tree.pids)
        for pid in self._kept.difference(pids):  # left the tree (a zombie): its descriptor goes
            self._statm.forget(pid)
        self._kept = set(pids)
        total, alive = 0, 0
        for pid in pids:
            value = self._statm.read(pid)
            if value is None:
                tree.discard(pid)
                self._kept.discard(pid)
            elif value or pid == tree.root_pid:  # a zombie's statm is all zeros
                total += value
                alive += 1
        if alive:
            self.samples.append(Sample(time.monotonic(), tree.phase, total, alive))

    def _sample_pss(self, tree: Tree) -> None:
        values = [read_pss_anon_kib(pid) for pid in list(tree.pids)]
        values = [v for v in values if v is not None]
        if values:
            self.pss_samples.append(PssSample(time.monotonic(), tree.phase, sum(values)))
