"""Memory of a whole process tree, sampled from outside.

Engines never report their own memory: a vLLM run is three processes (main,
EngineCore, Worker) and what matters is their sum. Each tick (20 Hz) reads
``/proc/PID/statm`` of every process in the tree: RssAnon, through a kept
descriptor, one syscall each. Less often, paced so each stays under a small
CPU budget: ``/proc/PID/status`` for the CPUs each process may use (and its
cpuset's memory nodes), ``/proc/PID/smaps_rollup`` for Pss_Anon, which walks
the page tables (costly) but counts pages shared between processes once, and
``/proc/PID/numa_maps`` for the memory policy each process actually has and
the node every resident page sits on (also a page-table walk; see
:mod:`omni.measure.mempolicy`).

This kernel has no ``/proc/PID/task/TID/children`` (CONFIG_PROC_CHILDREN is
off on many distro kernels), so the tree is found from the ppid field of
``/proc/*/stat``, which costs one read per process on the host: done every
couple of seconds and at each phase mark, not every tick. A pid once seen
stays in the tree while it lives, so a child that daemonizes (setsid,
reparented to init) is still counted.

From the ``loaded`` mark to the ``steady`` mark (the timed part: warm-up and
timed generations) it also samples interference, about once a second and at
both marks: ``/proc/stat``'s busy time of every CPU, and each thread's
``schedstat`` (CPU time, time waiting on a run queue) and last CPU. What the
slot's CPUs were busy with beyond the tree's own threads is a neighbour's
(:func:`summarize_interference`).

At the two marks it also reads each thread's switches and migrations
(``sched``) and each process's page faults, and every sample the slot
CPUs' steal, irq, frequency and the RAPL packages' energy: the window's
telemetry (:func:`summarize_telemetry`). Each run's whole sampler cost is
in its row (:meth:`TreeSampler.cost`). Measured over the timed part of a
20 s run (benchmarks/sampler_overhead.py, docs/measurements.md): about
0.44 % of one core for a 3-process tree and 0.48 % with 64 threads more, of
which the 20 Hz loop's wake-ups alone are about 0.2 % on a VM.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from dataclasses import dataclass, field

from omni.cpulist import format_cpulist, parse_cpulist
from omni.measure.mempolicy import NumaMaps
from omni.measure.procfs import (
    CLK_TCK,
    KIB_PER_MIB,
    StatmReader,
    ThreadSched,
    ThreadSchedReader,
    busy_idle,
    cpu_stat,
    descendants,
    parent_map,
    rapl_packages,
    read_cur_freq_khz,
    read_energy_uj,
    read_faults,
    read_numa_maps,
    read_pss_anon_kib,
    read_status,
    read_thread_policy,
)

NUMA_PHASES = ("steady",)  # phase marks that trigger a numa_maps read (plus the first mark)
PSS_PHASES = ("loaded", "steady")  # phase marks that trigger a Pss read: after-load and steady
# Interference is sampled from the first of these marks to the last: the timed part.
INTERFERENCE_FROM, INTERFERENCE_TO = "loaded", "steady"
# About once a second: a neighbour's duty cycle is tens to hundreds of ms, so a
# second holds several of its periods, and /proc/stat's 10 ms ticks give a
# one-CPU share to about 1 %. Slower when a read of a many-threaded tree costs
# more than the budget (of one core).
INTERFERENCE_PERIOD_S = 1.0
INTERFERENCE_BUDGET = 0.0006
# A scan of every process's ppid younger than this is reused (see TreeSampler._descendants).
RESCAN_S = 0.25


@dataclass
class ProcessSeen:
    """What one process of the tree looked like the last time we read it."""

    pid: int
    name: str
    cpus_allowed: list[int]
    mems_allowed: list[int]  # the cpuset's nodes, not the memory policy
    policy: str | None = None  # a thread's own memory policy (threads_seen only)


@dataclass
class NumaSeen:
    """One process's memory placement: its latest ``numa_maps`` read, the
    latest one taken in steady state, every policy it ever showed on any
    mapping, and every policy it had itself (its task policy)."""

    pid: int
    name: str
    latest: NumaMaps
    steady: NumaMaps | None = None
    policies: set[str] = field(default_factory=set)
    task_policies: set[str] = field(default_factory=set)

    @property
    def settled(self) -> NumaMaps:
        """Steady-state placement when the engine got there, else the last seen."""
        return self.steady or self.latest


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
class InterferenceSample:
    """Cumulative counters at one moment of the timed part: every CPU's busy
    seconds (``/proc/stat``), the tree's CPU seconds by the CPU each thread
    last ran on, and the tree's run-queue wait, both since the first sample."""

    t: float
    phase: str
    busy_s: dict[int, float]
    tree_s_by_cpu: dict[int, float]
    run_delay_s: float
    # cumulative too: every CPU's steal and irq + softirq seconds, the tree's
    # context switches, migrations (None: no sched file) and page faults, and
    # each RAPL package's energy counter (uJ, wrapping); the sampled CPUs'
    # frequency at this moment (kHz)
    steal_s: dict[int, float] = field(default_factory=dict)
    irq_s: dict[int, float] = field(default_factory=dict)
    nvcsw: int | None = None  # switches, migrations and faults: read at the marks only (None between)
    nivcsw: int | None = None
    migrations: int | None = None
    minflt: int | None = None
    majflt: int | None = None
    energy_uj: dict[str, int] = field(default_factory=dict)
    freq_khz: dict[int, int] = field(default_factory=dict)


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


@dataclass
class TreeSampler:
    """Background thread sampling a process tree until :meth:`stop`.

    RssAnon is read from statm every ``interval`` (0.05 s = 20 Hz). The
    costlier reads are paced by what they cost, each kept under ``budget`` of
    one core: the tree refresh (which also reads each process's binding from
    status) at most every ``tree_period_s``, Pss_Anon (a 128 MiB process
    costs about 1.5 ms a read, a multi-GB vLLM worker tens of ms) and
    numa_maps (policy and pages per node, about the cost of Pss). The tree
    refresh also happens right after each phase mark and Pss right after
    ``loaded`` and ``steady``, so after-load and steady always see the whole
    tree; numa_maps right after the first mark and ``steady`` only (see
    :meth:`mark`).
    """

    root_pid: int
    interval: float = 0.05
    tree_period_s: float = 2.0
    budget: float = 0.0002  # of one core, for each of the tree refresh, Pss and numa_maps
    samples: list[Sample] = field(default_factory=list)
    pss_samples: list[PssSample] = field(default_factory=list)
    seen: dict[int, ProcessSeen] = field(default_factory=dict)
    threads_seen: dict[tuple[int, int], ProcessSeen] = field(default_factory=dict)
    numa_seen: dict[int, NumaSeen] = field(default_factory=dict)
    numa_reads: int = 0
    numa_cpu_s: float = 0.0
    phase_marks: list[tuple[float, str]] = field(default_factory=list)
    interference: list[InterferenceSample] = field(default_factory=list)
    interference_cpu_s: float = 0.0
    cpus: tuple[int, ...] = ()  # the slot's CPUs: their frequency is sampled with interference
    threads: dict[tuple[int, int], ThreadTotals] = field(default_factory=dict)  # over the timed part

    def __post_init__(self) -> None:
        self._stopping = False
        self._pids: set[int] = {self.root_pid}
        self._phase = "start"
        self._pss_due = self._tree_due = True
        # numa_maps only once the engine speaks (its first phase mark): before
        # that the root may still be numactl, whose policy is not set yet.
        self._numa_due = False
        self._numa_live = False
        self._thread_policies_read = False
        self.steady_pids: set[int] | None = None  # the tree when the engine said steady
        self._next_tree = self._next_pss = self._next_numa = 0.0
        self._bindings: dict[tuple[int, str, str], tuple[list[int], list[int]]] = {}
        self._statm = StatmReader()
        self.error: str | None = None
        self._interference_on = False
        self._next_interference = 0.0
        self._interference_lock = threading.Lock()
        self._sched: dict[tuple[int, int], ThreadSched] = {}
        self._thread_files = ThreadSchedReader()
        self._tree_s_by_cpu: dict[int, float] = {}
        self._run_delay_s = 0.0
        self._switches = [0, 0, 0]  # voluntary, involuntary, migrations: the tree's, since the first mark
        self._switch_seen: dict[tuple[int, int], ThreadSched] = {}
        self._has_migrations = True
        self._faults: dict[int, tuple[int, int]] = {}
        self._fault_totals = [0, 0]
        self._rapl = rapl_packages()
        self._scan_lock = threading.Lock()
        self._scanned: set[int] = set()
        self._scanned_at = -math.inf
        self.loop_cpu_s: float | None = None
        self.mark_cpu_s = 0.0  # interference samples taken on the log reader's thread, at marks
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.root_pid}", daemon=True)

    def start(self) -> TreeSampler:
        self._started_at = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._thread.join()
        self._stopped_at = time.monotonic()
        with self._interference_lock:  # a mark may still come from the log reader: it samples no more
            self._thread_files.close()

    def cost(self) -> tuple[float | None, float | None]:
        """(CPU seconds, share of one core) the sampler spent on this tree:
        its thread's CPU and the interference samples taken at marks on the
        log reader's thread, over the time it sampled. None before stop."""
        if self.loop_cpu_s is None:
            return None, None
        cpu = self.loop_cpu_s + self.mark_cpu_s
        span = self._stopped_at - self._started_at
        return cpu, cpu / span if span > 0 else None

    def mark(self, phase: str) -> None:
        """Record that the engine entered ``phase`` (called by the log reader)."""
        self.phase_marks.append((time.monotonic(), phase))
        if phase == "steady" and self.steady_pids is None:
            self.steady_pids = set(self._pids)
        self._phase = phase
        self._tree_due = self._numa_live = True
        # Pss (a page-table walk: 15 ms a read of a tiny-model vLLM tree) right
        # after the marks whose values a row reports (after-load, steady) only
        self._pss_due = self._pss_due or phase in PSS_PHASES
        # numa_maps at the first mark and in steady state only: after "loaded"
        # comes the engine's warm-up and timed work, which a 60 ms read of a
        # vLLM tree on a shared core would disturb; paced reads go on between
        self._numa_due = self._numa_due or phase in NUMA_PHASES or len(self.phase_marks) == 1
        # here, on the log reader's thread, not at the sampler's next tick: the
        # marks bound the timed part, and a fast run has both within one tick
        if phase == INTERFERENCE_FROM or (self._interference_on and phase == INTERFERENCE_TO):
            self._interference_on = phase == INTERFERENCE_FROM
            try:
                self.mark_cpu_s += self._self_timed_interference(refresh=True)
            except Exception as err:  # noqa: BLE001 - the log reader must go on draining the engine's pipe
                self._interference_on = False
                self.error = self.error or f"sampler failed: {type(err).__name__}: {err}"
            self._next_interference = time.monotonic() + INTERFERENCE_PERIOD_S

    def rapl_wraps(self) -> dict[str, int]:
        """Where each RAPL package's energy counter wraps (uJ)."""
        return {d.name: d.max_uj for d in self._rapl}

    def numa_not_steady(self) -> list[NumaSeen] | None:
        """Processes of the tree at the steady mark whose numa_maps got no read
        in steady state (their per-node memory is from an earlier read, maybe
        before they touched it); None when the engine never got to steady."""
        if self.steady_pids is None:
            return None
        return [seen for pid, seen in sorted(self.numa_seen.items()) if pid in self.steady_pids and seen.steady is None]

    def phase_names(self) -> list[str]:
        return [phase for _, phase in self.phase_marks]

    def tree_pids(self) -> set[int]:
        return set(self._pids)

    def _loop(self) -> None:
        try:
            self._sample_until_stopped()
        except Exception as err:  # noqa: BLE001 - surfaced in the row, never lost
            self.error = f"sampler failed: {type(err).__name__}: {err}"
        finally:
            self._statm.close()
            self.loop_cpu_s = time.thread_time()  # the sampler thread's CPU, all of it

    def _sample_until_stopped(self) -> None:
        next_t = time.monotonic()
        while not self._stopping:
            now = time.monotonic()
            if self._tree_due or now >= self._next_tree:
                self._tree_due = False
                cost = self._timed(self._refresh_tree)
                self._next_tree = now + max(self.tree_period_s, cost / self.budget)
            # right after the tree: the read a mark asks for (``steady``) must land
            # inside the engine's hold, which on a slow host is a few ticks long
            if self._numa_due or (self._numa_live and now >= self._next_numa):
                self._numa_due = False
                cost = self._timed(self._sample_numa_and_threads)
                self.numa_reads += 1
                self.numa_cpu_s += cost
                self._next_numa = now + max(self.tree_period_s, cost / self.budget)
            self._sample_rss()
            if self._pss_due or now >= self._next_pss:
                self._pss_due = False
                cost = self._timed(self._sample_pss)
                self._next_pss = now + max(self.interval, cost / self.budget)
            if self._interference_on and now >= self._next_interference:
                cost = self._self_timed_interference(refresh=False)
                self._next_interference = now + max(INTERFERENCE_PERIOD_S, cost / INTERFERENCE_BUDGET)
            next_t += self.interval
            # plain sleep: an Event.wait wake-up costs half as much again on a VM
            time.sleep(max(0.0, next_t - time.monotonic()))

    @staticmethod
    def _timed(work) -> float:
        start = time.thread_time()
        work()
        return time.thread_time() - start

    def _self_timed_interference(self, refresh: bool) -> float:
        with self._interference_lock:
            if self._stopping:
                return 0.0
            cost = self._timed(lambda: self._sample_interference(refresh))
            self.interference_cpu_s += cost
            return cost

    def _sample_interference(self, refresh: bool) -> None:
        """Add one :class:`InterferenceSample`. Each thread's CPU time since the
        last sample goes to the CPU it last ran on (exact when engines bind one
        OpenMP thread per CPU). A thread first seen after the first sample is
        new, so all of its counters count; one that ended since is lost (its
        page faults are not: a process's count holds its exited threads')."""
        pids = set(self._pids)
        if refresh:  # at a mark: children the paced tree refresh has not found yet
            pids |= self._descendants()
        first = not self.interference
        # switches, migrations and faults at the marks only: the window's
        # counts need its two ends, and a third file per thread each second
        # would cost a 70-thread tree as much again
        at_mark = refresh
        for key, now in self._thread_files.read(pids, switches=at_mark).items():
            before = self._sched.get(key)
            self._sched[key] = now
            if at_mark:
                self._add_switches(key, now, first)
            if first:
                continue
            if before and now.exec_ns < before.exec_ns:  # a reused tid: another thread
                before = None
            self._add_thread(key, before, now)
        if at_mark:
            self._add_faults(pids, first)
        stat = cpu_stat()
        busy = {cpu: busy_idle(c)[0] / CLK_TCK for cpu, c in stat.items()}
        self.interference.append(
            InterferenceSample(
                time.monotonic(),
                self._phase,
                busy,
                dict(self._tree_s_by_cpu),
                self._run_delay_s,
                steal_s={cpu: c["steal"] / CLK_TCK for cpu, c in stat.items()},
                irq_s={cpu: (c["irq"] + c["softirq"]) / CLK_TCK for cpu, c in stat.items()},
                nvcsw=self._switches[0] if at_mark else None,
                nivcsw=self._switches[1] if at_mark else None,
                migrations=self._switches[2] if at_mark and self._has_migrations else None,
                minflt=self._fault_totals[0] if at_mark else None,
                majflt=self._fault_totals[1] if at_mark else None,
                energy_uj=read_energy_uj(self._rapl),
                freq_khz=read_cur_freq_khz(self.cpus),
            )
        )

    def _totals(self, key: tuple[int, int], name: str) -> ThreadTotals:
        totals = self.threads.get(key)
        if totals is None:
            pid = key[0]
            process = self.seen[pid].name if pid in self.seen else "?"
            totals = self.threads[key] = ThreadTotals(pid, key[1], process, name)
        return totals

    def _add_thread(self, key: tuple[int, int], before: ThreadSched | None, now: ThreadSched) -> None:
        """One thread's CPU time and wait since the last sample, to the tree's and its own totals."""
        exec_s = (now.exec_ns - (before.exec_ns if before else 0)) / 1e9
        delay_s = (now.run_delay_ns - (before.run_delay_ns if before else 0)) / 1e9
        self._tree_s_by_cpu[now.cpu] = self._tree_s_by_cpu.get(now.cpu, 0.0) + exec_s
        self._run_delay_s += delay_s
        totals = self._totals(key, now.name)
        totals.cpu_s += exec_s
        totals.run_delay_s += delay_s
        if exec_s > 0:
            totals.cpus.add(now.cpu)

    def _add_switches(self, key: tuple[int, int], now: ThreadSched, first: bool) -> None:
        """At a mark: one thread's switches and migrations since the last mark
        (all of them for a thread born since), to the tree's and its own totals."""
        before = self._switch_seen.get(key)
        self._switch_seen[key] = now
        if first:
            return
        if before and now.nvcsw + now.nivcsw < before.nvcsw + before.nivcsw:  # a reused tid
            before = None
        nvcsw = now.nvcsw - (before.nvcsw if before else 0)
        nivcsw = now.nivcsw - (before.nivcsw if before else 0)
        self._switches[0] += nvcsw
        self._switches[1] += nivcsw
        migrations = None
        if now.migrations is None:
            self._has_migrations = False
        else:
            migrations = now.migrations - ((before.migrations or 0) if before else 0)
            self._switches[2] += migrations
        totals = self._totals(key, now.name)
        totals.nvcsw += nvcsw
        totals.nivcsw += nivcsw
        totals.migrations = None if migrations is None else (totals.migrations or 0) + migrations

    def _add_faults(self, pids: set[int], first: bool) -> None:
        for pid in pids:
            now = read_faults(pid)
            if now is None:
                continue
            before = self._faults.get(pid)
            self._faults[pid] = now
            if first:
                continue
            before = before or (0, 0)
            self._fault_totals[0] += max(0, now[0] - before[0])
            self._fault_totals[1] += max(0, now[1] - before[1])

    def _descendants(self) -> set[int]:
        """The tree from a scan of every process's ppid (about 5 ms with 150
        processes on the host). A mark asks for one from the log reader's
        thread (interference) and one from the sampler's (the tree refresh)
        within moments: the second reuses the first's."""
        now = time.monotonic()
        with self._scan_lock:
            # reused only for the same mark: a mark right after the start must see the children since
            marked = self.phase_marks[-1][0] if self.phase_marks else math.inf
            if now - self._scanned_at > RESCAN_S or self._scanned_at < marked:
                self._scanned = descendants(self.root_pid, parent_map())
                self._scanned_at = time.monotonic()
            return set(self._scanned)

    def _refresh_tree(self) -> None:
        """Find new descendants, and read every member's binding and state."""
        self._pids |= self._descendants()
        for pid in list(self._pids):
            status = read_status(pid)
            if status is None or status.get("State", "").startswith("Z"):
                self._pids.discard(pid)
                self._statm.forget(pid)
                continue
            cpus, mems = self._binding(pid, status.get("Cpus_allowed_list", ""), status.get("Mems_allowed_list", ""))
            self.seen[pid] = ProcessSeen(pid, status.get("Name", "?"), cpus, mems)
        self._pids.add(self.root_pid)  # it may be mid-exec (numactl -> python)
        if self._phase == "steady" and not self.threads_seen:
            self._read_thread_bindings()

    def _read_thread_bindings(self) -> None:
        """Once, in steady state: every thread's own affinity (engines bind OpenMP
        threads one by one, so a process's mask says nothing about its threads)."""
        for pid in self._pids:
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

    def _sample_rss(self) -> None:
        total, alive = 0, 0
        for pid in list(self._pids):
            value = self._statm.read(pid)
            if value is None:
                self._pids.discard(pid)
            elif value or pid == self.root_pid:  # a zombie's statm is all zeros
                total += value
                alive += 1
        self._pids.add(self.root_pid)
        if alive:
            self.samples.append(Sample(time.monotonic(), self._phase, total, alive))

    def _sample_numa_and_threads(self) -> None:
        self._sample_numa()
        if self.threads_seen and not self._thread_policies_read:
            self._thread_policies_read = True
            self._read_thread_policies()

    def _read_thread_policies(self) -> None:
        """Once, after the threads' affinities: each thread's own memory policy
        (``set_mempolicy`` is per thread). Not in the tree refresh: a few KiB of
        numa_maps per thread still walks the first mappings' page tables, and
        on a 70-thread vLLM tree that delayed the steady-state RSS samples."""
        for (pid, tid), thread in self.threads_seen.items():
            if tid != pid:  # the leader's policy is the process's, read whole by _sample_numa
                thread.policy = read_thread_policy(pid, str(tid))

    def _sample_numa(self) -> None:
        for pid in list(self._pids):
            maps = read_numa_maps(pid)
            if maps is None or not maps.mappings:  # gone, or a zombie with no mm
                continue
            seen = self.numa_seen.get(pid)
            name = self.seen[pid].name if pid in self.seen else "?"
            if seen is None:
                seen = self.numa_seen[pid] = NumaSeen(pid, name, maps)
            seen.name, seen.latest = name, maps
            seen.policies.update(maps.policies)
            seen.task_policies.add(maps.task_policy)
            if self._phase == "steady":
                seen.steady = maps

    def _sample_pss(self) -> None:
        values = [read_pss_anon_kib(pid) for pid in list(self._pids)]
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


# Windows shorter than this are merged into the next: at /proc/stat's 10 ms
# ticks, a 0.1 s window between a paced sample and a mark would read a
# one-tick blip as 10 % of a CPU.
MIN_WINDOW_S = 0.5


@dataclass(frozen=True)
class Interference:
    """CPU time on a slot's CPUs that the run's own tree did not use, and the
    time its threads waited for a CPU, over the timed part."""

    peak_pct: float | None  # busiest CPU's foreign share in its worst window, % of one CPU
    peak_cpu: int | None
    mean_pct: float | None  # all foreign time over the timed part, % of the CPUs' capacity
    run_delay_ms: float | None
    run_delay_ms_per_s: float | None
    window_s: float | None
    samples: int


def _foreign(a: InterferenceSample, b: InterferenceSample, cpus: tuple[int, ...]) -> tuple[dict[int, float], float]:
    """Per CPU and in total, seconds the CPUs were busy with other than the tree
    between two samples. A thread that moved between CPUs inside the window is
    counted on its last one, so one CPU may look foreign-busy while another
    shows the tree's time unaccounted: no CPU's share exceeds the total."""
    busy = {c: b.busy_s.get(c, 0.0) - a.busy_s.get(c, 0.0) for c in cpus}
    tree = {c: b.tree_s_by_cpu.get(c, 0.0) - a.tree_s_by_cpu.get(c, 0.0) for c in cpus}
    total = max(0.0, sum(busy.values()) - sum(tree.values()))
    return {c: min(max(0.0, busy[c] - tree[c]), total) for c in cpus}, total


def summarize_interference(
    samples: list[InterferenceSample], cpus: tuple[int, ...], min_window_s: float = MIN_WINDOW_S
) -> Interference:
    """Foreign CPU share and run-queue wait over ``samples`` on ``cpus`` (the
    slot's CPUs and the idle SMT siblings it owns).

    The peak is per CPU and per window (consecutive samples, merged to at least
    ``min_window_s``): one CPU an OpenMP barrier waits on is what slows the
    run, and a neighbour on one of eight CPUs is 12 % of the slot but all of
    that CPU's thread's lateness. ``None`` figures: fewer than two samples;
    no peak when the whole window is shorter than ``min_window_s`` (a tick
    would weigh too much).
    """
    cpus = tuple(sorted(set(cpus)))
    if len(samples) < 2 or not cpus:
        return Interference(None, None, None, None, None, None, len(samples))
    peak, peak_cpu = 0.0, cpus[0]
    start = samples[0]
    for i, sample in enumerate(samples[1:], 1):
        span = sample.t - start.t
        if span < min_window_s and i < len(samples) - 1:
            continue
        if span > 0:
            per_cpu, _ = _foreign(start, sample, cpus)
            cpu = max(per_cpu, key=per_cpu.get)
            if 100 * per_cpu[cpu] / span > peak:
                peak, peak_cpu = min(100.0, 100 * per_cpu[cpu] / span), cpu
        start = sample
    first, last = samples[0], samples[-1]
    window = last.t - first.t
    if window <= 0:
        return Interference(None, None, None, None, None, None, len(samples))
    _, total = _foreign(first, last, cpus)
    delay_ms = (last.run_delay_s - first.run_delay_s) * 1000
    judged = window >= min_window_s
    return Interference(
        peak_pct=peak if judged else None,
        peak_cpu=peak_cpu if judged else None,
        mean_pct=min(100.0, 100 * total / (window * len(cpus))),
        run_delay_ms=delay_ms,
        run_delay_ms_per_s=delay_ms / window,
        window_s=window,
        samples=len(samples),
    )


# Threads listed one by one in a row's thread_sched, busiest first; the rest
# are summed into one entry. An 8-core vLLM tree has about 70 threads, most idle.
THREADS_LISTED = 12


@dataclass(frozen=True)
class Telemetry:
    """What else moved during the timed part, from the same samples as
    :class:`Interference`: the tree's switches, migrations and faults, the
    slot CPUs' steal, irq and frequency, the packages' energy, and per thread."""

    window_s: float | None
    nvcsw: int | None
    nivcsw: int | None
    migrations: int | None
    minflt: int | None
    majflt: int | None
    steal_pct: float | None  # of the slot CPUs' capacity over the window
    irq_pct: float | None
    freq_mhz: float | None  # mean over the slot CPUs and samples; None without cpufreq
    freq_min_mhz: float | None
    energy_j: float | None  # every RAPL package's, None where none is readable
    threads: list[dict]


def _energy_j(first: InterferenceSample, last: InterferenceSample, wraps: dict[str, int]) -> float | None:
    """Joules between two samples over the packages both read; a counter that
    went down wrapped once (at its max_energy_range_uj)."""
    names = set(first.energy_uj) & set(last.energy_uj)
    if not names:
        return None
    total = 0
    for name in names:
        delta = last.energy_uj[name] - first.energy_uj[name]
        total += delta if delta >= 0 else delta + wraps.get(name, 0)
    return total / 1e6


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


def summarize_telemetry(
    samples: list[InterferenceSample],
    cpus: tuple[int, ...],
    threads: list[ThreadTotals] = (),
    wraps: dict[str, int] | None = None,
) -> Telemetry:
    """:class:`Telemetry` over ``samples`` on ``cpus``; ``None`` figures with
    fewer than two samples or no time between them."""
    cpus = tuple(sorted(set(cpus)))
    if len(samples) < 2 or samples[-1].t <= samples[0].t or not cpus:
        return Telemetry(None, None, None, None, None, None, None, None, None, None, None, [])
    first, last = samples[0], samples[-1]
    window = last.t - first.t
    capacity = window * len(cpus)
    marked = [s for s in samples if s.nvcsw is not None]  # switches and faults: read at the marks
    a, b = (marked[0], marked[-1]) if len(marked) >= 2 else (None, None)

    def counted(attr: str) -> int | None:
        if a is None or getattr(a, attr) is None or getattr(b, attr) is None:
            return None
        return getattr(b, attr) - getattr(a, attr)

    def share(attr: str) -> float:
        a, b = getattr(first, attr), getattr(last, attr)
        return min(100.0, 100 * sum(b.get(c, 0.0) - a.get(c, 0.0) for c in cpus) / capacity)

    freqs = [f / 1000 for s in samples for c, f in s.freq_khz.items() if c in cpus]
    return Telemetry(
        window_s=window,
        nvcsw=counted("nvcsw"),
        nivcsw=counted("nivcsw"),
        migrations=counted("migrations"),
        minflt=counted("minflt"),
        majflt=counted("majflt"),
        steal_pct=share("steal_s"),
        irq_pct=share("irq_s"),
        freq_mhz=statistics.mean(freqs) if freqs else None,
        freq_min_mhz=min(freqs) if freqs else None,
        energy_j=_energy_j(first, last, wraps or {}),
        threads=thread_table(list(threads)),
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
        "sampler_cpu_ms": None if (cost := sampler.cost())[0] is None else cost[0] * 1000,
        "sampler_cpu_pct": None if cost[1] is None else cost[1] * 100,
    }
