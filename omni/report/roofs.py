"""Per arm, its runs against their roofs: the roof that binds each phase and
the share of it reached, as the geometric mean of the runs' shares with a
95 % t interval on their logs (Student's t, n - 1 df: the runs of one arm
are its independent replicates), beside the bytes the model moves per
decoded token. A share above 1 is not shown as a share: the arm is flagged
with the rows' finding (:mod:`omni.measure.roofline`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from omni.measure.roofline import ROOF_EXCEEDED
from omni.stats.intervals import two_sided_quantile

LEVEL = 0.95
PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class PhaseRoof:
    roof: str  # the roof that binds (the most frequent over the runs)
    share: float  # geometric mean over runs
    low: float | None  # 95 % interval; None from one run
    high: float | None
    runs: int


@dataclass(frozen=True)
class ArmRoofs:
    phases: dict[str, PhaseRoof]
    decode_bytes_per_token: float | None
    findings: tuple[str, ...] = ()
    note: str | None = None  # why there are no roofs
    working_set: float | None = None  # one decode step's bytes, median over runs
    llc: float | None = None  # the last-level cache the slot reaches
    # per phase: (arithmetic intensity, achieved FLOP/s), medians over runs: the roofline plot's points
    points: dict[str, tuple[float, float]] = field(default_factory=dict)
    roofs: dict[str, float] = field(default_factory=dict)  # dram / cache B/s, compute FLOP/s: medians over runs


def phase_roof(rows: pd.DataFrame, phase: str) -> PhaseRoof | None:
    shares = rows[f"{phase}_roof_share"].dropna().astype(float)
    shares = shares[shares > 0]
    if shares.empty:
        return None
    logs = np.log(shares.to_numpy())
    mean = float(logs.mean())
    low = high = None
    if len(logs) > 1:
        half = two_sided_quantile(LEVEL, len(logs) - 1) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
        low, high = math.exp(mean - half), math.exp(mean + half)
    roof = rows[f"{phase}_roof"].dropna().mode()
    return PhaseRoof(str(roof.iloc[0]) if len(roof) else "?", math.exp(mean), low, high, len(logs))


def roof_findings(rows: pd.DataFrame) -> tuple[str, ...]:
    """The rows' roof_exceeded warnings, each once."""
    found = set()
    for warnings, rules in zip(rows["warnings"], rows["warning_rules"], strict=True):
        if warnings is None or rules is None:
            continue
        found |= {w for w, r in zip(list(warnings), list(rules), strict=True) if r == ROOF_EXCEEDED}
    return tuple(sorted(found))


def arm_roofs(ok: pd.DataFrame, arms) -> dict[str, ArmRoofs]:
    """Every arm with roof columns in its ok rows (rows before v19 have none)."""
    if "decode_roof_share" not in ok or (ok["decode_roof_share"].isna().all() and ok["roof_note"].isna().all()):
        return {}
    out = {}
    for arm in arms:
        rows = ok[ok["arm"] == arm]
        if rows.empty:
            continue
        phases = {p: found for p in PHASES if (found := phase_roof(rows, p)) is not None}
        findings = roof_findings(rows)
        notes = rows["roof_note"].dropna()
        note = str(notes.iloc[0]) if not phases and len(notes) else None
        if phases or note:
            out[arm] = ArmRoofs(
                phases, median_of(rows, "decode_bytes_per_token"), findings, note,
                median_of(rows, "decode_working_set_bytes"), median_of(rows, "roof_llc_bytes"),
                roofline_points(rows), roof_values(rows),
            )  # fmt: skip
    return out


def roofline_points(rows: pd.DataFrame) -> dict[str, tuple[float, float]]:
    points = {}
    for phase, rate in (("decode", "decode_tok_s"), ("prefill", "prefill_tok_s")):
        flops, moved = rows[f"{phase}_flops_per_token"], rows[f"{phase}_bytes_per_token"]
        achieved = (flops * rows[rate]).dropna()
        intensity = (flops / moved).dropna()
        if len(achieved) and len(intensity):
            points[phase] = (float(intensity.median()), float(achieved.median()))
    return points


def roof_values(rows: pd.DataFrame) -> dict[str, float]:
    names = {"dram": "roof_dram_bytes_s", "cache": "roof_cache_bytes_s", "compute": "roof_compute_flop_s"}
    return {name: v for name, column in names.items() if (v := median_of(rows, column))}


def median_of(rows: pd.DataFrame, column: str) -> float | None:
    values = rows[column].dropna() if column in rows else ()
    return float(values.median()) if len(values) else None


def memory_text(r: ArmRoofs) -> str:
    """Which memory roof applies, and why: the working set against the cache."""
    if r.working_set is None or not r.llc:
        return "-"
    fits = "fits in" if r.working_set <= r.llc else "exceeds"
    return f"{r.working_set / 2**20:.1f} MiB, {fits} the {r.llc / 2**20:.0f} MiB last-level cache"


def share_text(phase: PhaseRoof) -> str:
    if phase.share > 1:
        return f"{phase.roof}: above its roof (x{phase.share:.2f}), see the finding"
    interval = f" [{phase.low:.3f}, {phase.high:.3f}]" if phase.low is not None else " (1 run)"
    return f"{phase.roof} {phase.share:.3f}{interval}"


def roofs_lines(roofs: dict[str, ArmRoofs]) -> list[str]:
    if not roofs:
        return []
    lines = [
        "",
        "Share of the roof (the roof that binds, and the runs' geometric-mean share of it with its 95 % interval; "
        "roofs measured on the slot by omni host limits):",
        "",
        "| arm | decode | prefill | bytes per decoded token | decode step's working set |",
        "|---|---|---|---|---|",
    ]
    for arm, r in roofs.items():
        if r.note:
            lines.append(f"| {arm} | no roof: {r.note} | | | |")
            continue
        cells = [share_text(r.phases[p]) if p in r.phases else "-" for p in PHASES]
        size = f"{r.decode_bytes_per_token / 2**20:.2f} MiB" if r.decode_bytes_per_token else "-"
        lines.append(f"| {arm} | {cells[0]} | {cells[1]} | {size} | {memory_text(r)} |")
    findings = [f"- {arm}: {f}" for arm, r in roofs.items() for f in r.findings]
    if findings:
        lines += ["", "Above the roof (an assumption broke, the share is not a result):", *findings]
    return lines
