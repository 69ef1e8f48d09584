"""A serving level's load generator seen from outside while its measured
requests run: the CPUs its threads actually ran on, and what else ran on its
CPUs. The foreign time is the interference source's own accounting
(:class:`~omni.measure.interference.InterferenceSource`, every CPU's busy time
from ``/proc/stat`` less the tree's threads' time, put on the CPU each last
ran on), here on the client's CPUs instead of the server's.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from omni.measure.interference import InterferenceSample, InterferenceSource, summarize_interference
from omni.measure.procfs import ThreadSchedReader, descendants, parent_map
from omni.measure.sampler import TREE_PERIOD_S, Moment, Tree

# Twice a second: the interference rule's shortest window (MIN_WINDOW_S), so
# each window between samples is judged on its own, and a neighbour's duty
# cycle of tens to hundreds of ms shows in the worst of them. Reading a
# client's few threads costs well under a millisecond.
SAMPLE_S = 0.5


@dataclass(frozen=True)
class ClientCpus:
    """What the samples of one level say: CPUs not the client's that its
    threads were seen on (the CPU each last ran on, at every sample), and the
    foreign share of its CPUs: over the level, % of their capacity, and the
    busiest CPU's worst window, % of one CPU (None: no window 0.5 s long)."""

    outside: tuple[int, ...] | None
    foreign_mean_pct: float | None
    foreign_peak_pct: float | None
    samples: int


class ClientSampler(threading.Thread):
    """Samples the client's tree every :data:`SAMPLE_S` from :meth:`start`
    (its measured requests begin) to :meth:`finish` (they are done), one
    sample at each end."""

    def __init__(self, root_pid: int, cpus: tuple[int, ...], period_s: float = SAMPLE_S) -> None:
        super().__init__(name="client-cpus", daemon=True)
        self.root_pid, self.cpus, self.period_s = root_pid, tuple(cpus), period_s
        self.source = InterferenceSource()
        self.tree = Tree(root_pid)
        self._reader = ThreadSchedReader()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._pids: set[int] = {root_pid}
        self._scanned_at = -float("inf")
        self._closed = False

    def run(self) -> None:
        self.sample()
        while not self._done.wait(self.period_s):
            self.sample()

    def finish(self) -> None:
        """The last sample, taken now; the kept thread files closed."""
        self._done.set()
        if self.is_alive():
            self.join(timeout=5)
        self.sample()
        with self._lock:
            self._closed = True
            self._reader.close()

    def sample(self) -> None:
        with self._lock:
            if self._closed:
                return
            now = time.monotonic()
            if now - self._scanned_at >= TREE_PERIOD_S:  # its children, if any, came before its requests
                self._pids = {self.root_pid} | descendants(self.root_pid, parent_map())
                self._scanned_at = now
            threads = self._reader.read(self._pids)
            first = not self.source.samples
            self.source.timed(Moment(now, "level", False, first, frozenset(self._pids), threads, self.tree))

    def summary(self) -> ClientCpus:
        with self._lock:
            samples = list(self.source.samples)
            seen = {cpu for totals in self.tree.thread_totals.values() for cpu in totals.cpus}
        return client_cpus_summary(samples, seen, self.cpus)


def client_cpus_summary(samples: list[InterferenceSample], seen: set[int], cpus: tuple[int, ...]) -> ClientCpus:
    """:class:`ClientCpus` from interference samples on the client's ``cpus``
    and the CPUs its threads were ``seen`` on; nothing known below two samples."""
    if len(samples) < 2:
        return ClientCpus(None, None, None, len(samples))
    found = summarize_interference(samples, cpus)
    return ClientCpus(tuple(sorted(seen - set(cpus))), found.mean_pct, found.peak_pct, len(samples))
