"""Across sweeps: a sweep against another (``omni compare``), each sweep of a
spec against the ones before it (nightly regressions, ``omni regressions``),
and the per-sweep medians the report's trend plots draw.

Two sweeps are not interleaved with each other, so what moved between them
is not cancelled: every interval here adds the between-sweep drift measured
for the arm's workload (:mod:`omni.history.calibration`), else the default. Verdicts
use the same rule as one sweep's (:func:`omni.report.verdicts.judge`). An arm's runs
are judged only against runs of the same hardware and engine env
(:mod:`omni.history.hardware`), unless asked otherwise (``across_hardware``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from omni.errors import OmniError
from omni.history.calibration import arm_calibrations
from omni.history.hardware import HARDWARE_COLUMNS, HardwareCheck, check_facts, check_hardware, hardware_facts
from omni.report.spec_copy import min_effects, primary_metrics, sweep_spec
from omni.report.states import arm_states, arm_swing, sweep_states, sweep_swings
from omni.report.summary import SweepSummary, check_metrics
from omni.report.verdicts import Judged, judge
from omni.report.void import void_arms, void_refusal
from omni.spec.settings import DEFAULT_PRIMARY_METRICS
from omni.stats.changepoints import MIN_SWEEPS, Shift, level_shifts
from omni.stats.verdicts import Adjustment, adjust_for_multiplicity
from omni.store.columns import COLUMNS_BY_NAME, metric_columns
from omni.store.reading import load_runs
from omni.store.reading import profiled as is_profiled
from omni.store.retract import SweepRows, ok_rows, without_retracted


@dataclass(frozen=True)
class SweepComparison:
    before: str
    after: str
    arms: tuple[str, ...]
    metrics: tuple[str, ...]
    judged: dict[tuple[str, str], Judged]
    config_changes: dict[str, str]
    excluded: int
    drift_sources: dict[tuple[str, str], str] = field(default_factory=dict)  # where each drift came from
    primary: tuple[str, ...] = ()  # the primary metrics (of ``after``'s spec), first in ``metrics``
    adjustment: Adjustment | None = None  # each metric's interval level (multiplicity)
    void: dict[str, str] = field(default_factory=dict)  # arm -> why it is VOID in either sweep
    # ("before" | "after", arm, metric) -> (Modes, Explanation): that sweep's runs of the arm in two states
    states: dict[tuple[str, str, str], tuple] = field(default_factory=dict)
    # likewise (Swing, Explanation): its runs differ beyond their iterations' noise
    swings: dict[tuple[str, str, str], tuple] = field(default_factory=dict)
    # arm -> what differs between the sweeps' runs of it (omni.history.hardware); a difference refuses its verdicts
    hardware: dict[str, HardwareCheck] = field(default_factory=dict)
    across_hardware: bool = False  # judged despite a difference of hardware (--across-hardware)


def compare_sweeps(
    results: Path,
    before: str,
    after: str,
    include_retracted: bool = False,
    metrics: list[str] | None = None,
    across_hardware: bool = False,
    before_rows: SweepRows | None = None,
) -> SweepComparison:
    """Each arm of ``after`` against the same-named arm of ``before`` (on
    ``metrics`` only, when given); an arm whose runs differ in hardware or
    engine env between the sweeps gets no verdict unless ``across_hardware``.
    ``before_rows``: ``before``'s rows as given (a results file read on its
    own, omni reproduce), not as ``results`` holds them."""
    a_ok, a_all, a_ex, a_prof = before_rows or ok_rows(results, before, include_retracted)
    b_ok, b_all, b_ex, b_prof = ok_rows(results, after, include_retracted)
    arms = [arm for arm in dict.fromkeys(b_all["arm"]) if arm in set(a_all["arm"])]
    if not arms:
        raise OmniError(f"sweeps {before} and {after} share no arm name; compare needs the same arms")
    spec = sweep_spec(results, after)
    measured = [m for m in metric_columns() if a_ok[m].notna().any() and b_ok[m].notna().any()]
    metrics = primary_metrics(spec, check_metrics(metrics, measured))
    adjustment = adjust_for_multiplicity(metrics, spec.primary_metrics if spec else DEFAULT_PRIMARY_METRICS)
    effects = min_effects(spec, metrics)
    void = {arm: f"{after}: {why}" for arm, why in void_arms(b_all, b_prof).items()}
    void |= {arm: f"{before}: {why}" for arm, why in void_arms(a_all, a_prof).items() if arm not in void}
    # two sweeps: interleaving cannot cancel what moved between them; the
    # drift measured for the arm's workload (after's, else before's), else the default
    cal_after, cal_before = arm_calibrations(results, b_all, arms), arm_calibrations(results, a_all, arms)
    calibrations = {arm: cal_after[arm] if cal_after[arm].drift else cal_before[arm] for arm in arms}
    drifts = {(arm, m): calibrations[arm].drift_estimate(m) for arm in arms for m in metrics}
    # a new CPU or engine moves every number by itself: no verdict across it unless asked
    hardware = {arm: check_hardware(a_ok[a_ok["arm"] == arm], b_ok[b_ok["arm"] == arm]) for arm in arms}
    refused = {arm: check.refusal() for arm, check in hardware.items() if not (check.same or across_hardware)}
    refused |= {arm: void_refusal(arm, why) for arm, why in void.items()}
    judged = {
        (arm, m): Judged(None, refused[arm])
        if arm in refused
        else judge(
            a_ok,
            b_ok,
            arm,
            arm,
            m,
            effects[m][0],
            drifts[(arm, m)][0],
            adjustment.confidence[m],
            drift_df=drifts[(arm, m)][1],
        )
        for arm in arms
        for m in metrics
    }
    states, swings = {}, {}
    for side, frame in (("before", a_ok), ("after", b_ok)):
        modes, found = sweep_states(frame, arms, adjustment.primary, effects)
        states |= {(side, *key): (modes[key], explained) for key, explained in found.items()}
        swung = sweep_swings(frame, arms, adjustment.primary, effects, found)
        swings |= {(side, *key): value for key, value in swung.items()}
    judged = {
        key: replace(j, bimodal=tuple(side for side in ("before", "after") if (side, *key) in states))
        for key, j in judged.items()
    }
    changes = {}
    for arm in arms:
        old = json.loads(a_all.loc[a_all["arm"] == arm, "arm_json"].iloc[0])
        new = json.loads(b_all.loc[b_all["arm"] == arm, "arm_json"].iloc[0])
        diff = _diff(old, new)
        if diff:
            changes[arm] = ", ".join(diff)
    sources = {(arm, m): source for (arm, m), (_, _, source) in drifts.items()}
    return SweepComparison(
        before,
        after,
        tuple(arms),
        tuple(metrics),
        judged,
        changes,
        a_ex + b_ex,
        sources,
        adjustment.primary,
        adjustment,
        {arm: why for arm, why in void.items() if arm in arms},
        states,
        swings,
        hardware,
        across_hardware,
    )


def _diff(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key} {a!r} -> {b!r}")
    return out


# --- nightly regressions ---


@dataclass(frozen=True)
class Change:
    """An arm's metric in one sweep against the sweeps before it, judged by
    the same rule as every verdict (:func:`omni.stats.verdicts.compare`) with the
    between-sweep drift added."""

    arm: str
    metric: str
    sweep_id: str
    kind: str  # regression | improvement
    ratio: float  # geometric mean of this sweep's runs over the history's
    ci_low: float
    ci_high: float
    drift: float
    drift_source: str
    median: float
    history_median: float
    history_sweeps: tuple[str, ...]
    run_ids: tuple[str, ...]
    history_run_ids: tuple[str, ...]
    # this sweep's runs of the arm were not steady on the metric: ("states", Modes, Explanation)
    # or ("swing", Swing, Explanation) of omni.report.states.arm_states / arm_swing; a change may be one disturbed run
    unsteady: tuple | None = None


@dataclass(frozen=True)
class Nightly:
    """The changes of every sweep of one spec, the sweep ids in time order,
    and which earlier sweeps were not history of a sweep's arm for a
    difference of hardware or engine env (kept, when ``across_hardware``)."""

    changes: list[Change]
    order: list[str]
    # (sweep judged, arm) -> {why (HardwareCheck.reason): earlier sweeps of its window that differ}
    differing: dict[tuple[str, str], dict[str, tuple[str, ...]]] = field(default_factory=dict)
    unknown: dict[str, tuple[str, ...]] = field(default_factory=dict)  # sweep -> facts its rows did not record
    across_hardware: bool = False
    # (arm, primary metric) -> where its per-sweep level shifted (omni.stats.changepoints), over the
    # sweeps on the newest sweep's hardware; an entry per series tested, empty where none shifted
    shifts: dict[tuple[str, str], tuple[Shift, ...]] = field(default_factory=dict)


def history_columns() -> list[str]:
    """What the nightly comparison and the trend plots read of every run."""
    spreads = [c for c in COLUMNS_BY_NAME if c.endswith(("_iter_sd_log", "_iter_ac1_log"))]
    return [
        "sweep_id",
        "sweep_name",
        "arm",
        "arm_json",
        "status",
        "profiled",
        "run_id",
        "host",
        "started_at",
        "pass_index",
        "error",
        "warnings",
        "iterations",
        "warning_rules",
        "mmap",
        *HARDWARE_COLUMNS,
        *spreads,
        *metric_columns(),
    ]


def spec_runs(results: Path, sweep_name: str, include_retracted: bool = False, ok: bool = True) -> pd.DataFrame:
    """The unretracted runs of every sweep of one spec name (``ok``: only
    the ok timed ones): only the columns the nightly comparison and the
    trend plots read."""
    frame = load_runs(results, columns=history_columns())
    frame = frame[frame["sweep_name"] == sweep_name]
    if ok:
        frame = frame[(frame["status"] == "ok") & ~is_profiled(frame)]
    return without_retracted(frame, results, include_retracted)[0]


def void_in_history(results: Path, sweep_name: str, include_retracted: bool = False) -> dict[tuple[str, str], str]:
    """(sweep id, arm) -> why the arm is VOID in that sweep, over every sweep of one spec name."""
    frame = spec_runs(results, sweep_name, include_retracted, ok=False)
    return {
        (sweep_id, arm): why
        for sweep_id, rows in frame.groupby("sweep_id")
        for arm, why in void_arms(rows[~is_profiled(rows)], rows[is_profiled(rows)]).items()
    }


def nightly_changes(
    results: Path,
    sweep_name: str,
    window: int = 10,
    min_history: int = 3,
    include_retracted: bool = False,
    across_hardware: bool = False,
) -> Nightly:
    """Each sweep's runs against the runs of up to ``window`` earlier sweeps
    of the same spec (at least ``min_history`` of them), per arm and metric.
    Of those, the sweeps whose runs of the arm differ in hardware or engine
    env (:mod:`omni.history.hardware`) are no history unless ``across_hardware``.

    A regression is a ``worse`` verdict whose interval reaches past the
    sweep's min_effect (not below_min_effect); an improvement the same for
    ``better``. The interval adds the drift measured for the arm's workload
    (omni calibrate --sweeps), else the default.
    """
    frame = spec_runs(results, sweep_name, include_retracted)
    void = void_in_history(results, sweep_name, include_retracted)
    return changes_in(frame, results, sweep_name, window, min_history, void, across_hardware)


def changes_in(
    frame: pd.DataFrame,
    results: Path,
    sweep_name: str,
    window: int = 10,
    min_history: int = 3,
    void: dict[tuple[str, str], str] | None = None,
    across_hardware: bool = False,
) -> Nightly:
    """:func:`nightly_changes` over rows already read (:func:`spec_runs`);
    the runs of a VOID arm of a sweep (``void``, :func:`void_in_history`)
    are neither judged nor history."""
    if frame.empty:
        raise OmniError(f"no ok runs of sweeps named {sweep_name!r} under {results}")
    if void:
        frame = frame[[(s, a) not in void for s, a in zip(frame["sweep_id"], frame["arm"])]]
    order = frame.groupby("sweep_id")["started_at"].min().sort_values().index.tolist()
    specs = {sweep_id: sweep_spec(results, sweep_id) for sweep_id in order}
    # the newest sweep's primary metrics first
    metrics = primary_metrics(
        specs[order[-1]] if order else None, [m for m in metric_columns() if frame[m].notna().any()]
    )
    # the newest configuration of each arm names its workload
    newest_first = frame.sort_values("started_at", ascending=False)
    calibrations = arm_calibrations(results, newest_first, list(dict.fromkeys(frame["arm"])))
    effects = {sweep_id: min_effects(spec, metrics) for sweep_id, spec in specs.items()}
    # each sweep's changes are judged on every metric at once: its spec's primary metrics and the adjusted rest
    levels = {
        sweep_id: adjust_for_multiplicity(metrics, spec.primary_metrics if spec else DEFAULT_PRIMARY_METRICS).confidence
        for sweep_id, spec in specs.items()
    }
    facts = {key: hardware_facts(rows) for key, rows in frame.groupby(["sweep_id", "arm"])}
    differing: dict[tuple[str, str], dict[str, dict[str, None]]] = {}
    changes = []
    for (arm, metric), group in _by_arm_metric(frame, metrics):
        per_sweep = {s: g for s, g in group.groupby("sweep_id")}
        sweeps = [s for s in order if s in per_sweep]
        drift, drift_df, source = calibrations[arm].drift_estimate(metric)
        for i, sweep_id in enumerate(sweeps):
            history = _history(sweeps[max(0, i - window) : i], sweep_id, arm, facts, across_hardware, differing)
            if len(history) < min_history:
                continue
            past = pd.concat([per_sweep[s] for s in history])
            current = per_sweep[sweep_id]
            effect, level = effects[sweep_id][metric][0], levels[sweep_id][metric]
            judged = judge(past, current, arm, arm, metric, effect, drift, level, drift_df=drift_df)
            c = judged.comparison
            if judged.refused or c is None or c.verdict not in ("better", "worse") or c.below_min_effect:
                continue
            modes, states = arm_states(current, arm, metric, effect)
            swing, swung = arm_swing(current, arm, metric, effect) if states is None else (None, None)
            unsteady = ("states", modes, states) if states else ("swing", swing, swung) if swung else None
            changes.append(
                Change(
                    arm,
                    metric,
                    sweep_id,
                    "regression" if c.verdict == "worse" else "improvement",
                    c.ratio,
                    c.ci_low,
                    c.ci_high,
                    drift,
                    source,
                    float(current[metric].median()),
                    float(past[metric].median()),
                    tuple(history),
                    tuple(current["run_id"]),
                    tuple(past["run_id"]),
                    unsteady,
                )
            )
    primary = set(specs[order[-1]].primary_metrics if specs[order[-1]] else DEFAULT_PRIMARY_METRICS)
    shifts = {
        (arm, metric): _shifts(group, order, arm, metric, facts, across_hardware, effects[order[-1]][metric][0])
        for (arm, metric), group in _by_arm_metric(frame, metrics)
        if metric in primary
    }
    return Nightly(
        changes,
        order,
        {key: {why: tuple(s) for why, s in reasons.items()} for key, reasons in differing.items()},
        _unrecorded(facts, order),
        across_hardware,
        {key: found for key, found in shifts.items() if found is not None},
    )


def _shifts(group, order, arm, metric, facts, across, effect) -> tuple[Shift, ...] | None:
    """Level shifts of ``arm``'s per-sweep geometric mean of ``metric`` over the
    sweeps on its newest sweep's hardware (all, when ``across``); None where
    too few sweeps make a series (omni.stats.changepoints.MIN_SWEEPS)."""
    per_sweep = {s: g[metric] for s, g in group.groupby("sweep_id")}
    sweeps = [s for s in order if s in per_sweep and (per_sweep[s] > 0).all()]
    if not sweeps:
        return None
    newest = facts[(sweeps[-1], arm)]
    sweeps = [s for s in sweeps if across or check_facts(facts[(s, arm)], newest).same]
    if len(sweeps) < MIN_SWEEPS:
        return None
    levels = [math.exp(float(np.log(per_sweep[s].to_numpy(dtype=float)).mean())) for s in sweeps]
    return level_shifts(levels, sweeps, effect)


def _history(earlier: list[str], sweep_id: str, arm: str, facts: dict, across: bool, differing: dict) -> list[str]:
    """Of the ``earlier`` sweeps, those whose runs of ``arm`` ran on the
    hardware and engine env of ``sweep_id``'s (all, when ``across``): a new
    CPU would read as a regression. Those that differ go into ``differing``."""
    history = []
    for other in earlier:
        check = check_facts(facts[(other, arm)], facts[(sweep_id, arm)])
        if not check.same:
            differing.setdefault((sweep_id, arm), {}).setdefault(check.reason(), {})[other] = None
        if check.same or across:
            history.append(other)
    return history


def _unrecorded(facts: dict[tuple[str, str], dict[str, tuple]], order: list[str]) -> dict[str, tuple[str, ...]]:
    """Sweep -> the hardware facts some arm's runs of it did not record."""
    missing: dict[str, dict[str, None]] = {}
    for (sweep_id, _), found in facts.items():
        missing.setdefault(sweep_id, {}).update(dict.fromkeys(fact for fact, values in found.items() if not values))
    return {s: tuple(missing[s]) for s in order if missing.get(s)}


def sweep_history(results: Path, summary: SweepSummary, include_retracted: bool = False) -> dict:
    """Per-sweep medians of every sweep of the same spec name up to this one,
    and the nightly changes among them (for the report's trend plots)."""
    try:
        frame = spec_runs(results, summary.sweep_name, include_retracted)
        nightly = changes_in(frame, results, summary.sweep_name)
    except OmniError:
        return {"points": {}, "changes": []}
    changes, order = nightly.changes, nightly.order
    if len(order) < 2:
        return {"points": {}, "changes": []}
    order = order[: order.index(summary.sweep_id) + 1] if summary.sweep_id in order else order
    points = {}
    for arm in summary.arms:
        for metric in summary.metrics:
            rows = frame[frame["arm"] == arm]
            medians = rows.groupby("sweep_id")[metric].median()
            points[(arm, metric)] = [
                (s, float(medians[s]), summary.floors[metric][0])
                for s in order
                if s in medians and not math.isnan(medians[s])
            ]
    return {"points": points, "changes": [c for c in changes if c.sweep_id in order]}


def _by_arm_metric(frame: pd.DataFrame, metrics: list[str]):
    for arm, rows in frame.groupby("arm"):
        for metric in metrics:
            spread = [c for c in (f"{metric}_iter_sd_log", f"{metric}_iter_ac1_log", "iterations") if c in rows]
            yield (
                (arm, metric),
                rows.loc[rows[metric].notna(), ["sweep_id", "run_id", "arm", "warning_rules", "mmap", metric, *spread]],
            )


# --- a release the nightly follows, against the pinned one ---


@dataclass(frozen=True)
class ReleaseChange:
    """An arm on an env that follows the newest release, worse than the
    sweep's baseline beyond min_effect on a primary metric, in the same sweep."""

    arm: str
    metric: str
    ratio: float
    ci_low: float
    ci_high: float
    pins: str  # the release the arm ran (engine_env_pins)
    baseline: str
    baseline_pins: str

    def describe(self) -> str:
        return (
            f"- {self.arm} ({self.pins}) {self.metric}: x{self.ratio:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}] "
            f"of {self.baseline} ({self.baseline_pins})"
        )


def release_regressions(results: Path, sweep_id: str) -> list[ReleaseChange]:
    """The sweep's arms whose env follows the newest release (``newest:`` in
    envs.yaml or the spec's envs:), judged worse than the baseline beyond
    min_effect on a primary metric: the release that brought the change is
    in their rows."""
    from omni import REPO_ROOT
    from omni.report.summary import summarize_sweep
    from omni.spec.envs import declared_envs
    from omni.stats.controls import untrusted

    spec = sweep_spec(results, sweep_id)
    if spec is None:
        return []
    declared = declared_envs(REPO_ROOT, spec.envs)
    envs = {a.name: a.engine_env or declared.defaults.get(a.engine) for a in spec.arms}
    following = {arm for arm, env in envs.items() if env in declared.envs and declared.envs[env].newest}
    if not following:
        return []
    summary = summarize_sweep(results, sweep_id)
    rows = load_runs(results, sweep_id=sweep_id, columns=["arm", "engine_env_pins", "engine_env_key"])
    pins = rows.dropna(subset=["engine_env_pins"]).groupby("arm")["engine_env_pins"]
    pins = pins.agg(lambda s: " / ".join(sorted(set(s))))
    keys = rows.dropna(subset=["engine_env_key"]).groupby("arm")["engine_env_key"].agg(frozenset)
    found = []
    for arm in sorted(following - {summary.baseline}):
        if arm in keys and summary.baseline in keys and keys[arm] == keys[summary.baseline]:
            continue  # the newest release is the pinned one's build: an A/A pair, nothing to name
        for metric in summary.primary:
            judged = summary.judged.get((arm, metric))
            comp = judged.comparison if judged else None
            if comp is None or comp.verdict != "worse" or comp.below_min_effect or untrusted(summary, arm, metric):
                continue
            found.append(
                ReleaseChange(
                    arm,
                    metric,
                    comp.ratio,
                    comp.ci_low,
                    comp.ci_high,
                    pins.get(arm, "?"),
                    summary.baseline,
                    pins.get(summary.baseline, "?"),
                )  # fmt: skip
            )
    return found
