"""One sweep's conclusions: per-arm summaries, verdicts against the baseline
and the live A/A control, the audits and warnings that qualify them, and the
provenance a summary carries.

This reads a sweep's rows (:func:`omni.store.retract.ok_rows`: retracted runs are
left out unless asked for, and every summary says how many it left out), its
spec copy and the calibrations of its workloads (:mod:`omni.history.calibration`);
the arithmetic is :mod:`omni.stats.verdicts`, conclusions across sweeps are
:mod:`omni.history.compare`'s, and the Markdown/JSON/HTML forms :mod:`omni.report.markdown`'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from omni.errors import OmniError
from omni.history.calibration import NONE, arm_calibrations, metric_kind, noise_floor
from omni.host.conditions import changed_conditions
from omni.measure.heads import DENSE_HEAD, DENSE_HEAD_ERROR
from omni.measure.kv import memory_refusal, provisioning_of
from omni.measure.ops import HEAD_RULE, STEP_KINDS
from omni.serving.summary import ServingSummary, serving_summary
from omni.spec import load_spec
from omni.spec.settings import DEFAULT_PRIMARY_METRICS
from omni.stats.controls import control_failures, control_of, prompt_audit, seed_replicas, untrusted
from omni.stats.intervals import pooled_log_sd
from omni.stats.modes import Explanation, Modes, detect_modes, explain_modes
from omni.stats.sequential import look_levels, planner
from omni.stats.swing import Swing, iteration_noise, runs_swing
from omni.stats.verdicts import (
    DEFAULT_FLOORS,
    DEFAULT_MIN_EFFECT,
    Adjustment,
    Comparison,
    Summary,
    adjust_for_multiplicity,
    compare,
    summarize,
    within_run_variance,
)
from omni.store.columns import COLUMNS_BY_NAME, metric_columns
from omni.store.dataset import load_ops, load_runs, unreadable_under
from omni.store.dataset import profiled as is_profiled
from omni.store.objstore import local_copy, results_root
from omni.store.retract import SweepRows, ok_rows, without_retracted

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


def default_floor(metric: str) -> float:
    return DEFAULT_FLOORS[metric_kind(metric)]


# --- rows ---


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


def sweep_ops(results: Path, sweep_id: str, steps: str = "decode", include_retracted: bool = False):
    """(ops of the sweep's unretracted profiled runs, their run rows): the ops of
    steps of kind ``steps`` (omni.measure.ops.STEP_KINDS), each with its run's status."""
    if steps not in STEP_KINDS:
        raise OmniError(f"--steps {steps!r}: use one of {', '.join(STEP_KINDS)}")
    runs = load_runs(results, sweep_id=sweep_id)
    if runs.empty:
        raise OmniError(f"no rows for sweep {sweep_id!r} under {results_root(results) / 'runs'}")
    runs = without_retracted(runs[is_profiled(runs)], results, include_retracted)[0].sort_values("order_index")
    if runs.empty:
        raise OmniError(f"sweep {sweep_id} has no profiled run: give an arm profile: {{steps: 16}} to get some")
    ops = load_ops(results, sweep_id)
    ops = ops[ops["run_id"].isin(runs["run_id"])]
    if steps != "all":
        ops = ops[ops["step_kind"] == steps]
    status = dict(zip(runs["run_id"], runs["status"]))
    return ops.assign(status=ops["run_id"].map(status)), runs


def sweep_spec(results: Path, sweep_id: str):
    """The sweep's own spec copy (results/sweeps/<id>/spec.*), or None."""
    copies = sorted((results_root(results) / "sweeps" / sweep_id).glob("spec.*"))
    return load_spec(local_copy(results, copies[0])).sweep if copies else None


def baseline_of(spec, arms: list[str]) -> str | None:
    """The baseline arm of the sweep's own spec copy (:func:`sweep_spec`); else the first arm."""
    if spec is not None and spec.baseline_arm in arms:
        return spec.baseline_arm
    return arms[0] if arms else None


def min_effects(spec, metrics: list[str]) -> dict[str, tuple[float, str]]:
    """metric -> (smallest effect that matters, where it came from): the
    ``min_effect`` of the sweep's spec copy (per metric, else its default),
    else omni's default."""
    given = spec.min_effect if spec is not None else None
    given = {"default": given} if isinstance(given, (int, float)) else (given or {})
    out = {}
    for metric in metrics:
        if metric in given:
            out[metric] = (float(given[metric]), f"spec min_effect.{metric}")
        elif "default" in given:
            out[metric] = (float(given["default"]), "spec min_effect")
        else:
            out[metric] = (DEFAULT_MIN_EFFECT[metric_kind(metric)], "default")
    return out


def primary_metrics(spec, metrics: list[str]) -> list[str]:
    """The sweep spec copy's primary metrics (else omni's default) that have
    values here, in the spec's order, then the other ``metrics``: the order
    of every view."""
    named = spec.primary_metrics if spec is not None else DEFAULT_PRIMARY_METRICS
    return [m for m in named if m in metrics] + [m for m in metrics if m not in named]


# the blocking factor of verdicts within one sweep: passes rotate arms over slots (omni.run.plan)
BLOCK = "slot_index"


# --- a sweep ---


@dataclass(frozen=True)
class Judged:
    """One arm's comparison on one metric, or why there is none."""

    comparison: Comparison | None
    refused: str | None = None
    warnings: tuple[str, ...] = ()
    bimodal: tuple[
        str, ...
    ] = ()  # the sides ("arm", "baseline"; "before", "after") in two states here (omni.stats.modes)


@dataclass(frozen=True)
class SweepSummary:
    sweep_id: str
    sweep_name: str
    baseline: str | None
    arms: tuple[str, ...]
    metrics: tuple[str, ...]
    floors: dict[str, tuple[float, str]]
    min_effects: dict[str, tuple[float, str]]
    cells: dict[tuple[str, str], Summary]
    judged: dict[tuple[str, str], Judged]  # arm != baseline
    runs: dict[str, int]
    ok: dict[str, int]
    excluded: int
    warnings: tuple[str, ...] = field(default_factory=tuple)
    profiled: int = 0  # profiled passes, kept out of every verdict (omni ops reads them)
    void: dict[str, str] = field(default_factory=dict)  # arm -> why its profile voids all its numbers
    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    calibrations: dict[str, str] = field(default_factory=dict)  # arm -> the calibration of its workload, or "none"
    provenance: dict = field(default_factory=dict)  # sweep-wide and per-arm facts (:func:`sweep_provenance`)
    control: str | None = None  # the A/A control arm, a replica of the baseline
    untrusted: dict[str, str] = field(default_factory=dict)  # metric -> why its verdicts are not to be trusted
    # a replicated fleet sweep: each host's own summary (arms judged within the
    # host); judged then says, per arm and metric, whether the effect holds on every host
    hosts: dict[str, SweepSummary] = field(default_factory=dict)
    primary: tuple[str, ...] = ()  # the spec's primary metrics that have values, first in ``metrics``
    adjustment: Adjustment | None = None  # each metric's interval level (multiplicity)
    serving: ServingSummary | None = None  # per-level verdicts and capacity of serving arms (omni.serving.summary)
    # per arm and primary metric: whether its runs fall into two states (omni.stats.modes) ...
    modes: dict[tuple[str, str], Modes] = field(default_factory=dict)
    # ... and, where they do, the telemetry that separates them
    states: dict[tuple[str, str], Explanation] = field(default_factory=dict)
    # where an arm's runs differ beyond their iterations' noise (not two states): the test and what sets them apart
    swings: dict[tuple[str, str], tuple[Swing, Explanation]] = field(default_factory=dict)


def _values(frame: pd.DataFrame, arm: str, metric: str) -> list[float]:
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
) -> Judged:
    """Compare ``arm`` (rows ``other``) with ``base_arm`` (rows ``base``) on one
    metric; ``drift`` > 0 when the two come from different sweeps;
    ``confidence``: the interval's level (:func:`omni.stats.verdicts.adjust_for_multiplicity`);
    ``block``: the column whose value is a blocking factor (:data:`BLOCK`);
    ``drift_df``: the degrees of freedom the drift was measured from (infinite: taken as known).
    A memory metric's runs are given a least sd of one page (:func:`memory_floor`):
    a figure that repeats to the page has no spread to see, and none would
    make an interval of width zero."""
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
        _values(base, base_arm, metric),
        _values(other, arm, metric),
        better=COLUMNS_BY_NAME[metric].better,
        min_effect=min_effect,
        drift=drift,
        drift_df=drift_df,
        floor=memory_floor(metric, _values(base, base_arm, metric) + _values(other, arm, metric)),
        confidence=confidence,
        within=(_within(base, base_arm, metric), _within(other, arm, metric)),
        blocks=(_blocks(base, base_arm, metric, block), _blocks(other, arm, metric, block)) if block else None,
    )
    return Judged(result, None, warnings)


def _blocks(frame: pd.DataFrame, arm: str, metric: str, block: str) -> list:
    """The ``block`` value of each of :func:`_values`' values, in its order (None where unknown)."""
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


def _mark_bimodal(judged: Judged, key: tuple[str, str], baseline: str | None, states: dict) -> Judged:
    """``judged`` marked with which of its two arms ran in two states on its metric."""
    arm, metric = key
    sides = tuple(side for side, name in (("arm", arm), ("baseline", baseline)) if (name, metric) in states)
    return replace(judged, bimodal=sides) if sides else judged


def _too_few_passes(metrics, arms, cells, values, effects, plan) -> list[str]:
    """One line: per metric, the passes that would resolve its min_effect at
    the noise seen in this sweep (pooled over arms) and the metric's
    interval level, where the sweep has fewer; primary metrics first, as
    ``metrics`` come. ``plan``: (metric, effect, cv) -> passes (omni.stats.sequential.planner)."""
    short = []
    for metric in metrics:
        sd = pooled_log_sd([np.array(v) for a in arms if len(v := values[(a, metric)]) > 1 and min(v) > 0])
        if sd is None:
            continue
        need = plan(metric, effects[metric][0], max(sd, 1e-9))
        if min(cells[(a, metric)].n for a in arms) < need:
            short.append(f"{metric} {need} ({effects[metric][0]:.0%} at {sd:.1%} noise)")
    if not short:
        return []
    have = min((cells[(a, m)].n for a in arms for m in metrics), default=0)
    return [
        f"too_few_passes: {len(short)} metric(s) need more than the {have} ok run(s) per arm to tell "
        f"min_effect apart with 80 % power at their interval's level: {', '.join(short)}"
    ]


def _stopped(results: Path, sweep_id: str, passes: int) -> str | None:
    """The sequential rule's stop after ``passes`` passes (omni.sweep.prepare.record_stop), in words."""
    stop = results_root(results) / "sweeps" / sweep_id / f"stop-{passes:04d}.json"
    return f"stopped by the rule {json.loads(stop.read_text())['describe']}" if stop.exists() else None


def summarize_sweep(
    results: Path, sweep_id: str, include_retracted: bool = False, against: str | None = None
) -> SweepSummary:
    """The sweep's summary; ``against``: judged against that arm instead of the
    spec's baseline (``omni summary --against``: arms of one workload in a
    sweep of several), the A/A control then left out (it replicates the baseline)."""
    rows = ok_rows(results, sweep_id, include_retracted)
    spec = sweep_spec(results, sweep_id)  # read once: baseline, margins, control and hosts all come from it
    if against is not None:
        arms = list(dict.fromkeys(rows.timed["arm"]))
        if against not in arms:
            raise OmniError(
                f"--against {against}: no arm of sweep {sweep_id} has that name; its arms: {', '.join(arms)}"
            )
    replicated = spec is not None and spec.hosts is not None and spec.hosts.mode == "replicate"
    hosts = sorted(rows.timed["host"].dropna().unique()) if replicated else []
    if len(hosts) < 2:  # a split fleet sweep's hosts are identical by check: one pool of runs
        return summarize_rows(results, sweep_id, rows, spec, spec is None or spec.hosts is None, against)
    per_host = {}
    for host in hosts:
        mine = SweepRows(
            *(part[part["host"] == host] for part in (rows.ok, rows.timed)),
            0,
            rows.profiled[rows.profiled["host"] == host],
        )
        per_host[host] = summarize_rows(results, sweep_id, mine, spec, True, against)
    whole = summarize_rows(results, sweep_id, rows, spec, False, against)
    judged = {key: across_hosts(key, per_host) for key in whole.judged}
    warnings = [f"host {h}: {w}" for h, summary in per_host.items() for w in summary.warnings]
    return replace(whole, judged=judged, hosts=per_host, untrusted={}, warnings=tuple(warnings))


def across_hosts(key: tuple[str, str], per_host: dict[str, SweepSummary]) -> Judged:
    """One arm and metric over a replicated sweep's hosts, host as a blocking
    factor: judged within each host, then whether every host agrees."""
    seen = {}
    for host, summary in per_host.items():
        judged = summary.judged.get(key)
        comparison = judged.comparison if judged else None
        verdict = judged.refused if judged and judged.refused else comparison.verdict if comparison else "no runs"
        if untrusted(summary, *key):
            verdict = "untrustworthy"
        ratio = f" x{comparison.ratio:.3f}" if comparison and comparison.ratio is not None else ""
        seen[host] = (verdict, f"{host} {verdict}{ratio}")
    verdicts = {v for v, _ in seen.values()}
    text = "; ".join(t for _, t in seen.values())
    # which side ran in two states on which host (each host's section lists them)
    bimodal = tuple(
        f"{side} on {host}"
        for host, summary in per_host.items()
        if summary.judged.get(key)
        for side in summary.judged[key].bimodal
    )
    if len(verdicts) == 1 and verdicts <= {"better", "worse", "equivalent"}:
        return Judged(None, f"{verdicts.pop()} on every host ({text})", bimodal=bimodal)
    return Judged(None, f"differs by host ({text})", bimodal=bimodal)


def summarize_rows(
    results: Path, sweep_id: str, rows: SweepRows, spec, one_host: bool = True, against: str | None = None
) -> SweepSummary:
    """The summary of some rows of a sweep (all of them, or one host's);
    ``one_host`` False: a fleet's rows, whose host column differs by design;
    ``against``: the arm judged against instead of the baseline (no control then)."""
    ok, frame, excluded, profiled = rows
    arms = list(dict.fromkeys(frame["arm"]))
    metrics = primary_metrics(spec, [m for m in metric_columns() if ok[m].notna().any()])
    named = spec.primary_metrics if spec is not None else DEFAULT_PRIMARY_METRICS
    adjustment = adjust_for_multiplicity(metrics, named)
    if spec is not None and spec.auto and not frame.empty:  # each look spends a slice (omni.stats.sequential)
        passes = int(frame["pass_index"].max()) + 1
        adjustment = look_levels(adjustment, passes, spec.planned_passes, _stopped(results, sweep_id, passes))
    plan = planner(adjustment)
    effects = min_effects(spec, metrics)
    baseline = against or baseline_of(spec, arms)
    calibrations = arm_calibrations(results, frame, arms)
    base_cal = calibrations.get(baseline, NONE) if baseline else NONE
    floors = {
        m: (noise_floor(base_cal, m, default_floor(m)), base_cal.source if m in base_cal.noise else "default")
        for m in metrics
    }
    void = void_arms(frame, profiled)
    cells, judged, values = {}, {}, {}
    for arm in arms:
        for metric in metrics:
            values[(arm, metric)] = _values(ok, arm, metric)
            cells[(arm, metric)] = summarize(values[(arm, metric)])
            if not baseline or arm == baseline:
                continue
            if voided := void.get(arm) or void.get(baseline):
                judged[(arm, metric)] = Judged(None, void_refusal(arm if arm in void else baseline, voided))
                continue
            level = adjustment.confidence[metric]
            judged[(arm, metric)] = judge(ok, ok, baseline, arm, metric, effects[metric][0], 0.0, level, BLOCK)
            if (c := judged[(arm, metric)].comparison) and c.passes_needed and c.noise and adjustment.look:
                needed = plan(metric, c.min_effect, max(c.noise, c.drift))
                judged[(arm, metric)] = replace(judged[(arm, metric)], comparison=replace(c, passes_needed=needed))
    warnings = _too_few_passes(metrics, arms, cells, values, effects, plan)
    control = None if against else control_of(spec, arms)
    untrusted = control_failures(judged, control, baseline, metrics) if control and baseline != control else {}
    modes, states = sweep_states(ok, arms, adjustment.primary, effects)
    judged = {key: _mark_bimodal(j, key, baseline, states) for key, j in judged.items()}
    warnings += [f"untrustworthy {metric}: {why}" for metric, why in untrusted.items()]
    warnings += prompt_audit(judged, seed_replicas(frame, baseline, arms), baseline, metrics)
    provenance = sweep_provenance(frame, arms)
    warnings += [
        f"mixed provenance: {key} differs between the sweep's runs ({', '.join(map(str, values))})"
        for key, values in provenance["sweep"].items()
        if isinstance(values, list) and key in MUST_AGREE and (one_host or key != "host")
    ]
    warnings += [f"host conditions: {line}" for line in host_changes(frame)]
    warnings += [
        f"unreadable file skipped: {path} ({why}); move it out of the results"
        for path, why in unreadable_under(results).items()
    ]
    warnings += [
        f"mixed compile cache: {arm}'s runs started {mixed}; its load_s is the cache's history, not the arm's"
        for arm in arms
        if (mixed := mixed_compile_cache(ok, arm))
    ]
    warnings += [
        f"void arm {arm}: every number of it is void, its timed runs included: {why}" for arm, why in void.items()
    ]
    return SweepSummary(
        sweep_id=sweep_id,
        sweep_name=str(frame["sweep_name"].iloc[0]),
        baseline=baseline,
        arms=tuple(arms),
        metrics=tuple(metrics),
        floors=floors,
        min_effects=effects,
        cells=cells,
        judged=judged,
        runs={a: int((frame["arm"] == a).sum()) for a in arms},
        ok={a: int((ok["arm"] == a).sum()) for a in arms},
        excluded=excluded,
        warnings=tuple(warnings),
        values=values,
        control=control,
        untrusted=untrusted,
        calibrations={arm: c.source for arm, c in calibrations.items()},
        provenance=provenance,
        profiled=len(profiled),
        void=void,
        primary=adjustment.primary,
        adjustment=adjustment,
        serving=serving_summary(results, sweep_id, ok, baseline, _level_effect(spec)),
        modes=modes,
        states=states,
        swings=sweep_swings(ok, arms, adjustment.primary, effects, states),
    )


def _level_effect(spec) -> float:
    """The min_effect per-level verdicts use: the spec's default (per-metric
    margins name row metrics, not a level's), else 5 %."""
    effect = spec.min_effect if spec is not None else None
    if isinstance(effect, dict):
        effect = effect.get("default")
    return effect or 0.05


def sweep_primary_and_void(results: Path, sweep_id: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The sweep spec copy's primary metrics (else omni's default) and its
    VOID arms, without judging anything: what the printed table needs."""
    spec = sweep_spec(results, sweep_id)
    rows = ok_rows(results, sweep_id)
    primary = spec.primary_metrics if spec is not None else DEFAULT_PRIMARY_METRICS
    return tuple(primary), void_arms(rows.timed, rows.profiled)


def void_refusal(arm: str, why: str) -> str:
    """What a verdict of (or against) a VOID arm says instead of a verdict."""
    return f"VOID ({void_rule(why)}): {arm}'s runs are kept out of every verdict: {why}"


def void_rule(why: str) -> str:
    """The rule's name in a void reason: ``bf16 head`` of ``profiled pass 0:
    bf16 head: the arm claims …`` (the reason itself when it has no such part)."""
    parts = [p.strip() for p in why.split(":")]
    return next((p for p in parts if p and not p.startswith(("profiled pass", "pass "))), why)


SWEEP_PROVENANCE = (
    "harness_version",
    "harness_git_sha",
    "harness_git_dirty",
    "host",
    "kernel",
    "cpu_model",
    "cpu_flags",
    "numa_nodes",
    "python_version",
    "spec_path",
    "spec_sha256",
)
ARM_PROVENANCE = (
    "engine",
    "engine_version",
    "engine_commit",
    "torch_version",
    "engine_python_version",
    "engine_env",
    "engine_env_freeze_sha256",
    "model",
    "model_digest",
)
# a sweep whose runs disagree on these did not measure one thing
MUST_AGREE = ("harness_git_sha", "host", "cpu_model", "kernel")


def _distinct(values) -> object:
    seen = []
    for value in values:
        value = list(value) if isinstance(value, (list, tuple, np.ndarray)) else value
        if value is None or (isinstance(value, float) and math.isnan(value)) or value in seen:
            continue
        seen.append(value)
    return None if not seen else seen[0] if len(seen) == 1 else seen


def host_changes(frame: pd.DataFrame) -> list[str]:
    """The host settings (omni.host.conditions) that took more than one value over the
    sweep's runs on one host: a governor or THP change mid-sweep moves the
    runs after it, and no verdict can tell that from the arms."""
    if "host_conditions" not in frame:
        return []
    lines = []
    for host, rows in frame.groupby(frame["host"] if "host" in frame else pd.Series("", index=frame.index)):
        seen = [json.loads(v) for v in rows["host_conditions"].dropna()]
        where = f" (host {host})" if frame.get("host", pd.Series()).nunique() > 1 else ""
        lines += [line + where for line in changed_conditions(seen)]
    return lines


def sweep_provenance(frame: pd.DataFrame, arms: list[str]) -> dict:
    """What the sweep's runs ran on and with: one value per fact, or the list
    of the different values seen (a sweep that straddled a commit says so)."""
    sweep = {key: _distinct(frame[key]) for key in SWEEP_PROVENANCE if key in frame}
    per_arm = {}
    for arm in arms:
        rows = frame[frame["arm"] == arm]
        per_arm[arm] = {key: _distinct(rows[key]) for key in ARM_PROVENANCE if key in rows}
        dists = [
            json.loads(p).get("engine_dist")
            for p in rows.get("engine_provenance", pd.Series([], dtype=object)).dropna()
        ]
        per_arm[arm]["engine_dist"] = _distinct(dists)
    return {"sweep": sweep, "arms": per_arm}


def check_metrics(asked: list[str] | None, available: list[str]) -> list[str]:
    """The metrics asked for (``--metric``), each one judged and measured here;
    all of ``available`` when none were asked for."""
    if not asked:
        return available
    for metric in asked:
        if metric not in available:
            known = metric_columns()
            why = "has no values in these runs" if metric in known else "is not a judged metric"
            raise OmniError(f"--metric {metric} {why}; choose from {', '.join(available)}")
    return list(dict.fromkeys(asked))


def focus(summary: SweepSummary, metrics: list[str] | None) -> SweepSummary:
    """The same summary restricted to ``metrics`` (``omni summary --metric``)."""
    keep = check_metrics(metrics, list(summary.metrics))
    if keep == list(summary.metrics):
        return summary
    return replace(
        summary,
        metrics=tuple(keep),
        primary=tuple(m for m in summary.primary if m in keep),
        floors={m: summary.floors[m] for m in keep},
        min_effects={m: summary.min_effects[m] for m in keep},
        cells={k: v for k, v in summary.cells.items() if k[1] in keep},
        judged={k: v for k, v in summary.judged.items() if k[1] in keep},
        values={k: v for k, v in summary.values.items() if k[1] in keep},
    )
