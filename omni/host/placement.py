"""Where a run executes: the command that pins it, the check that its cores
are free, and the proof of the binding that actually took effect."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from omni.cpulist import format_cpulist
from omni.errors import OmniError
from omni.host.topology import Slot
from omni.measure.mempolicy import add_kib, describe_nodes, local_fraction, node_list, parse_policy
from omni.measure.procfs import cpu_times, read_threads_sched


def numactl_path() -> str | None:
    return shutil.which("numactl")


def pin_argv(slot: Slot, argv: list[str], numactl: str | None) -> tuple[list[str], str]:
    """Prefix ``argv`` so it runs confined to the slot; return it and the method.

    numactl binds memory too (``--membind``). Without it we fall back to
    ``sched_setaffinity`` through a tiny exec trampoline (CPUs only, memory
    unbound): the row records which one happened.
    """
    if numactl:
        return [
            numactl,
            f"--physcpubind={format_cpulist(slot.cpus)}",
            f"--membind={format_cpulist(slot.mems)}",
            "--",
            *argv,
        ], "numactl"
    trampoline = [sys.executable, "-m", "omni.host.pin", format_cpulist(slot.cpus), "--"]
    return [*trampoline, *argv], "sched_setaffinity"


# A neighbour's share of one slot CPU (or idle SMT sibling) during the timed
# part above which the run is warned ``interference``: the spec's default
# busy_threshold_pct, for the same reason (docs/placement.md, "Busy threshold").
INTERFERENCE_BOUND_PCT = 10.0


@dataclass(frozen=True)
class BusyReport:
    """Load on the slot's CPUs from processes that are not ours, in percent."""

    per_cpu: dict[int, float]
    culprits: tuple[str, ...]

    @property
    def max_pct(self) -> float:
        return max(self.per_cpu.values(), default=0.0)

    def busy_cpus(self, threshold: float) -> list[int]:
        return [cpu for cpu, pct in self.per_cpu.items() if pct > threshold]

    def describe(self, threshold: float) -> str:
        busy = self.busy_cpus(threshold)
        loads = ", ".join(f"cpu{c} {self.per_cpu[c]:.0f}%" for c in busy)
        who = f" (busiest: {', '.join(self.culprits)})" if self.culprits else ""
        return (
            f"slot CPUs (or their cores' idle SMT siblings) {format_cpulist(busy)} are busy: {loads}, threshold "
            f"{threshold:g}%{who}. Wait for them to be free, pick other cores "
            "(slots.cpus), or run anyway with --force (recorded in the row)."
        )


def _own_tree() -> list[psutil.Process]:
    me = psutil.Process()
    try:
        return [me, *me.children(recursive=True)]
    except psutil.Error:
        return [me]


def _thread_seconds(procs: list[psutil.Process]) -> dict[tuple[int, int], tuple[float, int]]:
    """Each thread of ``procs``: (CPU seconds so far, the CPU it last ran on).
    Per thread, not per process: a process's threads (Prefect's server, the
    flow's workers) run on different CPUs at once."""
    return {key: (sched.exec_ns / 1e9, sched.cpu) for key, sched in read_threads_sched(p.pid for p in procs).items()}


def level_off(busy: dict[int, float], own: float) -> dict[int, float]:
    """Per-CPU load left once ``own`` (percent of one CPU) is taken off ``busy``
    where it lowers the busiest CPU most (water-filling).

    Where our own threads ran inside the window is known only by the CPU each
    last ran on, and they move between the slot's CPUs: taken off by that
    guess, a CPU our orchestrator left a moment before looks foreign-busy.
    Spreading our time to flatten the top never overstates a neighbour: the
    figure is the least foreign load consistent with what was measured.
    """
    if own <= 0 or not busy:
        return dict(busy)
    if own >= sum(busy.values()):
        return {cpu: 0.0 for cpu in busy}
    levels = sorted(busy.values(), reverse=True)
    taken, level = 0.0, levels[0]
    for i, value in enumerate(levels):
        below = levels[i + 1] if i + 1 < len(levels) else 0.0
        room = (value - below) * (i + 1)  # lowering the top i+1 CPUs from value to below
        if taken + room >= own:
            level = value - (own - taken) / (i + 1)
            break
        taken += room
        level = below
    return {cpu: min(pct, level) for cpu, pct in busy.items()}


def _top_foreign(cpus: set[int], exclude: set[int], limit: int = 3) -> tuple[str, ...]:
    """Name the processes keeping the slot busy, for the refusal message."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cpu_num"]):
        if proc.pid in exclude or proc.info["cpu_num"] not in cpus:
            continue
        try:
            found.append((proc.cpu_percent(interval=None), proc))
        except psutil.Error:
            continue
    time.sleep(0.2)
    loads = []
    for _, proc in found:
        try:
            loads.append((proc.cpu_percent(interval=None), proc.pid, proc.info["name"]))
        except psutil.Error:
            continue
    loads.sort(reverse=True)
    return tuple(f"pid {pid} {name} {pct:.0f}%" for pct, pid, name in loads[:limit] if pct >= 5)


def cpu_load(window_s: float = 0.5, proc_root: str | Path = "/proc") -> dict[int, float]:
    """Per-CPU busy percent over ``window_s``.

    Two snapshots of our own, not ``psutil.cpu_percent``: that one keeps its
    last snapshot in a module global, so runs on other slots checking their
    CPUs at the same moment would shorten each other's window.
    """
    before = cpu_times(proc_root)
    time.sleep(window_s)
    after = cpu_times(proc_root)
    load = {}
    for cpu in after.keys() & before.keys():
        busy = after[cpu][0] - before[cpu][0]
        total = busy + after[cpu][1] - before[cpu][1]
        load[cpu] = 100.0 * busy / total if total > 0 else 0.0
    return load


def measure_busy(cpus: list[int], window_s: float = 0.5) -> BusyReport:
    """Per-CPU load on ``cpus`` over ``window_s``, minus what our own tree used.

    The orchestrator (and, in ephemeral mode, its Prefect server) share the
    machine with the slot; their own CPU time must not make omni refuse to
    run. System per-CPU busy time comes from ``/proc/stat``, read by
    :func:`cpu_load` (not psutil's global snapshot); our own
    processes' time is attributed to the CPU each last ran on and subtracted.
    """
    own = _own_tree()
    before_own = _thread_seconds(own)
    t0 = time.monotonic()
    system = cpu_load(window_s)
    elapsed = time.monotonic() - t0
    after_own = _thread_seconds(own)
    for cpu in cpus:
        if cpu not in system:
            raise OmniError(f"CPU {cpu} is not online on this host (online: {format_cpulist(system)})")
    mine = sum(
        seconds - before_own[key][0] for key, (seconds, cpu) in after_own.items() if key in before_own and cpu in cpus
    )
    per_cpu = level_off({cpu: system[cpu] for cpu in cpus}, 100.0 * mine / elapsed)
    return BusyReport(per_cpu, ())


def explain_busy(report: BusyReport, threshold: float) -> BusyReport:
    """Add the names of the busiest foreign processes (costlier: scans all)."""
    cpus = set(report.busy_cpus(threshold))
    culprits = _top_foreign(cpus, {p.pid for p in _own_tree()})
    return BusyReport(report.per_cpu, culprits)


# A process under a strict bind policy can only hold pages elsewhere if they
# were moved there (migrate_pages, move_pages) or allocated before the policy
# was set; more than this share of its anonymous memory off the slot's nodes
# is an escape, not noise.
REMOTE_ESCAPE_SHARE = 0.01
# Below this share of the tree's anonymous memory on the slot's nodes, the
# row says its memory mostly lives elsewhere (warning ``remote_memory``).
REMOTE_WARN_LOCAL = 0.9


@dataclass(frozen=True)
class BindingCheck:
    """The binding every process of the tree actually had, against the slot."""

    ok: bool
    cpus_seen: list[int]
    mems_seen: list[int]  # the cpuset's Mems_allowed_list: context, not the policy
    procs_checked: int
    violations: tuple[str, ...]
    policies_seen: list[str] = field(default_factory=list)
    anon_kib_by_node: dict[int, int] = field(default_factory=dict)
    file_kib_by_node: dict[int, int] = field(default_factory=dict)
    local_fraction: float | None = None
    file_local_fraction: float | None = None
    per_process: list[dict] = field(default_factory=list)
    memory_checked: bool = False


def _cpu_violations(seen: dict, slot: Slot) -> tuple[list[str], set[int], set[int]]:
    cpus_seen: set[int] = set()
    mems_seen: set[int] = set()
    violations = []
    for key, proc in seen.items():
        cpus_seen.update(proc.cpus_allowed)
        mems_seen.update(proc.mems_allowed)
        stray = set(proc.cpus_allowed) - set(slot.cpus)
        if stray:
            violations.append(
                f"{_who(key, proc)} allowed cpus {format_cpulist(proc.cpus_allowed)}, "
                f"outside the slot's {format_cpulist(slot.cpus)}"
            )
    return violations, cpus_seen, mems_seen


def _who(key, proc) -> str:
    # threads are keyed "pid/tid", processes by pid
    return f"thread {key} ({proc.name})" if isinstance(key, str) else f"pid {proc.pid} ({proc.name})"


def _policy_violations(numa: dict, threads: dict, slot: Slot) -> list[str]:
    """Each process's and thread's own policy must confine it to the slot's
    nodes: ``bind`` to exactly them (a straddling slot may also interleave).
    A mapping's own policy (``mbind``) may narrow that, never name a node
    outside the slot."""
    straddle = len(slot.mems) > 1
    want = f"bind:{format_cpulist(slot.mems)}"
    violations = []
    for proc in numa.values():
        bad = sorted(t for t in proc.task_policies if not parse_policy(t).confines_to(slot.mems, straddle))
        if bad:
            violations.append(
                f"pid {proc.pid} ({proc.name}) memory policy {', '.join(bad)}, not {want} "
                "(the engine changed its own policy: set_mempolicy)"
            )
        stray = sorted(t for t in proc.policies - proc.task_policies if not parse_policy(t).stays_within(slot.mems))
        if stray:
            violations.append(
                f"pid {proc.pid} ({proc.name}) has mappings with policy {', '.join(stray)}, outside membind "
                f"{format_cpulist(slot.mems)} (mbind)"
            )
    for key, thread in threads.items():
        if thread.policy and not parse_policy(thread.policy).confines_to(slot.mems, straddle):
            violations.append(f"thread {key} ({thread.name}) memory policy {thread.policy}, not {want}")
    return violations


def _page_violations(numa: dict, slot: Slot) -> list[str]:
    violations = []
    for proc in numa.values():
        anon = proc.settled.anon_kib
        remote = {n: kib for n, kib in anon.items() if n not in slot.mems and kib}
        total = sum(anon.values())
        if total and sum(remote.values()) > REMOTE_ESCAPE_SHARE * total:
            violations.append(
                f"pid {proc.pid} ({proc.name}) has {describe_nodes(remote)} of anonymous memory "
                f"outside membind {format_cpulist(slot.mems)} ({sum(remote.values()) / total:.0%} of its "
                f"{total / 1024:.1f} MiB): pages were moved off the slot (migrate_pages/move_pages)"
            )
    return violations


def verify_binding(seen: dict, slot: Slot, membind_expected: bool, numa: dict | None = None) -> BindingCheck:
    """Check the binding each process and thread of the tree actually had.

    ``seen`` maps pid (or "pid/tid" for threads) -> ProcessSeen from the
    sampler: CPUs come from ``Cpus_allowed_list``. ``numa`` maps pid ->
    NumaSeen: memory is checked from the policy and the pages themselves,
    never from ``Mems_allowed_list`` (the cpuset, which ``numactl --membind``
    does not change: in a two-node guest it stays ``0-1`` under
    ``--membind=1``). Memory is only checked when the method binds memory
    (numactl); the sched_setaffinity fallback cannot, but locality is still
    measured.
    """
    numa = numa or {}
    violations, cpus_seen, mems_seen = _cpu_violations(seen, slot)
    threads = {k: v for k, v in seen.items() if isinstance(k, str)}
    memory_checked = membind_expected and bool(numa)
    if memory_checked:
        violations += _policy_violations(numa, threads, slot)
        violations += _page_violations(numa, slot)
    anon: dict[int, int] = {}
    files: dict[int, int] = {}
    per_process = []
    for proc in numa.values():
        add_kib(anon, proc.settled.anon_kib)
        add_kib(files, proc.settled.file_kib)
        per_process.append(
            {
                "pid": proc.pid,
                "name": proc.name,
                "policies": sorted(proc.policies),
                "anon_kib_by_node": node_list(proc.settled.anon_kib),
                "file_kib_by_node": node_list(proc.settled.file_kib),
            }
        )
    policies = {t for proc in numa.values() for t in proc.policies}
    policies |= {t.policy for t in threads.values() if t.policy}
    return BindingCheck(
        ok=bool(seen) and not violations,
        cpus_seen=sorted(cpus_seen),
        mems_seen=sorted(mems_seen),
        procs_checked=len(seen) - len(threads),
        violations=tuple(violations),
        policies_seen=sorted(policies),
        anon_kib_by_node=anon,
        file_kib_by_node=files,
        local_fraction=local_fraction(anon, slot.mems),
        file_local_fraction=local_fraction(files, slot.mems),
        per_process=per_process,
        memory_checked=memory_checked,
    )
