"""Whether two sets of runs ran on the same hardware and engine env: what a
verdict across sweeps (``omni compare``, ``omni regressions``) needs equal.

A new CPU, more cores per slot or another engine version moves every number
by itself, and the between-sweep drift added to those intervals is measured
on one host: such a change would read as a regression of the arm. Conbench
compares a benchmark only with runs of the same machine, for this reason.

Each fact is the set of distinct values the runs recorded; a fact no row
recorded (rows older than its column, or a frame without it) is unknown,
never taken as equal nor as different.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

# the stored columns the facts are read from (omni.store.columns)
HARDWARE_COLUMNS = ("cpu_model", "cpus", "engine_version")
# fact -> what a difference in it is: the wording of refusals and notes
FACT_KINDS = {"cpu_model": "hardware", "cores per slot": "hardware", "engine_version": "engine env"}
FLAG = "--across-hardware"


def hardware_facts(rows: pd.DataFrame) -> dict[str, tuple]:
    """Per fact, the distinct values ``rows`` recorded, sorted; ``()`` when
    none did. Cores per slot is the number of CPUs a run was bound to
    (``cpus``); the engine env is the version the engine reported
    (``engine_version``, e.g. ``vllm 0.32.0``): the env's freeze hash of
    rows before schema v4 counts omni's own install, so it moves with every
    omni commit, and its declaration key counts the build host's cores."""
    return {
        "cpu_model": _distinct(rows, "cpu_model", str),
        "cores per slot": _distinct(rows, "cpus", len),
        "engine_version": _distinct(rows, "engine_version", str),
    }


def _distinct(rows: pd.DataFrame, column: str, value) -> tuple:
    if column not in rows:
        return ()
    return tuple(sorted({value(v) for v in rows[column] if recorded(v)}))


def recorded(value) -> bool:
    """Whether a stored value says anything: not null, not empty."""
    if value is None or isinstance(value, str):
        return bool(value)
    if hasattr(value, "__len__"):  # a CPU list: a list or a numpy array
        return len(value) > 0
    return not pd.isna(value)


@dataclass(frozen=True)
class Difference:
    fact: str
    before: tuple
    after: tuple

    def describe(self) -> str:
        return f"{self.fact} {_shown(self.before)} -> {_shown(self.after)}"


def _shown(values: tuple) -> str:
    texts = [repr(v) if isinstance(v, str) else str(v) for v in values]
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


@dataclass(frozen=True)
class HardwareCheck:
    """What differs between two sets of runs (known on both sides and not
    equal), and which facts a side did not record (``(fact, side)``, side
    ``before`` or ``after``): those were not checked."""

    differences: tuple[Difference, ...] = ()
    unknown: tuple[tuple[str, str], ...] = ()

    @property
    def same(self) -> bool:
        """No known difference (an unknown fact is no difference, and is listed)."""
        return not self.differences

    def kind(self) -> str:
        """``hardware``, ``engine env`` or ``hardware and engine env``."""
        kinds = dict.fromkeys(FACT_KINDS[d.fact] for d in self.differences)
        return " and ".join(kinds)

    def describe(self) -> str:
        """``cpu_model 'A' -> 'B'; cores per slot 2 -> 4``."""
        return "; ".join(d.describe() for d in self.differences)

    def reason(self) -> str:
        article = "a " if self.kind() == "engine env" else ""
        return f"ran on {article}different {self.kind()}: {self.describe()}"

    def refusal(self) -> str:
        """What a verdict across the difference says instead of a verdict."""
        return f"refused: the sweeps {self.reason()} ({FLAG} judges them anyway)"

    def describe_unknown(self, before: str, after: str) -> str:
        """``not recorded, so not checked: cpu_model in s1, s2; engine_version in s2``."""
        sweeps = {"before": before, "after": after}
        where: dict[str, list[str]] = {}
        for fact, side in self.unknown:
            where.setdefault(fact, []).append(sweeps[side])
        parts = [f"{fact} in {', '.join(names)}" for fact, names in where.items()]
        return "not recorded, so not checked: " + "; ".join(parts) if parts else ""


def check_facts(before: dict[str, tuple], after: dict[str, tuple]) -> HardwareCheck:
    """Two sets of :func:`hardware_facts`, fact by fact."""
    differences = tuple(
        Difference(fact, before[fact], after[fact])
        for fact in FACT_KINDS
        if before[fact] and after[fact] and before[fact] != after[fact]
    )
    unknown = tuple(
        (fact, side) for fact in FACT_KINDS for side, facts in (("before", before), ("after", after)) if not facts[fact]
    )
    return HardwareCheck(differences, unknown)


def check_hardware(before: pd.DataFrame, after: pd.DataFrame) -> HardwareCheck:
    """What differs between the runs ``before`` and the runs ``after`` (rows as stored)."""
    return check_facts(hardware_facts(before), hardware_facts(after))


def comparison_lines(checks: dict[str, HardwareCheck], across: bool, before: str, after: str) -> list[str]:
    """Markdown lines for the top of ``omni compare``: per difference, the
    arms it refused (or, ``across``, judged anyway), then what was not checked."""
    differing: dict[tuple[str, str, str], list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for arm, check in checks.items():
        if not check.same:
            differing.setdefault((check.kind(), check.describe(), check.reason()), []).append(arm)
        if check.unknown:
            unknown.setdefault(check.describe_unknown(before, after), []).append(arm)

    def who(arms: list[str]) -> str:
        return "every arm" if len(arms) == len(checks) else ", ".join(f"`{arm}`" for arm in arms)

    lines = []
    for (kind, text, reason), arms in differing.items():
        if across:
            lines.append(
                f"**Judged across {kind}** ({FLAG}), {who(arms)}: {text}. Each such verdict measures "
                f"that change of {kind} together with the arm's own."
            )
        else:
            lines.append(
                f"**No verdict** for {who(arms)}: the sweeps {reason}. Compare sweeps of the same {kind}, "
                f"or pass {FLAG} to judge them anyway."
            )
    lines += [f"- hardware of {who(arms)} {text}" for text, arms in unknown.items()]
    return lines + [""] if lines else []


def history_lines(
    differing: dict[tuple[str, str], dict[str, tuple[str, ...]]], unknown: dict[str, tuple[str, ...]], across: bool
) -> list[str]:
    """Markdown lines for ``omni regressions``: ``differing`` (judged sweep,
    arm) -> {reason: earlier sweeps of the window that differ}, skipped as
    history (or, ``across``, kept); ``unknown``: sweep -> facts its rows
    did not record."""
    lines = []
    for (sweep, arm), reasons in differing.items():
        for reason, earlier in reasons.items():
            if across:
                lines.append(
                    f"- `{arm}` in {sweep}: judged against {len(earlier)} earlier sweep(s) that {reason} "
                    f"({', '.join(earlier)}; {FLAG})"
                )
            else:
                lines.append(
                    f"- `{arm}` in {sweep}: {len(earlier)} earlier sweep(s) skipped as history, they {reason} "
                    f"({', '.join(earlier)})"
                )
    if differing and not across:
        lines.append(
            f"History on other hardware or engine env is skipped (a sweep left with fewer than --min-history "
            f"earlier sweeps is not judged); {FLAG} keeps it."
        )
    by_facts: dict[tuple[str, ...], list[str]] = {}
    for sweep, facts in unknown.items():
        by_facts.setdefault(facts, []).append(sweep)
    lines += [
        f"- {', '.join(facts)} not recorded in {', '.join(sweeps)}: not checked" for facts, sweeps in by_facts.items()
    ]
    return lines + [""] if lines else []
