"""The root-only fixes for the host conditions that move CPU inference numbers
(``omni host tune/reset``), recorded so they can be undone: ``tune`` writes
them with every old value kept first, ``reset`` writes the old values back.

The operations follow pyperf's ``system tune/reset`` (``pyperf/_system.py``).
pyperf's reset writes defaults (``powersave``, rate 100000); ours writes back
the values ``tune`` found, kept in a JSON state file before the first write.
The conditions themselves are read in :mod:`omni.host.conditions`.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omni.cpulist import format_cpulist
from omni.errors import OmniError
from omni.host.cache import user_cache
from omni.host.readings import (
    ABSENT,
    CPU_DIR,
    SYSCTL_DIR,
    THP_DIR,
    boost_files,
    cpus_in,
    irq_dirs,
    online_cpus,
    read_line,
    selected,
)


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


# defrag 'defer': a fault never waits for compaction; kcompactd compacts in the
# background and khugepaged collapses the region into huge pages later. 'madvise'
# and 'defer+madvise' stall only regions an engine madvised (usually at load);
# 'always' stalls any faulting thread, in the middle of a decode step.
THP_DEFRAG_TUNED = "defer"


def default_state_path() -> Path:
    return user_cache("host-tune.json")


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
        top = read_line(freq / "cpuinfo_max_freq")
        if top is not None:
            writes.append(_Write("freq_khz", f"cpu{cpu}", freq / "scaling_min_freq", top))
    return writes


def _boost_writes(root: Path) -> list[_Write]:
    files = boost_files(root)
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
    others = sorted(set(online_cpus(root)) - set(cpus))
    if not others:
        return []
    writes = []
    for irq_dir in irq_dirs(root):
        allowed = cpus_in(read_line(irq_dir / "smp_affinity_list"))
        if set(allowed) & set(cpus):
            keep = sorted(set(allowed) - set(cpus)) or others
            writes.append(
                _Write("irq_affinity", f"irq {irq_dir.name}", irq_dir / "smp_affinity_list", format_cpulist(keep))
            )
    default = root / "proc/irq/default_smp_affinity"
    text = read_line(default)
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
    writes = _cpufreq_writes(root, online_cpus(root)) + _boost_writes(root)
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
        now = read_line(path)
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
