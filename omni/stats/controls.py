"""The checks a sweep runs on itself: the A/A control (the baseline's
replica, same prompts) and the prompt-seed audit (the baseline on other
prompts). Neither can differ from the baseline on an honest host; when one
does, the verdicts it touches are marked untrustworthy or the audit fails,
with the interval that says by how much.
"""

from __future__ import annotations

import json

import pandas as pd

from omni.report.units import ratio_interval


def control_of(spec, arms: list[str]) -> str | None:
    """The A/A control arm of the sweep's spec copy, when it has runs."""
    name = spec.control_arm if spec is not None else None
    return name if name in arms else None


INSIDE_MIN_EFFECT = "inside min_effect"  # the mark of a control failure that leaves larger effects standing


def untrusted(summary, arm: str, metric: str) -> bool:
    """Whether ``arm``'s verdict on ``metric`` falls to the control: every
    verdict when the control differed beyond min_effect; when it differed by
    less, only verdicts that are themselves below min_effect (or
    equivalent): an effect beyond min_effect stands, as the warning says."""
    why = summary.untrusted.get(metric)
    if why is None:
        return False
    if INSIDE_MIN_EFFECT not in why:
        return True
    judged = summary.judged.get((arm, metric))
    c = judged.comparison if judged else None
    return c is None or c.verdict not in ("better", "worse") or c.below_min_effect


def control_failures(judged: dict, control: str, baseline: str, metrics: list[str]) -> dict[str, str]:
    """metric -> why its verdicts are untrustworthy: the control, the
    baseline's replica, came out better or worse than the baseline by an
    interval that reaches past min_effect. A/A cannot differ; when it does,
    the host moved under the sweep by as much as the effects that matter.
    (A control difference wholly inside +-min_effect is noted, not flagged:
    it cannot turn an effect that matters into none or the reverse.)"""
    out = {}
    for metric in metrics:
        j = judged.get((control, metric))
        c = j.comparison if j else None
        if c is None or c.verdict not in ("better", "worse"):
            continue
        seen = f"x{c.ratio:.3f} {ratio_interval(c.ci_low, c.ci_high)}"
        if c.below_min_effect:
            out[metric] = (
                f"the A/A control {control} differs from {baseline} by {seen}, {INSIDE_MIN_EFFECT} "
                f"{c.min_effect:.0%}: verdicts below min_effect on it are not to be trusted"
            )
        else:
            out[metric] = (
                f"the A/A control {control} came out {c.verdict} than its own replica {baseline}: "
                f"{seen} beyond min_effect {c.min_effect:.0%}; the host was not stable during this "
                "sweep, so no verdict on this metric holds; rerun it"
            )
    return out


def seed_replicas(frame: pd.DataFrame, baseline: str | None, arms: list[str]) -> list[str]:
    """The arms that are the baseline on other prompts: its canonical arm but
    for name and a prompt_seed of their own (arms/audit.yaml; the A/A
    control, same prompts, is control_failures')."""

    def split(arm: str) -> tuple[dict, int] | None:
        texts = frame.loc[frame["arm"] == arm, "arm_json"].dropna()
        if texts.empty:
            return None
        fields = json.loads(str(texts.iloc[0]))
        return {k: v for k, v in fields.items() if k not in ("name", "prompt_seed")}, fields.get("prompt_seed", 0)

    base = split(baseline) if baseline else None
    if base is None:
        return []
    return [arm for arm in arms if (other := split(arm)) is not None and other[0] == base[0] and other[1] != base[1]]


def prompt_audit(judged: dict, replicas: list[str], baseline: str | None, metrics: list[str]) -> list[str]:
    """The audit rerun across runs: the baseline on other prompts cannot be
    better or worse beyond min_effect (after MLPerf's audit tests; a dense
    model's cost does not depend on which tokens it reads). When it is, the
    host moved, or the engine's speed depends on the prompts.

    Failed only when the whole interval lies beyond +-min_effect, not when it
    merely excludes 1: the audit checks every metric at once, and at about 4 %
    A/A false positives per metric (tests/unit/test_stats.py) "excludes 1" would
    condemn an honest arm in about one audit of six on correlated metrics."""
    out = []
    for arm in replicas:
        for metric in metrics:
            c = judged[(arm, metric)].comparison if (arm, metric) in judged else None
            if c is not None and c.verdict in ("better", "worse") and beyond(c):
                out.append(
                    f"prompt_seed audit failed: {arm}, the baseline {baseline} on other prompts, came out "
                    f"{c.verdict} on {metric}: x{c.ratio:.3f} {ratio_interval(c.ci_low, c.ci_high)} beyond "
                    f"min_effect {c.min_effect:.0%}"
                )
    return out


def beyond(c) -> bool:
    """The whole interval lies outside +-min_effect (on the log scale, as the verdicts' margin)."""
    return c.ci_low > 1 + c.min_effect or c.ci_high < 1 / (1 + c.min_effect)
