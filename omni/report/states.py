"""Whether an arm's runs fall into two states (:mod:`omni.stats.modes`) or
differ beyond their iterations' noise (:mod:`omni.stats.swing`), and what
telemetry sets the worse runs apart: per arm and primary metric of a sweep.
"""

from __future__ import annotations

import pandas as pd

from omni.history.calibration import metric_kind
from omni.stats.modes import Explanation, Modes, detect_modes, explain_modes
from omni.stats.swing import Swing, iteration_noise, runs_swing
from omni.store.columns import COLUMNS_BY_NAME


def arm_states(frame: pd.DataFrame, arm: str, metric: str, min_swing: float) -> tuple[Modes, Explanation | None]:
    """Whether ``arm``'s runs (rows ``frame``) fall into two states on
    ``metric`` (:func:`omni.stats.modes.detect_modes`, states closer than
    ``min_swing`` not reported), and if so what telemetry separates the
    worse state's runs from the better's (:func:`omni.stats.modes.explain_modes`)."""
    rows = frame.loc[(frame["arm"] == arm) & frame[metric].notna()]
    ids = rows["run_id"].astype(str).tolist() if "run_id" in rows.columns else None
    modes = detect_modes(rows[metric].astype(float).tolist(), ids, min_swing)
    if not modes.found:
        return modes, None
    return modes, _explain(rows, metric, modes.clusters)


def _explain(rows: pd.DataFrame, metric: str, clusters, min_known: int = 2) -> Explanation:
    """What telemetry separates the worse cluster's rows from the better's."""
    records = rows.to_dict("records")
    low, high = ([records[i] for i in c.indices] for c in clusters)
    worse, better = (low, high) if COLUMNS_BY_NAME[metric].better == "higher" else (high, low)
    labels = ("larger", "smaller") if metric_kind(metric) == "memory" else ("slow", "fast")
    return explain_modes(worse, better, labels, min_known)


def arm_swing(frame: pd.DataFrame, arm: str, metric: str, min_swing: float) -> tuple[Swing, Explanation | None]:
    """Whether ``arm``'s runs differ by more than their own iterations'
    noise implies, their lag-1 correlation allowed for
    (:func:`omni.stats.swing.runs_swing`; rows before v14 have none, and are not
    tested), and if so what telemetry sets the worse runs apart (one run a
    side suffices: the chance that an unrelated column does so is in the text)."""
    rows = frame.loc[(frame["arm"] == arm) & frame[metric].notna()]
    ids = rows["run_id"].astype(str).tolist() if "run_id" in rows.columns else None
    columns = (f"{metric}_iter_sd_log", f"{metric}_iter_ac1_log", "iterations")
    within = None
    if all(c in rows.columns for c in columns):
        within = iteration_noise(*(_floats(rows[c]) for c in columns))
    swing = runs_swing(rows[metric].astype(float).tolist(), within, ids, min_swing)
    if not swing.found:
        return swing, None
    return swing, _explain(rows, metric, swing.clusters, min_known=1)


def _floats(column: pd.Series) -> list[float | None]:
    return [None if pd.isna(v) else float(v) for v in column]


def sweep_states(frame: pd.DataFrame, arms, metrics, effects) -> tuple[dict, dict]:
    """(modes, states) of :func:`arm_states` per arm and metric: ``metrics``
    are the primaries only, each tested at 5 %: on all 16 an arm would be
    "bimodal" on some metric most of the time."""
    modes, states = {}, {}
    for arm in arms:
        for metric in metrics:
            modes[(arm, metric)], explained = arm_states(frame, arm, metric, effects[metric][0])
            if explained is not None:
                states[(arm, metric)] = explained
    return modes, states


def sweep_swings(frame: pd.DataFrame, arms, metrics, effects, states: dict) -> dict:
    """(arm, metric) -> (Swing, Explanation) where the arm's runs differ
    beyond their iterations' noise (:func:`arm_swing`) and are not already
    two states: the primary metrics, each at 1 %."""
    found = {}
    for arm in arms:
        for metric in metrics:
            if (arm, metric) in states:
                continue
            swing, explained = arm_swing(frame, arm, metric, effects[metric][0])
            if explained is not None:
                found[(arm, metric)] = (swing, explained)
    return found
