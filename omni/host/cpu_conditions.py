"""The host conditions of the CPUs a run computes on, each read into a
:class:`~omni.host.readings.Condition` with its verdict: the clock (governor,
frequency limits, boost), SMT, isolation and the scheduler tick, interrupts on
the slots' CPUs, the hypervisor and its steal, and what perf may count and
sample there.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from omni.cpulist import format_cpulist
from omni.host.readings import (
    ABSENT,
    CPU_DIR,
    SYSCTL_DIR,
    Condition,
    boost_files,
    cpus_in,
    irq_dirs,
    one_file,
    online_cpus,
    read_line,
)


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
    for cpu in online_cpus(root) if cpus is None else cpus:
        value = read_line(root / CPU_DIR / f"cpu{cpu}" / "cpufreq" / name)
        if value is not None:
            values[cpu] = value
    return values


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


def read_boost(root: str | Path = "/") -> Condition:
    why = (
        "turbo clocks depend on how many cores are busy and on temperature, so one slot alone runs "
        "faster than the same slot beside seven others and a slot-count sweep measures turbo"
    )
    files = boost_files(Path(root))
    states = {}
    for path, on in files:
        text = read_line(path)
        if text is not None:
            states[str(path.relative_to(Path(root) / CPU_DIR))] = "on" if text == on else "off"
    if not states:
        return Condition("boost", ABSENT, "unknown", why + "; no boost switch here (a VM: the host sets it)")
    seen = set(states.values())
    value = seen.pop() if len(seen) == 1 else "mixed"
    sources = ", ".join(sorted({s.split("/policy")[0] for s in states}))
    driver = read_line(Path(root) / CPU_DIR / "amd_pstate" / "status")
    detail = sources + (f"; amd_pstate {driver}" if driver else "")
    off = value == "off"
    return Condition("boost", value, "ok" if off else "warn", why, "" if off else "omni host tune", detail)


def read_smt(root: str | Path = "/") -> Condition:
    why = (
        "SMT siblings share a core's execution units and caches: omni owns a slot's idle siblings "
        "(smt: false), but a run on siblings, or a neighbour on them, changes throughput"
    )
    control = read_line(Path(root) / CPU_DIR / "smt" / "control")
    active = read_line(Path(root) / CPU_DIR / "smt" / "active")
    if control is None:
        return Condition("smt", ABSENT, "unknown", why)
    return Condition("smt", control, "info", why, "", f"active {active}" if active is not None else "")


def read_isolated(root: str | Path = "/", cpus: Sequence[int] | None = None) -> Condition:
    why = (
        "isolated CPUs (isolcpus=) get no other tasks, but no load balancing either: "
        "a slot's CPUs should be all isolated or none, with one pinned thread per CPU"
    )
    # Linux >= 4.2 exposes cpu/isolated
    text = read_line(Path(root) / CPU_DIR / "isolated")
    if text is None:
        return Condition("isolated", ABSENT, "unknown", why)
    return _cpu_set_condition("isolated", cpus_in(text), cpus, why, "boot with isolcpus=LIST (a kernel parameter)")


def read_nohz_full(root: str | Path = "/", cpus: Sequence[int] | None = None) -> Condition:
    why = (
        "nohz_full CPUs skip the scheduler tick while one task runs, less jitter for a pinned thread; "
        "with intel_pstate the frequency is then not updated there (pyperf warns of it)"
    )
    # present only on kernels built with CONFIG_NO_HZ_FULL
    text = read_line(Path(root) / CPU_DIR / "nohz_full")
    if text is None:
        return Condition("nohz_full", ABSENT, "unknown", why)
    nohz = cpus_in(text.replace("(null)", ""))
    condition = _cpu_set_condition("nohz_full", nohz, cpus, why, "boot with nohz_full=LIST (a kernel parameter)")
    driver = read_line(Path(root) / CPU_DIR / "cpu0/cpufreq/scaling_driver")
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
    for irq_dir in irq_dirs(root):
        allowed = cpus_in(read_line(irq_dir / "smp_affinity_list"))
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
    running = any(read_line(p / "comm") == "irqbalance" for p in proc.glob("[0-9]*"))
    if running:
        return Condition(
            "irqbalance", "running", "info", why, "systemctl stop irqbalance (before omni host tune --cpus)"
        )
    return Condition("irqbalance", "not running", "ok", why)


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
    xen = read_line(root / "sys/hypervisor/type")  # xen only
    product = read_line(root / "sys/class/dmi/id/product_name")  # "KVM", "VMware Virtual Platform"; absent on some VMs
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
    value = read_line(Path(root) / SYSCTL_DIR / "perf_event_paranoid")
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
    return one_file("perf_sample_rate", path, why, {"1": "ok"}, "info", "omni host tune")
