"""The sampler: one background thread that walks a whole process tree from
outside and hands it to each thing it samples, and the interface those
things implement (:class:`Source`, one module each; the standard set, in
order: :mod:`omni.measure.sources`).

Engines never report their own memory: a vLLM run is three processes (main,
EngineCore, Worker) and what matters is their sum. The sampler ticks at
20 Hz; each tick every source reads what is due, paced so each costly read
stays under a small CPU budget. The tree refresh reads ``/proc/PID/status``
of every member, for its state and the CPUs it may use (and its cpuset's
memory nodes), and once in steady state each thread's own affinity.

This kernel has no ``/proc/PID/task/TID/children`` (CONFIG_PROC_CHILDREN is
off on many distro kernels), so the tree is found from the ppid field of
``/proc/*/stat``, which costs one read per process on the host: done every
couple of seconds and at each phase mark, not every tick. A pid once seen
stays in the tree while it lives, so a child that daemonizes (setsid,
reparented to init) is still counted.

From the ``loaded`` mark to the ``steady`` mark (the timed part: warm-up and
timed generations) it also takes timed samples, about once a second and at
both marks: every thread's ``schedstat`` (and at the marks its switches),
handed to each source as a :class:`Moment`, and the row's per-thread table
from them (:func:`thread_table`). Each run's whole sampler cost is in its row
(:meth:`TreeSampler.cost`). Measured over the timed part of a 20 s run
(benchmarks/sampler_overhead.py, docs/measurements.md): about 0.44 % of one
core for a 3-process tree and 0.48 % with 64 threads more, of which the
20 Hz loop's wake-ups alone are about 0.2 % on a VM.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from omni.cpulist import format_cpulist, parse_cpulist
from omni.host.topology import Slot
from omni.measure.procfs import ThreadSched, ThreadSchedReader, descendants, parent_map, read_status

# The timed part is sampled from the first of these marks to the last.
TIMED_FROM, TIMED_TO = "loaded", "steady"
# About once a second: a neighbour's duty cycle is tens to hundreds of ms, so a
# second holds several of its periods, and /proc/stat's 10 ms ticks give a
# one-CPU share to about 1 %. Slower when a read of a many-threaded tree costs
# more than the budget (of one core).
TIMED_PERIOD_S = 1.0
TIMED_BUDGET = 0.0006
# A scan of every process's ppid younger than this is reused (see Tree.descendants).
RESCAN_S = 0.25
INTERVAL_S = 0.05  # a tick: RssAnon at 20 Hz
TREE_PERIOD_S = 2.0  # the tree refresh, and numa_maps, at most this often
BUDGET = 0.0002  # of one core, for each of the tree refresh, Pss and numa_maps
# Threads listed one by one in a row's thread_sched, busiest first; the rest
# are summed into one entry. An 8-core vLLM tree has about 70 threads, most idle.
THREADS_LISTED = 12


@dataclass
class ProcessSeen:
    """What one process of the tree looked like the last time we read it."""

    pid: int
    name: str
    cpus_allowed: list[int]
    mems_allowed: list[int]  # the cpuset's nodes, not the memory policy
    policy: str | None = None  # a thread's own memory policy (threads_seen only)


@dataclass
class ThreadTotals:
    """One engine thread's counters over the timed part."""

    pid: int
    tid: int
    process: str
    name: str
    cpu_s: float = 0.0
    run_delay_s: float = 0.0
    nvcsw: int = 0
    nivcsw: int = 0
    migrations: int | None = None
    cpus: set[int] = field(default_factory=set)


def thread_table(threads: list[ThreadTotals], listed: int = THREADS_LISTED) -> list[dict]:
    """The busiest ``listed`` threads, each a dict, then one entry summing the rest."""
    ranked = sorted(threads, key=lambda t: -t.cpu_s)

    def entry(name: str, process: str, group: list[ThreadTotals], tid: int | None) -> dict:
        migrations = [t.migrations for t in group]
        return {
            "name": name,
            "process": process,
            "tid": tid,
            "threads": len(group),
            "cpu_s": round(sum(t.cpu_s for t in group), 4),
            "run_delay_ms": round(1000 * sum(t.run_delay_s for t in group), 3),
            "nvcsw": sum(t.nvcsw for t in group),
            "nivcsw": sum(t.nivcsw for t in group),
            "migrations": None if None in migrations else sum(migrations),
            "cpus": format_cpulist(sorted(set().union(*(t.cpus for t in group)))),
        }

    table = [entry(t.name, t.process, [t], t.tid) for t in ranked[:listed]]
    if ranked[listed:]:
        table.append(entry("(other threads)", "", ranked[listed:], None))
    return table


def timed(work: Callable[[], object]) -> float:
    """The CPU seconds ``work`` took on this thread."""
    start = time.thread_time()
    work()
    return time.thread_time() - start


@dataclass
class Pace:
    """When a costly read is next due: ``due`` asks for one at the next tick;
    else one is due ``period_s`` after the last, or later, so that its reads
    cost at most ``budget`` of one core; none is paced while not ``live``."""

    period_s: float
    budget: float
    due: bool = True
    live: bool = True
    next_at: float = 0.0

    def ready(self, now: float) -> bool:
        return self.due or (self.live and now >= self.next_at)

    def run(self, now: float, work: Callable[[], object]) -> float:
        """Do the read, and set the next one by what it cost; returns the cost."""
        self.due = False
        cost = timed(work)
        self.next_at = now + max(self.period_s, cost / self.budget)
        return cost


class Tree:
    """The process tree under one root as the sampler last walked it: its
    members, what each looked like, the engine's phase marks, and each
    thread's totals over the timed part."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.pids: set[int] = {root_pid}
        self.seen: dict[int, ProcessSeen] = {}
        self.threads_seen: dict[tuple[int, int], ProcessSeen] = {}
        self.thread_totals: dict[tuple[int, int], ThreadTotals] = {}  # over the timed part
        self.phase = "start"
        self.phase_marks: list[tuple[float, str]] = []
        self.steady_pids: set[int] | None = None  # the tree when the engine said steady
        self._bindings: dict[tuple[int, str, str], tuple[list[int], list[int]]] = {}
        self._scan_lock = threading.Lock()
        self._scanned: set[int] = set()
        self._scanned_at = -math.inf

    def mark(self, phase: str, now: float) -> None:
        self.phase_marks.append((now, phase))
        if phase == "steady" and self.steady_pids is None:
            self.steady_pids = set(self.pids)
        self.phase = phase

    def discard(self, pid: int) -> None:
        """A member is gone; the root stays (it may be mid-exec: numactl -> python)."""
        if pid != self.root_pid:
            self.pids.discard(pid)

    def name(self, pid: int) -> str:
        return self.seen[pid].name if pid in self.seen else "?"

    def totals(self, key: tuple[int, int], name: str) -> ThreadTotals:
        """Thread ``key``'s totals over the timed part, made on first sight."""
        totals = self.thread_totals.get(key)
        if totals is None:
            totals = self.thread_totals[key] = ThreadTotals(key[0], key[1], self.name(key[0]), name)
        return totals

    def descendants(self) -> set[int]:
        """The tree from a scan of every process's ppid (about 5 ms with 150
        processes on the host). A mark asks for one from the log reader's
        thread (the timed sample) and one from the sampler's (the tree
        refresh) within moments: the second reuses the first's."""
        now = time.monotonic()
        with self._scan_lock:
            # reused only for the same mark: a mark right after the start must see the children since
            marked = self.phase_marks[-1][0] if self.phase_marks else math.inf
            if now - self._scanned_at > RESCAN_S or self._scanned_at < marked:
                self._scanned = descendants(self.root_pid, parent_map())
                self._scanned_at = time.monotonic()
            return set(self._scanned)

    def refresh(self) -> None:
        """Find new descendants, and read every member's binding and state."""
        self.pids |= self.descendants()
        for pid in list(self.pids):
            status = read_status(pid)
            if status is None or status.get("State", "").startswith("Z"):
                self.pids.discard(pid)
                continue
            cpus, mems = self._binding(pid, status.get("Cpus_allowed_list", ""), status.get("Mems_allowed_list", ""))
            self.seen[pid] = ProcessSeen(pid, status.get("Name", "?"), cpus, mems)
        self.pids.add(self.root_pid)  # it may be mid-exec (numactl -> python)
        if self.phase == "steady" and not self.threads_seen:
            self._read_thread_bindings()

    def _read_thread_bindings(self) -> None:
        """Once, in steady state: every thread's own affinity (engines bind OpenMP
        threads one by one, so a process's mask says nothing about its threads)."""
        for pid in self.pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                status = read_status(f"{pid}/task/{tid}")
                if status:
                    cpus, mems = self._binding(
                        pid, status.get("Cpus_allowed_list", ""), status.get("Mems_allowed_list", "")
                    )
                    self.threads_seen[(pid, int(tid))] = ProcessSeen(int(tid), status.get("Name", "?"), cpus, mems)

    def _binding(self, pid: int, cpus: str, mems: str) -> tuple[list[int], list[int]]:
        key = (pid, cpus, mems)  # parse each distinct list once
        if key not in self._bindings:
            self._bindings[key] = (parse_cpulist(cpus), parse_cpulist(mems))
        return self._bindings[key]


@dataclass(frozen=True)
class Moment:
    """The tree at one sample of the timed part, as each source is handed it:
    every thread's scheduler counters (with its switches and migrations at
    the marks only: a third file per thread each second would cost a
    70-thread tree as much again)."""

    t: float  # monotonic seconds
    phase: str
    at_mark: bool  # taken at the loaded or steady mark
    first: bool  # the timed part's first sample: counters since it are what count
    pids: frozenset[int]
    threads: dict[tuple[int, int], ThreadSched]
    tree: Tree


@dataclass(frozen=True)
class RunView:
    """What a source's findings may depend on beyond its own samples."""

    slot: Slot
    method: str  # how the binding was applied: numactl, sched_setaffinity or none
    row: Mapping  # the row so far: its status and the engine's own figures
    figures: bool  # the engine's figures are in the row: the run's memory goes beside them
    placed: bool  # its placement was applied (not simulated): binding and neighbours are checked


@dataclass
class Found:
    """What one source makes of its samples for the row: columns, warnings
    (rule, message), and why the run's numbers cannot stand (an ``ok`` row
    becomes ``invalid`` with it as its error)."""

    columns: dict = field(default_factory=dict)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    invalid: str | None = None


class Source:
    """One thing sampled from the tree. Every hook is optional: a source
    overrides those it needs, and declares its columns in omni.store.columns."""

    def tick(self, tree: Tree, now: float) -> None:
        """Each tick, on the sampler's thread, after the tree refresh: read what is due."""

    def mark(self, tree: Tree, phase: str) -> None:
        """The engine entered ``phase`` (on the log reader's thread: set what is due, read nothing)."""

    def timed(self, moment: Moment) -> None:
        """One sample of the timed part (at the marks, on the log reader's thread)."""

    def stop(self) -> None:
        """Sampling is over (on the sampler's thread): let go of what is kept open."""

    def found(self, tree: Tree, run: RunView) -> Found:
        """The row's columns and rules from what was sampled."""
        return Found()


S = TypeVar("S", bound=Source)


class TreeSampler:
    """Background thread sampling a process tree until :meth:`stop`.

    Each tick (``interval``, 0.05 s = 20 Hz) every source reads what is due.
    The tree refresh (which also reads each process's binding from status)
    comes at most every ``tree_period_s``, paced by what it costs to stay
    under ``budget`` of one core, and right after each phase mark, so what a
    mark asks of the sources sees the whole tree.
    """

    def __init__(
        self,
        root_pid: int,
        sources: tuple[Source, ...] = (),
        interval: float = INTERVAL_S,
        tree_period_s: float = TREE_PERIOD_S,
        budget: float = BUDGET,
    ) -> None:
        self.root_pid, self.sources, self.interval = root_pid, tuple(sources), interval
        self.tree = Tree(root_pid)
        self.error: str | None = None
        self.loop_cpu_s: float | None = None
        self.mark_cpu_s = 0.0  # timed samples taken on the log reader's thread, at marks
        self.timed_cpu_s = 0.0  # every timed sample, at marks and between
        self.timed_at: list[float] = []  # when each timed sample was taken
        self._stopping = False
        self._tree_pace = Pace(tree_period_s, budget)
        self._timed_on = False
        self._next_timed = 0.0
        self._timed_lock = threading.Lock()
        self._thread_files = ThreadSchedReader()
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{root_pid}", daemon=True)

    @property
    def phase_marks(self) -> list[tuple[float, str]]:
        return self.tree.phase_marks

    def source(self, kind: type[S]) -> S:
        """This sampler's source of that class."""
        return next(s for s in self.sources if isinstance(s, kind))

    def start(self) -> TreeSampler:
        self._started_at = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._thread.join()
        self._stopped_at = time.monotonic()
        with self._timed_lock:  # a mark may still come from the log reader: it samples no more
            self._thread_files.close()

    def cost(self) -> tuple[float | None, float | None]:
        """(CPU seconds, share of one core) the sampler spent on this tree:
        its thread's CPU and the timed samples taken at marks on the log
        reader's thread, over the time it sampled. None before stop."""
        if self.loop_cpu_s is None:
            return None, None
        cpu = self.loop_cpu_s + self.mark_cpu_s
        span = self._stopped_at - self._started_at
        return cpu, cpu / span if span > 0 else None

    def mark(self, phase: str) -> None:
        """Record that the engine entered ``phase`` (called by the log reader)."""
        self.tree.mark(phase, time.monotonic())
        self._tree_pace.due = True
        for source in self.sources:
            source.mark(self.tree, phase)
        # here, on the log reader's thread, not at the sampler's next tick: the
        # marks bound the timed part, and a fast run has both within one tick
        if phase == TIMED_FROM or (self._timed_on and phase == TIMED_TO):
            self._timed_on = phase == TIMED_FROM
            try:
                self.mark_cpu_s += self._self_timed_sample(at_mark=True)
            except Exception as err:  # noqa: BLE001 - the log reader must go on draining the engine's pipe
                self._timed_on = False
                self.error = self.error or f"sampler failed: {type(err).__name__}: {err}"
            self._next_timed = time.monotonic() + TIMED_PERIOD_S

    def phase_names(self) -> list[str]:
        return [phase for _, phase in self.tree.phase_marks]

    def tree_pids(self) -> set[int]:
        return set(self.tree.pids)

    def found(self, run: RunView) -> list[Found]:
        """What the sampler and each source found, in order; the sampler's own first."""
        own = Found()
        if run.figures:
            cpu_s, share = self.cost()
            own.columns["sampler_cpu_ms"] = None if cpu_s is None else cpu_s * 1000
            own.columns["sampler_cpu_pct"] = None if share is None else share * 100
        if run.placed:
            cpus = set(run.slot.cpus) | set(run.slot.siblings)
            window = self.timed_at[-1] - self.timed_at[0] if len(self.timed_at) >= 2 and cpus else None
            window = window if window and window > 0 else None
            table = thread_table(list(self.tree.thread_totals.values())) if window else []
            own.columns.update(
                interference_cpu_ms=self.timed_cpu_s * 1000, telemetry_window_s=window, thread_sched=table or None
            )
            own.invalid = self.error
        return [own, *(source.found(self.tree, run) for source in self.sources)]

    def _loop(self) -> None:
        try:
            self._sample_until_stopped()
        except Exception as err:  # noqa: BLE001 - surfaced in the row, never lost
            self.error = f"sampler failed: {type(err).__name__}: {err}"
        finally:
            for source in self.sources:
                source.stop()
            self.loop_cpu_s = time.thread_time()  # the sampler thread's CPU, all of it

    def _sample_until_stopped(self) -> None:
        next_t = time.monotonic()
        while not self._stopping:
            now = time.monotonic()
            if self._tree_pace.ready(now):
                self._tree_pace.run(now, self.tree.refresh)
            for source in self.sources:
                source.tick(self.tree, now)
            if self._timed_on and now >= self._next_timed:
                cost = self._self_timed_sample(at_mark=False)
                self._next_timed = now + max(TIMED_PERIOD_S, cost / TIMED_BUDGET)
            next_t += self.interval
            # plain sleep: an Event.wait wake-up costs half as much again on a VM
            time.sleep(max(0.0, next_t - time.monotonic()))

    def _self_timed_sample(self, at_mark: bool) -> float:
        with self._timed_lock:
            if self._stopping:
                return 0.0
            cost = timed(lambda: self._timed_sample(at_mark))
            self.timed_cpu_s += cost
            return cost

    def _timed_sample(self, at_mark: bool) -> None:
        """Hand every source one :class:`Moment`. A thread first seen after
        the first sample is new, so all of its counters count; one that ended
        since is lost (its page faults are not: a process's count holds its
        exited threads')."""
        pids = set(self.tree.pids)
        if at_mark:  # children the paced tree refresh has not found yet
            pids |= self.tree.descendants()
        threads = self._thread_files.read(pids, switches=at_mark)
        moment = Moment(
            time.monotonic(), self.tree.phase, at_mark, not self.timed_at, frozenset(pids), threads, self.tree
        )
        for source in self.sources:
            source.timed(moment)
        self.timed_at.append(moment.t)
