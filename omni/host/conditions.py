"""Host conditions that move CPU inference numbers, read with their verdicts
(``omni host check``): every condition in a fixed order, the settled values a
result row records, and the lines a sweep prints of them.

The conditions follow pyperf's ``system show`` (``pyperf/_system.py``: CPU
governor, minimum frequency, Turbo Boost, IRQ affinity, ASLR, perf sampling
rate), plus what matters to memory-bound, NUMA-bound inference: THP, NUMA
balancing, KSM, swap, sub-NUMA clustering, the hypervisor and its steal. The
readers are in :mod:`omni.host.cpu_conditions` and
:mod:`omni.host.memory_conditions`; the root-only fixes (``omni host
tune/reset``) in :mod:`omni.host.tuning`.

Every reader takes a filesystem ``root`` (``/`` or a fixture tree holding
``sys/`` and ``proc/``) and returns a :class:`~omni.host.readings.Condition`;
a file that is absent (no cpufreq in most VMs) gives the verdict ``unknown``,
never an error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from omni.host.cpu_conditions import (
    read_boost,
    read_freq_limits,
    read_governor,
    read_hypervisor,
    read_irq_affinity,
    read_irqbalance,
    read_isolated,
    read_nohz_full,
    read_perf_event_paranoid,
    read_perf_sample_rate,
    read_smt,
    read_steal,
)
from omni.host.memory_conditions import (
    read_aslr,
    read_ksm,
    read_nodes_per_socket,
    read_numa_balancing,
    read_swap,
    read_thp_defrag,
    read_thp_enabled,
)
from omni.host.readings import Condition

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
