"""VOID arms: arms whose runs prove they did not run what they claim (a dense
output head under a quantized claim), and what a verdict of or against one
says instead of a verdict.
"""

from __future__ import annotations

import pandas as pd

from omni.measure.heads import DENSE_HEAD, DENSE_HEAD_ERROR
from omni.measure.ops import HEAD_RULE


def void_arms(*frames: pd.DataFrame) -> dict[str, str]:
    """Arms that did not run what they claim: arm -> why. A run is proof when
    the engine loaded a dense output head under a quantized claim (the
    dense_head rule, omni.measure.heads: any run, profiled or not) or its profile
    shows one (the bf16-head rule, omni.measure.ops). The arm's other runs ran the
    same configuration, so every number of the arm is void, not only the
    proving rows'; the first proof found (timed runs before profiled passes,
    in pass order) is the reason given."""
    void: dict[str, str] = {}
    for frame in frames:
        if frame.empty:
            continue
        for row in frame.sort_values("pass_index").to_dict("records"):
            why = _void_reason(row)
            if why and row["arm"] not in void:
                kind = "profiled pass" if row.get("profiled") else "pass"
                void[row["arm"]] = f"{kind} {row['pass_index']}: {why}"
    return void


def _void_reason(row: dict) -> str | None:
    error = row.get("error") if isinstance(row.get("error"), str) else ""
    if row.get("status") == "invalid" and error.startswith((HEAD_RULE, DENSE_HEAD_ERROR)):
        return error
    rules = row.get("warning_rules")
    rules = [] if rules is None or (isinstance(rules, float) and pd.isna(rules)) else list(rules)
    if DENSE_HEAD in rules:  # invalid first for another reason: the head's warning still proves it
        return row["warnings"][rules.index(DENSE_HEAD)]
    return None


def void_refusal(arm: str, why: str) -> str:
    """What a verdict of (or against) a VOID arm says instead of a verdict."""
    return f"VOID ({void_rule(why)}): {arm}'s runs are kept out of every verdict: {why}"


def void_rule(why: str) -> str:
    """The rule's name in a void reason: ``bf16 head`` of ``profiled pass 0:
    bf16 head: the arm claims …`` (the reason itself when it has no such part)."""
    parts = [p.strip() for p in why.split(":")]
    return next((p for p in parts if p and not p.startswith(("profiled pass", "pass "))), why)
