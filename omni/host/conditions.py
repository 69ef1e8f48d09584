"""Host conditions that move CPU inference numbers, and the root-only fixes
for them, recorded so they can be undone (``omni host check/tune/reset``).

The operations follow pyperf's ``system show/tune/reset`` (``pyperf/_system.py``:
CPU governor, minimum frequency, Turbo Boost, IRQ affinity, ASLR, perf
sampling rate), plus what matters to memory-bound, NUMA-bound inference: THP,
NUMA balancing, KSM, swap, sub-NUMA clustering, the hypervisor and its steal.
pyperf's reset writes defaults (``powersave``, rate 100000); ours writes back
the values ``tune`` found, kept in a JSON state file before the first write.

Every reader takes a filesystem ``root`` (``/`` or a fixture tree holding
``sys/`` and ``proc/``) and returns a :class:`Condition`; a file that is
absent (no cpufreq in most VMs) gives the verdict ``unknown``, never an error.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from omni.cpulist import format_cpulist, parse_cpulist
from omni.errors import OmniError
from omni.host.topology import read_topology

VERDICTS = ("ok", "warn", "info", "unknown")
ABSENT = "absent"  # the value of a condition whose file this kernel or VM does not have

CPU_DIR = "sys/devices/system/cpu"
THP_DIR = "sys/kernel/mm/transparent_hugepage"
SYSCTL_DIR = "proc/sys/kernel"


@dataclass(frozen=True)
class Condition:
    """One host condition: what omni saw and whether it moves benchmark numbers.

    ``name`` is the short key of :func:`host_conditions`; ``value`` the raw
    value (``performance``, ``1``, ``0-3 performance; 4-7 powersave``);
    ``why`` one sentence on what it does to CPU inference; ``fix`` the command
    that changes it (empty when there is nothing to do); ``detail`` where it was
    read or what else was seen.
    """

    name: str
    value: str
    verdict: str
    why: str
    fix: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Change:
    """One write of ``tune`` or ``reset``: ``old`` -> ``new`` at ``path``;
    ``error`` says why it did not happen (the file then keeps ``old``)."""

    name: str  # the condition it fixes, e.g. governor
    target: str  # cpu3, irq 24, or "" for a host-wide file
    path: str
    old: str
    new: str
    error: str = ""


# --- reading files ---------------------------------------------------------


def _line(path: Path) -> str | None:
    """The file's first line without its newline; None when it cannot be read."""
    try:
        with open(path) as f:
            return f.readline().rstrip("\n")
    except OSError:
        return None


def selected(text: str) -> str:
    """The kernel's choice among a list: ``always defer [madvise] never`` ->
    ``madvise``. A plain word (what such a file takes as input) is itself."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text.strip()


def _online(root: Path) -> list[int]:
    return list(read_topology(root).online)


def _by_value(values: Mapping[int, str]) -> str:
    """``{0: "a", 1: "a"}`` -> ``a``; mixed values as ``0-3 a; 4-7 b`` (pyperf's format_cpu_infos)."""
    groups: dict[str, list[int]] = {}
    for cpu, value in sorted(values.items()):
        groups.setdefault(value, []).append(cpu)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{format_cpulist(cpus)} {value}" for value, cpus in groups.items())


def _per_cpu(root: Path, name: str, cpus: Iterable[int] | None = None) -> dict[int, str]:
    """``cpuN/cpufreq/<name>`` for each online CPU (or ``cpus``) that has it."""
    values = {}
    for cpu in _online(root) if cpus is None else cpus:
        value = _line(root / CPU_DIR / f"cpu{cpu}" / "cpufreq" / name)
        if value is not None:
            values[cpu] = value
    return values


# --- the readers -----------------------------------------------------------


def read_governor(root: str | Path = "/") -> Condition:
    why = (
        "a governor other than performance lowers the clock between bursts, so a decode step's "
        "time depends on how long the core idled before it"
    )
    governors = _per_cpu(Path(root), "scaling_governor")
    if not governors:
        return Condition("governor", ABSENT, "unknown", why + "; no cpufreq here (a VM: the host sets it)")
    value = _by_value(governors)
    driver = _by_value(_per_cpu(Path(root), "scaling_driver")) or "?"
    ok = set(governors.values()) == {"performance"}
    return Condition(
        "governor",
        value,
        "ok" if ok else "warn",
        why,
        "" if ok else "omni host tune (or: cpupower frequency-set -g performance)",
        f"driver {driver}",
    )


def read_freq_limits(root: str | Path = "/") -> Condition:
    """scaling_min_freq-scaling_max_freq per CPU, in kHz, against the hardware's range."""
    root = Path(root)
    why = (
        "a scaling_max_freq below the hardware's caps every run on those CPUs; a scaling_min_freq "
        "below the maximum lets the clock drop between requests (pyperf raises the minimum to the maximum)"
    )
    low, high = _per_cpu(root, "scaling_min_freq"), _per_cpu(root, "scaling_max_freq")
    hw_max = _per_cpu(root, "cpuinfo_max_freq")
    cpus = sorted(set(low) & set(high))
    if not cpus:
        return Condition("freq_khz", ABSENT, "unknown", why + "; no cpufreq here (a VM: the host sets it)")
    value = _by_value({cpu: f"{low[cpu]}-{high[cpu]}" for cpu in cpus})
    capped = [cpu for cpu in cpus if cpu in hw_max and int(high[cpu]) < int(hw_max[cpu])]
    pinned = all(low[cpu] == high[cpu] for cpu in cpus)
    detail = f"hardware max {_by_value({c: hw_max[c] for c in cpus if c in hw_max}) or '?'}"
    if capped:
        verdict, fix = (
            "warn",
            "cpupower frequency-set -u MAX_KHZ (omni host tune leaves the maximum alone)",
        )
        detail += f"; capped on cpus {format_cpulist(capped)}"
    elif pinned:
        verdict, fix = "ok", ""
    else:
        verdict, fix = "info", "omni host tune (sets scaling_min_freq to cpuinfo_max_freq)"
    return Condition("freq_khz", value, verdict, why, fix, detail)


def _boost_files(root: Path) -> list[tuple[Path, str]]:
    """(file, the value meaning 'boost on') for each boost switch this kernel has:
    intel_pstate's no_turbo, acpi-cpufreq's (and amd-pstate's passive) global
    cpufreq/boost, amd-pstate's per-policy policyN/boost (Linux >= 6.11)."""
    cpu = root / CPU_DIR
    files = [(cpu / "intel_pstate" / "no_turbo", "0"), (cpu / "cpufreq" / "boost", "1")]
    files += [(p / "boost", "1") for p in sorted((cpu / "cpufreq").glob("policy[0-9]*"))]
    return [(path, on) for path, on in files if path.exists()]


def read_boost(root: str | Path = "/") -> Condition:
    why = (
        "turbo clocks depend on how many cores are busy and on temperature, so one slot alone runs "
        "faster than the same slot beside seven others and a slot-count sweep measures turbo"
    )
    files = _boost_files(Path(root))
    states = {}
    for path, on in files:
        text = _line(path)
        if text is not None:
            states[str(path.relative_to(Path(root) / CPU_DIR))] = "on" if text == on else "off"
    if not states:
        return Condition("boost", ABSENT, "unknown", why + "; no boost switch here (a VM: the host sets it)")
    seen = set(states.values())
    value = seen.pop() if len(seen) == 1 else "mixed"
    sources = ", ".join(sorted({s.split("/policy")[0] for s in states}))
    driver = _line(Path(root) / CPU_DIR / "amd_pstate" / "status")
    detail = sources + (f"; amd_pstate {driver}" if driver else "")
    off = value == "off"
    return Condition("boost", value, "ok" if off else "warn", why, "" if off else "omni host tune", detail)


def read_smt(root: str | Path = "/") -> Condition:
    why = (
        "SMT siblings share a core's execution units and caches: omni owns a slot's idle siblings "
        "(smt: false), but a run on siblings, or a neighbour on them, changes throughput"
    )
    control = _line(Path(root) / CPU_DIR / "smt" / "control")
    active = _line(Path(root) / CPU_DIR / "smt" / "active")
    if control is None:
        return Condition("smt", ABSENT, "unknown", why)
    return Condition("smt", control, "info", why, "", f"active {active}" if active is not None else "")


def _one_file(
    name: str, path: Path, why: str, verdicts: Mapping[str, str], other: str, fix: str, parse=lambda text: text
) -> Condition:
    """A condition read from one file: ``verdicts`` by value (``other`` for
    the rest), the fix shown unless ok, ``unknown`` where the file is absent."""
    text = _line(path)
    if text is None:
        return Condition(name, ABSENT, "unknown", why)
    value = parse(text)
    verdict = verdicts.get(value, other)
    return Condition(name, value, verdict, why, "" if verdict == "ok" else fix)


def read_thp_enabled(root: str | Path = "/") -> Condition:
    why = (
        "transparent huge pages cut TLB misses on gigabytes of weights and KV cache; "
        "with 'never' every access walks 4 KiB pages, and 'madvise' gives huge pages only where an engine asks"
    )
    fix = "echo always > /sys/kernel/mm/transparent_hugepage/enabled"
    path = Path(root) / THP_DIR / "enabled"
    return _one_file("thp_enabled", path, why, {"always": "ok", "madvise": "info"}, "warn", fix, selected)


# defrag 'defer': a fault never waits for compaction; kcompactd compacts in the
# background and khugepaged collapses the region into huge pages later. 'madvise'
# and 'defer+madvise' stall only regions an engine madvised (usually at load);
# 'always' stalls any faulting thread, in the middle of a decode step.
THP_DEFRAG_TUNED = "defer"


def read_thp_defrag(root: str | Path = "/") -> Condition:
    why = (
        "defrag 'always' makes a page fault compact memory synchronously: a KV-cache or activation "
        "allocation stalls for milliseconds, which shows as latency outliers"
    )
    verdicts = {"always": "warn", "defer": "ok", "never": "ok"}
    path = Path(root) / THP_DIR / "defrag"
    return _one_file("thp_defrag", path, why, verdicts, "info", "omni host tune (writes defer)", selected)


def read_numa_balancing(root: str | Path = "/") -> Condition:
    why = (
        "automatic NUMA balancing unmaps pages to sample accesses and migrates pages and tasks "
        "behind a --membind/--physcpubind placement, adding faults and moving memory mid-run"
    )
    value = _line(Path(root) / SYSCTL_DIR / "numa_balancing")
    if value is None:
        return Condition("numa_balancing", ABSENT, "unknown", why)
    nodes = len(read_topology(root).nodes)
    if value == "0":
        return Condition("numa_balancing", value, "ok", why)
    verdict = "warn" if nodes > 1 else "info"
    return Condition(
        "numa_balancing", value, verdict, why, "omni host tune (or: sysctl kernel.numa_balancing=0)", f"{nodes} node(s)"
    )


def read_ksm(root: str | Path = "/") -> Condition:
    why = (
        "KSM's ksmd scans memory for identical pages on some core, and a merged page is "
        "copy-on-write: a neighbour's CPU time and a fault where the run writes"
    )
    fix = "omni host tune (or: echo 0 > /sys/kernel/mm/ksm/run)"
    # 2: unmerge everything, then stop
    return _one_file("ksm", Path(root) / "sys/kernel/mm/ksm/run", why, {"0": "ok", "2": "info"}, "warn", fix)


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as kB values: ``SwapTotal:  8388604 kB`` -> {"SwapTotal": 8388604}."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0])
    return values


def read_swap(root: str | Path = "/") -> Condition:
    why = (
        "weights or KV cache swapped out fault back at disk speed inside a run, "
        "and a neighbour's memory pressure decides which pages go"
    )
    try:
        info = parse_meminfo((Path(root) / "proc/meminfo").read_text())
    except OSError:
        info = {}
    if "SwapTotal" not in info:
        return Condition("swap_used_mb", ABSENT, "unknown", why)
    used_mb = (info["SwapTotal"] - info.get("SwapFree", info["SwapTotal"])) // 1024
    detail = f"swap {info['SwapTotal'] // 1024} MiB"
    if used_mb > 0:
        return Condition(
            "swap_used_mb", str(used_mb), "warn", why, "swapoff -a && swapon -a (needs the free RAM)", detail
        )
    return Condition("swap_used_mb", "0", "ok", why, "", detail)


def _cpus_in(text: str | None) -> list[int]:
    return parse_cpulist(text) if text else []


def read_isolated(root: str | Path = "/", cpus: Sequence[int] | None = None) -> Condition:
    why = (
        "isolated CPUs (isolcpus=) get no other tasks, but no load balancing either: "
        "a slot's CPUs should be all isolated or none, with one pinned thread per CPU"
    )
    # Linux >= 4.2 exposes cpu/isolated
    text = _line(Path(root) / CPU_DIR / "isolated")
    if text is None:
        return Condition("isolated", ABSENT, "unknown", why)
    return _cpu_set_condition("isolated", _cpus_in(text), cpus, why, "boot with isolcpus=LIST (a kernel parameter)")


def read_nohz_full(root: str | Path = "/", cpus: Sequence[int] | None = None) -> Condition:
    why = (
        "nohz_full CPUs skip the scheduler tick while one task runs, less jitter for a pinned thread; "
        "with intel_pstate the frequency is then not updated there (pyperf warns of it)"
    )
    # present only on kernels built with CONFIG_NO_HZ_FULL
    text = _line(Path(root) / CPU_DIR / "nohz_full")
    if text is None:
        return Condition("nohz_full", ABSENT, "unknown", why)
    nohz = _cpus_in(text.replace("(null)", ""))
    condition = _cpu_set_condition("nohz_full", nohz, cpus, why, "boot with nohz_full=LIST (a kernel parameter)")
    driver = _line(Path(root) / CPU_DIR / "cpu0/cpufreq/scaling_driver")
    if nohz and driver == "intel_pstate":
        return Condition("nohz_full", condition.value, "warn", why, condition.fix, "intel_pstate driver")
    return condition


def _cpu_set_condition(name: str, cpuset: list[int], cpus: Sequence[int] | None, why: str, fix: str) -> Condition:
    value = format_cpulist(cpuset)
    if not cpus:
        return Condition(name, value, "info", why, "", "" if cpuset else "none")
    inside = set(cpus) & set(cpuset)
    if inside == set(cpus):
        return Condition(name, value, "ok", why, "", f"all of cpus {format_cpulist(cpus)}")
    verdict = "warn" if inside else "info"
    return Condition(
        name, value, verdict, why, fix, f"{format_cpulist(inside) or 'none'} of cpus {format_cpulist(cpus)}"
    )


def parse_interrupts(text: str) -> dict[str, dict[int, int]]:
    """``/proc/interrupts`` as IRQ -> {cpu: count}, numbered IRQs only (NMI, LOC
    and the other per-CPU lines cannot be moved). The header names the CPUs:
    ``           CPU0       CPU1``; a line: `` 24:   1   0  IO-APIC  5-edge  ACPI:Ged``."""
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = [int(word[3:]) for word in lines[0].split() if word.startswith("CPU")]
    counts = {}
    for line in lines[1:]:
        irq, _, rest = line.partition(":")
        if not irq.strip().isdigit():
            continue
        fields = rest.split()[: len(cpus)]
        counts[irq.strip()] = {cpu: int(n) for cpu, n in zip(cpus, fields) if n.isdigit()}
    return counts


def _irq_dirs(root: Path) -> list[Path]:
    return sorted((root / "proc/irq").glob("[0-9]*"), key=lambda p: int(p.name))


def read_irq_affinity(root: str | Path = "/", cpus: Sequence[int] | None = None) -> Condition:
    why = (
        "an interrupt handled on a slot's CPU preempts one OpenMP thread, and every other thread "
        "waits for it at the next barrier"
    )
    root = Path(root)
    if not (root / "proc/irq").is_dir():
        return Condition("irq_affinity", ABSENT, "unknown", why)
    if not cpus:
        return Condition(
            "irq_affinity", "not checked", "info", why, "", "give --cpus (or --spec) to check a slot's CPUs"
        )
    try:
        counts = parse_interrupts((root / "proc/interrupts").read_text())
    except OSError:
        counts = {}
    mine = set(cpus)
    landing = []
    for irq_dir in _irq_dirs(root):
        allowed = _cpus_in(_line(irq_dir / "smp_affinity_list"))
        if mine & set(allowed) and sum(counts.get(irq_dir.name, {}).values()) > 0:
            landing.append(irq_dir.name)
    value = ",".join(landing) if landing else "none"
    detail = f"IRQs with interrupts so far whose affinity includes cpus {format_cpulist(cpus)}"
    if not landing:
        return Condition("irq_affinity", value, "ok", why, "", detail)
    fix = f"omni host tune --cpus {format_cpulist(cpus)} (and stop irqbalance, which moves them back)"
    return Condition("irq_affinity", value, "warn", why, fix, detail)


def read_irqbalance(root: str | Path = "/") -> Condition:
    why = "irqbalance re-spreads IRQs every 10 s, undoing an affinity that keeps them off the slots' CPUs"
    proc = Path(root) / "proc"
    running = any(_line(p / "comm") == "irqbalance" for p in proc.glob("[0-9]*"))
    if running:
        return Condition(
            "irqbalance", "running", "info", why, "systemctl stop irqbalance (before omni host tune --cpus)"
        )
    return Condition("irqbalance", "not running", "ok", why)


def read_nodes_per_socket(root: str | Path = "/") -> Condition:
    why = (
        "sub-NUMA clustering (Intel SNC, AMD NPS) splits a socket into nodes with their own memory "
        "controllers: a slot per node is then a slot per cluster, with a fraction of the socket's bandwidth"
    )
    root = Path(root)
    topo = read_topology(root)
    sockets: dict[str, list[int]] = {}
    memory_only = []
    for node in topo.nodes.values():
        if not node.cpus:
            memory_only.append(node.id)  # CXL or HBM memory: a node without CPUs
            continue
        package = _line(root / CPU_DIR / f"cpu{node.cpus[0]}" / "topology" / "physical_package_id")
        sockets.setdefault(package or "?", []).append(node.id)
    if not sockets:
        return Condition("nodes_per_socket", ABSENT, "unknown", why)
    most = max(len(nodes) for nodes in sockets.values())
    detail = "; ".join(f"socket {s}: nodes {format_cpulist(n)}" for s, n in sorted(sockets.items()))
    if memory_only:
        detail += f"; memory-only nodes {format_cpulist(memory_only)}"
    return Condition("nodes_per_socket", str(most), "ok" if most == 1 else "info", why, "", detail)


def read_hypervisor(root: str | Path = "/") -> Condition:
    why = (
        "a vCPU is a thread on someone else's host: its clock, SMT sibling and NUMA placement are "
        "the host's, unseen from here, and another guest can take its core (steal time)"
    )
    root = Path(root)
    try:
        cpuinfo = (root / "proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    xen = _line(root / "sys/hypervisor/type")  # xen only
    product = _line(root / "sys/class/dmi/id/product_name")  # "KVM", "VMware Virtual Platform"; absent on some VMs
    detail = f"DMI product {product!r}" if product else "no DMI product name"
    if "hypervisor" in flags or xen:
        return Condition("hypervisor", xen or "yes", "info", why, "", detail)
    if not cpuinfo:
        return Condition("hypervisor", ABSENT, "unknown", why)
    return Condition("hypervisor", "none", "ok", why, "", detail)


def parse_steal(text: str, cpus: Sequence[int] | None = None) -> tuple[int, int]:
    """(steal, total) ticks from ``/proc/stat`` text, summed over ``cpus``
    (default: the ``cpu`` line, all CPUs). Line: ``cpu0 582055 8 99348 1562137 3151 0 1463 7296 0 0``:
    user nice system idle iowait irq softirq steal guest guest_nice; guest time
    is already inside user, so it is not added again."""
    wanted = {f"cpu{c}" for c in cpus} if cpus else {"cpu"}
    steal = total = 0
    for line in text.splitlines():
        name, *fields = line.split()
        if name in wanted:
            ticks = [int(f) for f in fields[:8]]
            steal += ticks[7] if len(ticks) > 7 else 0
            total += sum(ticks)
    return steal, total


def steal_condition(before: str, after: str | None = None, cpus: Sequence[int] | None = None) -> Condition:
    """Steal share since boot from one ``/proc/stat`` text, or over the window
    between two (``before``, ``after``), pure so tests pass canned text."""
    why = (
        "steal is time the hypervisor ran another guest on this vCPU's core: the run's wall time "
        "grows while its CPU time does not"
    )
    steal, total = parse_steal(before, cpus)
    window = "since boot"
    if after is not None:
        steal2, total2 = parse_steal(after, cpus)
        steal, total, window = steal2 - steal, total2 - total, "over the sample window"
    if total <= 0:
        return Condition("steal_pct", ABSENT, "unknown", why)
    pct = 100 * steal / total
    verdict = "ok" if steal == 0 else "warn" if pct >= 1 else "info"
    where = f" on cpus {format_cpulist(cpus)}" if cpus else ""
    fix = "" if verdict == "ok" else "run on a host (or a dedicated-core instance) no other guest shares"
    return Condition("steal_pct", f"{pct:.2f}", verdict, why, fix, window + where)


def read_steal(root: str | Path = "/", cpus: Sequence[int] | None = None, window_s: float = 0.0) -> Condition:
    """Steal since boot; over ``window_s`` seconds of sampling when it is > 0."""
    stat = Path(root) / "proc/stat"
    try:
        before = stat.read_text()
        if window_s <= 0:
            return steal_condition(before, None, cpus)
        time.sleep(window_s)
        return steal_condition(before, stat.read_text(), cpus)
    except OSError:
        return steal_condition("", None, cpus)


def read_perf_event_paranoid(root: str | Path = "/") -> Condition:
    why = (
        "perf_event_paranoid decides what perf stat may count: at 2 a user counts only its own "
        "processes' user-space cycles and instructions (IPC), at 3 or more nothing, and system-wide "
        "or kernel counts (APERF/MPERF clocks) need 0 or root"
    )
    value = _line(Path(root) / SYSCTL_DIR / "perf_event_paranoid")
    if value is None:
        return Condition("perf_event_paranoid", ABSENT, "unknown", why)
    level = int(value) if value.lstrip("-").isdigit() else 3
    verdict = "ok" if level <= 1 else "info" if level == 2 else "warn"
    fix = (
        "" if verdict == "ok" else "sysctl kernel.perf_event_paranoid=1 (a security setting: omni host tune leaves it)"
    )
    return Condition("perf_event_paranoid", value, verdict, why, fix)


def read_perf_sample_rate(root: str | Path = "/") -> Condition:
    why = (
        "perf_event_max_sample_rate bounds the sampling interrupts a profiler may raise on the "
        "run's CPUs (pyperf sets it to 1); perf stat counts and is not affected"
    )
    path = Path(root) / SYSCTL_DIR / "perf_event_max_sample_rate"
    return _one_file("perf_sample_rate", path, why, {"1": "ok"}, "info", "omni host tune")


def read_aslr(root: str | Path = "/") -> Condition:
    why = (
        "with address randomization off every run gets the same memory layout, so run-to-run "
        "noise under-states what another boot would see (pyperf keeps full randomization, 2)"
    )
    path = Path(root) / SYSCTL_DIR / "randomize_va_space"
    return _one_file("aslr", path, why, {"2": "ok", "1": "info"}, "warn", "omni host tune (writes 2)")


# --- the check ---------------------------------------------------------------


HOST_WIDE: tuple[Callable[[Path], Condition], ...] = (
    read_governor,
    read_freq_limits,
    read_boost,
    read_smt,
    read_thp_enabled,
    read_thp_defrag,
    read_numa_balancing,
    read_ksm,
    read_swap,
    read_nodes_per_socket,
    read_hypervisor,
    read_perf_event_paranoid,
    read_perf_sample_rate,
    read_aslr,
)


def check(root: str | Path = "/", cpus: Sequence[int] | None = None, steal_window_s: float = 0.0) -> list[Condition]:
    """Every condition, in a fixed order; ``cpus`` (a sweep's slot CPUs) makes
    isolation and IRQ affinity verdicts about those CPUs."""
    root = Path(root)
    found = [read(root) for read in HOST_WIDE]
    found += [read_isolated(root, cpus), read_nohz_full(root, cpus), read_irq_affinity(root, cpus)]
    found += [read_irqbalance(root), read_steal(root, cpus, steal_window_s)]
    return found


# what a result row records: settled settings, not the CPUs asked about or the
# steal share, which grows with every tick
CONDITION_KEYS = (
    "governor",
    "freq_khz",
    "boost",
    "smt",
    "thp_enabled",
    "thp_defrag",
    "numa_balancing",
    "ksm",
    "swap_used_mb",
    "isolated",
    "nohz_full",
    "nodes_per_socket",
    "hypervisor",
    "perf_event_paranoid",
    "aslr",
)


def host_conditions(root: str | Path = "/") -> dict[str, str]:
    """The raw values of :data:`CONDITION_KEYS` (``{"governor": "performance", ...}``),
    JSON-able, for a result row's provenance; ``absent`` where the file is."""
    values = {c.name: c.value for c in check(root)}
    return {key: values[key] for key in CONDITION_KEYS}


def moving_conditions(conditions: Iterable[Condition]) -> list[str]:
    """One line per ``warn``: what would move the numbers, and the fix."""
    return [
        f"{c.name} {c.value}: {c.why}" + (f"; fix: {c.fix}" if c.fix else "") for c in conditions if c.verdict == "warn"
    ]


def changed_conditions(rows: Iterable[Mapping[str, str]]) -> list[str]:
    """Keys that took more than one value across rows (each row a
    :func:`host_conditions` dict), with how many rows saw each value."""
    seen: dict[str, Counter] = {}
    rows = list(rows)
    for row in rows:
        for key in row:
            seen.setdefault(key, Counter())
    for row in rows:
        for key, counts in seen.items():
            counts[_settled(key, row.get(key, "missing"))] += 1
    lines = []
    for key, counts in seen.items():
        if len(counts) > 1:
            values = ", ".join(f"{value!r} in {n} row{'s' if n > 1 else ''}" for value, n in counts.most_common())
            lines.append(f"{key} changed during the sweep: {values}")
    return lines


def _settled(key: str, value) -> str:
    """A value as compared across a sweep: swap in use moves by the MiB with
    every page out, so only whether any is in use counts as a change."""
    if key == "swap_used_mb" and str(value).isdigit():
        return "none" if value in ("0", 0) else "in use"
    return str(value)


def describe(condition: Condition) -> str:
    """One line: name, value, verdict; for a warning, why and the fix."""
    line = f"{condition.name:<20} {condition.value or 'none':<24} {condition.verdict:<7}"
    line = (line + f" ({condition.detail})" if condition.detail else line).rstrip()
    if condition.verdict == "warn":
        line += f"\n{'':<21}why: {condition.why}" + (f"\n{'':<21}fix: {condition.fix}" if condition.fix else "")
    return line


# --- tune and reset ----------------------------------------------------------


def default_state_path() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "omni" / "host-tune.json"


@dataclass(frozen=True)
class _Write:
    name: str
    target: str
    path: Path
    new: str


def _cpufreq_writes(root: Path, cpus: Sequence[int]) -> list[_Write]:
    # the governor first: setting it resets intel_pstate's no_turbo (pyperf's order)
    writes = []
    for cpu in cpus:
        freq = root / CPU_DIR / f"cpu{cpu}" / "cpufreq"
        writes.append(_Write("governor", f"cpu{cpu}", freq / "scaling_governor", "performance"))
    for cpu in cpus:
        freq = root / CPU_DIR / f"cpu{cpu}" / "cpufreq"
        top = _line(freq / "cpuinfo_max_freq")
        if top is not None:
            writes.append(_Write("freq_khz", f"cpu{cpu}", freq / "scaling_min_freq", top))
    return writes


def _boost_writes(root: Path) -> list[_Write]:
    files = _boost_files(root)
    if not files:  # reported as absent: this host has no boost switch
        return [_Write("boost", "cpufreq/boost", root / CPU_DIR / "cpufreq" / "boost", "0")]
    return [_Write("boost", _boost_target(root, path), path, "1" if on == "0" else "0") for path, on in files]


def _boost_target(root: Path, path: Path) -> str:
    """``intel_pstate/no_turbo``, ``cpufreq/boost``, ``policy3/boost``: which switch, as
    its value (no_turbo 0 -> 1) reads backwards from boost's (1 -> 0)."""
    return "/".join(path.relative_to(root / CPU_DIR).parts[-2:])


def _irq_writes(root: Path, cpus: Sequence[int]) -> list[_Write]:
    """Every IRQ allowed on ``cpus`` to its other allowed CPUs (all other
    online CPUs when it had none), and new IRQs' default the same way."""
    others = sorted(set(_online(root)) - set(cpus))
    if not others:
        return []
    writes = []
    for irq_dir in _irq_dirs(root):
        allowed = _cpus_in(_line(irq_dir / "smp_affinity_list"))
        if set(allowed) & set(cpus):
            keep = sorted(set(allowed) - set(cpus)) or others
            writes.append(
                _Write("irq_affinity", f"irq {irq_dir.name}", irq_dir / "smp_affinity_list", format_cpulist(keep))
            )
    default = root / "proc/irq/default_smp_affinity"
    text = _line(default)
    if text is not None and set(parse_cpumask(text)) & set(cpus):
        keep = sorted(set(parse_cpumask(text)) - set(cpus)) or others
        writes.append(_Write("irq_affinity", "default", default, format_cpumask(keep)))
    return writes


def parse_cpumask(text: str) -> list[int]:
    """A hex CPU mask in comma-separated 32-bit groups: ``ff,00000001`` -> [0, 32..39]."""
    value = int(text.strip().replace(",", "") or "0", 16)
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]


def format_cpumask(cpus: Iterable[int]) -> str:
    """[0, 1] -> ``3``; [0, 32] -> ``1,00000001`` (the kernel's grouping)."""
    value = sum(1 << cpu for cpu in set(cpus))
    text = f"{value:x}"
    groups = []
    while len(text) > 8:
        groups.insert(0, text[-8:])
        text = text[:-8]
    return ",".join([text, *groups])


def plan_tune(root: str | Path = "/", cpus: Sequence[int] | None = None) -> list[_Write]:
    """The writes ``tune`` would make, in order, whatever the current values.

    Governor and minimum frequency go on every online CPU (the orchestrator,
    its sampler and a serving arm's load generator run outside the slots, and
    check judges the whole host); ``cpus`` only decides which CPUs IRQs leave.
    """
    root = Path(root)
    writes = _cpufreq_writes(root, _online(root)) + _boost_writes(root)
    sysctl = root / SYSCTL_DIR
    writes += [
        _Write("numa_balancing", "", sysctl / "numa_balancing", "0"),
        _Write("ksm", "", root / "sys/kernel/mm/ksm/run", "0"),
        _Write("thp_defrag", "", root / THP_DIR / "defrag", THP_DEFRAG_TUNED),
        _Write("perf_sample_rate", "", sysctl / "perf_event_max_sample_rate", "1"),
        _Write("aslr", "", sysctl / "randomize_va_space", "2"),
    ]
    if cpus:
        writes += _irq_writes(root, cpus)
    return writes


def _write(path: Path, text: str) -> str:
    """Write ``text`` into an existing file; the error as text, "" when it took.
    O_WRONLY without O_CREAT: a file this kernel lacks stays absent."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        if error.errno == errno.EIO and "/irq/" in str(path):
            reason += " (a kernel-managed IRQ: it cannot be moved)"
        return reason
    return ""


def _load_state(state_path: Path) -> dict:
    try:
        state = json.loads(state_path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise OmniError(
            f"--state {state_path}: cannot read omni host tune's state ({error}); fix or remove it"
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("writes"), list):
        raise OmniError(f"{state_path}: not omni host tune's state (no 'writes' list); fix or remove it")
    return state


def _save_state(state_path: Path, state: dict) -> None:
    # written whole to a temporary file and renamed over the old one: a crash
    # leaves the previous state or the new one, never half of it
    state_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_path.with_name(state_path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    os.replace(tmp, state_path)


def tune(
    root: str | Path = "/",
    cpus: Sequence[int] | None = None,
    state_path: str | Path | None = None,
    dry_run: bool = False,
) -> list[Change]:
    """Apply the fixes that need root; return each change (old -> new).

    The old contents go into ``state_path`` before anything is written, so a
    crash mid-way still leaves them for ``reset``; a path already recorded
    keeps its first value (a second tune does not overwrite the originals);
    a write that fails is dropped from the state again and returned with its
    error. With ``dry_run`` nothing is written or recorded.
    """
    root = Path(root).resolve()
    state_path = Path(state_path) if state_path else default_state_path()
    planned, raw = _planned(root, cpus)
    if dry_run:
        return planned
    state = _load_state(state_path) or {"root": str(root), "writes": []}
    _require_root(state, root, state_path)
    recorded = {entry["path"] for entry in state["writes"]}
    added = [c for c in planned if not c.error and c.path not in recorded]
    state["writes"] += [{"name": c.name, "target": c.target, "path": c.path, "old": raw[c.path]} for c in added]
    if added:
        _save_state(state_path, state)
    done = [c if c.error else _applied(c) for c in planned]
    failed = {c.path for c in done if c.error} & {c.path for c in added}
    if failed:
        state["writes"] = [e for e in state["writes"] if e["path"] not in failed]
        _save_state(state_path, state) if state["writes"] else state_path.unlink()
    return done


def _planned(root: Path, cpus: Sequence[int] | None) -> tuple[list[Change], dict[str, str]]:
    """The changes :func:`plan_tune`'s writes make (those already in place
    left out), and each file's whole old contents by path."""
    planned, raw, seen = [], {}, set()
    for w in plan_tune(root, cpus):
        key = os.path.realpath(w.path)  # cpuN/cpufreq is often a link to a shared policyN
        if key in seen:
            continue
        seen.add(key)
        try:
            old = w.path.read_text()
        except OSError as error:
            reason = "absent" if error.errno == errno.ENOENT else os.strerror(error.errno or 0)
            planned.append(Change(w.name, w.target, str(w.path), ABSENT, w.new, reason))
            continue
        if selected(old) != w.new:
            planned.append(Change(w.name, w.target, str(w.path), selected(old), w.new))
            raw[str(w.path)] = old
    return planned, raw


def _applied(change: Change) -> Change:
    error = _write(Path(change.path), change.new + "\n")
    return Change(change.name, change.target, change.path, change.old, change.new, error)


def _require_root(state: dict, root: Path, state_path: Path) -> None:
    if state.get("root") != str(root):
        raise OmniError(
            f"{state_path} records a tune of root {state.get('root')!r}, not {str(root)!r}: "
            "reset that root first, or give another --state file"
        )


def reset(root: str | Path = "/", state_path: str | Path | None = None) -> list[Change]:
    """Write back every value ``tune`` recorded, in the order it changed them,
    and remove the state file; entries that fail stay in it for another try."""
    root = Path(root).resolve()
    state_path = Path(state_path) if state_path else default_state_path()
    state = _load_state(state_path)
    if not state:
        return []  # nothing tuned: reset twice is what reset once is
    _require_root(state, root, state_path)
    changes = []
    for entry in state["writes"]:
        path, old = Path(entry["path"]), entry["old"]
        now = _line(path)
        # a choice file reads 'always defer [madvise] never' but takes 'madvise'
        wanted = selected(old) + "\n" if "[" in old else old
        error = _write(path, wanted)
        changes.append(Change(entry["name"], entry["target"], str(path), selected(now or ABSENT), selected(old), error))
    left = [e for e, c in zip(state["writes"], changes) if c.error]
    if left:
        _save_state(state_path, {**state, "writes": left})
    else:
        state_path.unlink()
    return changes


def describe_changes(changes: Iterable[Change]) -> list[str]:
    """One line per (condition, old, new, error), its CPUs or IRQs grouped:
    ``governor cpu0-3: powersave -> performance``."""
    groups: dict[tuple, list[str]] = {}
    for c in changes:
        groups.setdefault((c.name, c.old, c.new, c.error), []).append(c.target)
    lines = []
    for (name, old, new, error), targets in groups.items():
        line = f"{name}{_targets(targets)}: {old} -> {new}"
        lines.append(line + (f"  FAILED: {error}" if error else ""))
    return lines


def _targets(targets: list[str]) -> str:
    cpus = [int(t[3:]) for t in targets if t[:3] == "cpu" and t[3:].isdigit()]
    irqs = [t.split()[1] for t in targets if t.startswith("irq ")]
    rest = [t for t in targets if t and not (t[:3] == "cpu" and t[3:].isdigit()) and not t.startswith("irq ")]
    parts = ([f"cpu{format_cpulist(cpus)}"] if cpus else []) + ([f"irq {','.join(irqs)}"] if irqs else []) + rest
    return " " + " ".join(parts) if parts else ""
