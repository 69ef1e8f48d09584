"""How a host condition is read: the :class:`Condition` every reader returns,
and the reading of ``sys/`` and ``proc/`` files under a filesystem root that
the readers (:mod:`omni.host.cpu_conditions`, :mod:`omni.host.memory_conditions`)
and the fixes (:mod:`omni.host.tuning`) share.

A root is ``/`` or a fixture tree holding ``sys/`` and ``proc/``; a file that
cannot be read is None here and the verdict ``unknown`` in a reader, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from omni.cpulist import parse_cpulist
from omni.host.topology import read_topology

VERDICTS = ("ok", "warn", "info", "unknown")
ABSENT = "absent"  # the value of a condition whose file this kernel or VM does not have

CPU_DIR = "sys/devices/system/cpu"
THP_DIR = "sys/kernel/mm/transparent_hugepage"
SYSCTL_DIR = "proc/sys/kernel"


@dataclass(frozen=True)
class Condition:
    """One host condition: what omni saw and whether it moves benchmark numbers.

    ``name`` is the short key of :func:`omni.host.conditions.host_conditions`;
    ``value`` the raw value (``performance``, ``1``, ``0-3 performance; 4-7
    powersave``); ``why`` one sentence on what it does to CPU inference;
    ``fix`` the command that changes it (empty when there is nothing to do);
    ``detail`` where it was read or what else was seen.
    """

    name: str
    value: str
    verdict: str
    why: str
    fix: str = ""
    detail: str = ""


# --- reading files ---------------------------------------------------------


def read_line(path: Path) -> str | None:
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


def online_cpus(root: Path) -> list[int]:
    return list(read_topology(root).online)


def cpus_in(text: str | None) -> list[int]:
    return parse_cpulist(text) if text else []


def boost_files(root: Path) -> list[tuple[Path, str]]:
    """(file, the value meaning 'boost on') for each boost switch this kernel has:
    intel_pstate's no_turbo, acpi-cpufreq's (and amd-pstate's passive) global
    cpufreq/boost, amd-pstate's per-policy policyN/boost (Linux >= 6.11)."""
    cpu = root / CPU_DIR
    files = [(cpu / "intel_pstate" / "no_turbo", "0"), (cpu / "cpufreq" / "boost", "1")]
    files += [(p / "boost", "1") for p in sorted((cpu / "cpufreq").glob("policy[0-9]*"))]
    return [(path, on) for path, on in files if path.exists()]


def irq_dirs(root: Path) -> list[Path]:
    return sorted((root / "proc/irq").glob("[0-9]*"), key=lambda p: int(p.name))


def one_file(
    name: str, path: Path, why: str, verdicts: Mapping[str, str], other: str, fix: str, parse=lambda text: text
) -> Condition:
    """A condition read from one file: ``verdicts`` by value (``other`` for
    the rest), the fix shown unless ok, ``unknown`` where the file is absent."""
    text = read_line(path)
    if text is None:
        return Condition(name, ABSENT, "unknown", why)
    value = parse(text)
    verdict = verdicts.get(value, other)
    return Condition(name, value, verdict, why, "" if verdict == "ok" else fix)
