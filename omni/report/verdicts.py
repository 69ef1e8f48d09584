"""One arm judged against another on one metric, over a sweep's rows: the
comparison of :func:`omni.stats.verdicts.compare`, with the rows' warnings,
the memory and compile-cache refusals, a memory figure's one-page floor, the
runs' iteration noise and the slot as a blocking factor.

One sweep's verdicts against its baseline (:mod:`omni.report.summary`) and
verdicts across sweeps (:mod:`omni.history.compare`) both use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from omni.history.calibration import metric_kind
from omni.measure.kv import memory_refusal, provisioning_of
from omni.stats.verdicts import Companion, Comparison, Prior, compare, within_run_variance
from omni.store.columns import COLUMNS_BY_NAME

# rows carry these rules from the runner; a comparison over such rows warns
ROW_RULES = (
    "context_len_unset",
    "kv_cache_default",
    "kv_overprovisioned",
    "prompt_len_le_1",
    "forced_busy",
    "teardown_crash",
    "placement_simulated",
    "numa_not_steady",
    "interference",
    "repeat_faster",
    "kernel_fallback",
)


# The least a memory figure's run is taken to move in a verdict: one page.
# Memory is counted in pages and can repeat to the page run after run;
# without a floor two identical values a side gave x1.000 [1.000, 1.000],
# and one 4 KiB page more a "worse" verdict. A page of spread a run keeps
# that from happening at few runs; over many runs a steady page apart is a
# real difference, and reads below min_effect.
MEMORY_RESOLUTION_BYTES = 4096
BYTES_PER_UNIT = {"MiB": 2**20, "B": 1}


def memory_floor(metric: str, values: list[float]) -> float:
    """One page, relative to the metric's median value (0 for a metric that is not memory)."""
    unit = COLUMNS_BY_NAME[metric].unit
    positive = [v for v in values if v > 0]
    if unit not in BYTES_PER_UNIT or not positive:
        return 0.0
    return MEMORY_RESOLUTION_BYTES / (float(np.median(positive)) * BYTES_PER_UNIT[unit])


# the blocking factor of verdicts within one sweep: passes rotate arms over slots (omni.run.plan)
BLOCK = "slot_index"


@dataclass(frozen=True)
class Judged:
    """One arm's comparison on one metric, or why there is none."""

    comparison: Comparison | None
    refused: str | None = None
    warnings: tuple[str, ...] = ()
    bimodal: tuple[
        str, ...
    ] = ()  # the sides ("arm", "baseline"; "before", "after") in two states here (omni.stats.modes)


def arm_values(frame: pd.DataFrame, arm: str, metric: str) -> list[float]:
    return [float(v) for v in frame.loc[frame["arm"] == arm, metric].dropna()]


def _row_warnings(frame: pd.DataFrame, arm: str) -> list[str]:
    rules = [
        r for rules in frame.loc[frame["arm"] == arm, "warning_rules"] for r in (rules if rules is not None else [])
    ]
    return [f"{arm}: {rules.count(r)} run(s) with {r}" for r in dict.fromkeys(rules) if r in ROW_RULES]


def _provisioning(frame: pd.DataFrame, arm: str) -> list:
    return [provisioning_of(row) for row in frame.loc[frame["arm"] == arm].to_dict("records")]


def mixed_compile_cache(frame: pd.DataFrame, arm: str) -> str | None:
    """``arm``'s runs counted by compile_cache state when they started from more
    than one ("2 loaded, 1 compiled"), else None: such a load_s is bimodal in
    the cache's history, not noise of the arm."""
    if "compile_cache" not in frame.columns:
        return None
    states = frame.loc[frame["arm"] == arm, "compile_cache"].dropna().value_counts()
    return ", ".join(f"{n} {state}" for state, n in states.items()) if len(states) > 1 else None


def judge(
    base: pd.DataFrame,
    other: pd.DataFrame,
    base_arm: str,
    arm: str,
    metric: str,
    min_effect: float,
    drift: float = 0.0,
    confidence: float = 0.95,
    block: str | None = None,
    drift_df: float = math.inf,
    sweep_arms: tuple[str, ...] = (),
    control: str | None = None,
    priors: Mapping[str, Prior] | None = None,
) -> Judged:
    """Compare ``arm`` (rows ``other``) with ``base_arm`` (rows ``base``) on one
    metric; ``drift`` > 0 when the two come from different sweeps;
    ``confidence``: the interval's level (:func:`omni.stats.verdicts.adjust_for_multiplicity`);
    ``block``: the column whose value is a blocking factor (:data:`BLOCK`);
    ``drift_df``: the degrees of freedom the drift was measured from (infinite: taken as known).
    A memory metric's runs are given a least sd of one page (:func:`memory_floor`):
    a figure that repeats to the page has no spread to see, and none would
    make an interval of width zero.
    ``sweep_arms``: the sweep's other arms (rows in ``base``), whose runs
    enter a blocked fit (:func:`omni.stats.sweepfit.fit_contrast`);
    ``control``: the baseline's A/A replica, sharing its variance; ``priors``:
    arm -> its calibration's (variance, df) on this host, where it has one."""
    priors = priors or {}
    warnings = tuple(_row_warnings(base, base_arm) + _row_warnings(other, arm))
    if metric_kind(metric) == "memory":
        # like for like or not at all: KV pools near need, same engine, mmap mode and KV ratio
        if why := memory_refusal(_provisioning(base, base_arm), _provisioning(other, arm), base_arm, arm):
            return Judged(None, f"refused: {why}", warnings)
    if metric == "load_s":
        for rows, name in ((base, base_arm), (other, arm)):
            if mixed := mixed_compile_cache(rows, name):
                return Judged(
                    None,
                    f"refused: {name}'s runs started from different compile cache states ({mixed}): "
                    "its load_s measures vLLM's cache, not the arm; warm each slot's cache first, or "
                    "give each run its own VLLM_CACHE_ROOT",
                    warnings,
                )
    result = compare(
        arm_values(base, base_arm, metric),
        arm_values(other, arm, metric),
        better=COLUMNS_BY_NAME[metric].better,
        min_effect=min_effect,
        drift=drift,
        drift_df=drift_df,
        floor=memory_floor(metric, arm_values(base, base_arm, metric) + arm_values(other, arm, metric)),
        confidence=confidence,
        within=(_within(base, base_arm, metric), _within(other, arm, metric)),
        blocks=(_blocks(base, base_arm, metric, block), _blocks(other, arm, metric, block)) if block else None,
        companions=tuple(
            Companion(
                arm_values(base, name, metric),
                _blocks(base, name, metric, block),
                name == control,
                _within(base, name, metric),
                priors.get(name),
            )
            for name in sweep_arms
            if block and name not in (base_arm, arm)
        ),  # fmt: skip
        replica=arm == control,
        priors=(priors.get(base_arm), priors.get(arm)),
    )
    return Judged(result, None, warnings)


def _blocks(frame: pd.DataFrame, arm: str, metric: str, block: str) -> list:
    """The ``block`` value of each of :func:`arm_values`' values, in its order (None where unknown)."""
    rows = frame.loc[(frame["arm"] == arm) & frame[metric].notna()]
    if block not in rows.columns:
        return [None] * len(rows)
    return [None if pd.isna(v) else v for v in rows[block]]


def _within(frame: pd.DataFrame, arm: str, metric: str) -> float:
    """Variance of one run's log value implied by its iterations (0 when the
    metric is not iterated or the rows predate iterations)."""
    spread = f"{metric}_iter_sd_log"
    if spread not in frame.columns or "iterations" not in frame.columns:
        return 0.0
    rows = frame.loc[(frame["arm"] == arm) & frame[metric].notna()]
    return within_run_variance(rows[spread].tolist(), rows["iterations"].tolist())
