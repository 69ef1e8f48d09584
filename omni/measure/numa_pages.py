"""Where the tree's memory sits: each process's ``/proc/PID/numa_maps``, the
memory policy it actually has and the node every resident page sits on
(:mod:`omni.measure.mempolicy`), and once each thread's own policy.

Reading numa_maps walks the page tables (about the cost of Pss), so it is
paced by what it costs, and read right after the first phase mark and
right after ``steady``, the read a row trusts for memory per node. Never
from numactl before its exec (the root of a pinned run until the engine
starts: its policy is not set yet; a mark that lands then is read at the
next tick), nor from a task that is exiting (``PF_EXITING``: its memory is
being torn down).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omni.measure.mempolicy import NumaMaps
from omni.measure.procfs import read_numa_maps, read_task, read_thread_policy
from omni.measure.sampler import BUDGET, TREE_PERIOD_S, Found, Pace, RunView, Source, Tree

NUMA_PHASES = ("steady",)  # phase marks that trigger a numa_maps read (plus the first mark)
# what runs before the engine in a pinned run's root: its memory policy is
# not the engine's until it has called set_mempolicy and exec'd
LAUNCHERS = frozenset({"numactl"})


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


class NumaSource(Source):
    """numa_maps of every process at most every ``period_s`` and within
    ``budget`` of one core, once the engine speaks (its first phase mark)."""

    def __init__(self, period_s: float = TREE_PERIOD_S, budget: float = BUDGET) -> None:
        self.numa_seen: dict[int, NumaSeen] = {}
        self.reads = 0
        self.cpu_s = 0.0
        # numa_maps only once the engine speaks (its first phase mark): before
        # that the root may still be numactl, whose policy is not set yet.
        self._pace = Pace(period_s, budget, due=False, live=False)
        self._thread_policies_read = False

    def mark(self, tree: Tree, phase: str) -> None:
        self._pace.live = True
        # numa_maps at the first mark and in steady state only: after "loaded"
        # comes the engine's warm-up and timed work, which a 60 ms read of a
        # vLLM tree on a shared core would disturb; paced reads go on between
        if phase in NUMA_PHASES or len(tree.phase_marks) == 1:
            self._pace.due = True

    def tick(self, tree: Tree, now: float) -> None:
        # first of the sources, right after the tree: the read a mark asks for
        # (``steady``) must land inside the engine's hold, which on a slow host is a few ticks long
        if self._pace.ready(now):
            self.cpu_s += self._pace.run(now, lambda: self._sample(tree))
            self.reads += 1

    def not_steady(self, tree: Tree) -> list[NumaSeen] | None:
        """Processes of the tree at the steady mark whose numa_maps got no read
        in steady state (their per-node memory is from an earlier read, maybe
        before they touched it); None when the engine never got to steady."""
        if tree.steady_pids is None:
            return None
        return [seen for pid, seen in sorted(self.numa_seen.items()) if pid in tree.steady_pids and seen.steady is None]

    def found(self, tree: Tree, run: RunView) -> Found:
        if not run.placed:
            return Found()
        return Found({"numa_maps_reads": self.reads, "numa_maps_cpu_ms": self.cpu_s * 1000})

    def _sample(self, tree: Tree) -> None:
        self._sample_numa(tree)
        if tree.threads_seen and not self._thread_policies_read:
            self._thread_policies_read = True
            self._read_thread_policies(tree)

    def _read_thread_policies(self, tree: Tree) -> None:
        """Once, after the threads' affinities: each thread's own memory policy
        (``set_mempolicy`` is per thread). Not in the tree refresh: a few KiB of
        numa_maps per thread still walks the first mappings' page tables, and
        on a 70-thread vLLM tree that delayed the steady-state RSS samples."""
        engine: dict[int, bool] = {}  # each process's stat read once, not once per thread
        for (pid, tid), thread in tree.threads_seen.items():
            if tid == pid:  # the leader's policy is the process's, read whole by _sample_numa
                continue
            if pid not in engine:
                task = read_task(pid)
                engine[pid] = task is not None and not task.exiting and task.comm not in LAUNCHERS
            if engine[pid]:
                thread.policy = read_thread_policy(pid, str(tid))

    def _sample_numa(self, tree: Tree) -> None:
        for pid in list(tree.pids):
            task = read_task(pid)
            if task is None or task.exiting:  # gone, or its memory is being torn down: not where it ran
                continue
            if task.comm in LAUNCHERS:  # numactl before its exec: the engine's policy is not set yet
                if pid == tree.root_pid:
                    self._pace.due = True  # the read this mark asked for: at the next tick, from the engine
                continue
            maps = read_numa_maps(pid)
            if maps is None or not maps.mappings:  # gone, or a zombie with no mm
                continue
            seen = self.numa_seen.get(pid)
            name = tree.name(pid)
            if seen is None:
                seen = self.numa_seen[pid] = NumaSeen(pid, name, maps)
            seen.name, seen.latest = name, maps
            seen.policies.update(maps.policies)
            seen.task_policies.add(maps.task_policy)
            if tree.phase == "steady":
                seen.steady = maps
