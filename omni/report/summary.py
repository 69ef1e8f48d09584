"""One sweep's summary: per arm and metric its runs summarized, each arm's
verdict against the baseline, qualified by the live A/A control, the
prompt-seed audit, the two states and swings of its runs and the sweep's
warnings; a replicated fleet sweep's per host; ``--metric``'s focus.

This reads a sweep's rows (:func:`omni.store.retract.ok_rows`: retracted runs are
left out unless asked for, and every summary says how many it left out), its
spec copy (:mod:`omni.report.spec_copy`) and the calibrations of its workloads
(:mod:`omni.history.calibration`); one verdict is :mod:`omni.report.verdicts`'s,
VOID arms :mod:`omni.report.void`'s, two states and swings :mod:`omni.report.states`',
provenance :mod:`omni.report.provenance`'s; the arithmetic is :mod:`omni.stats.verdicts`,
conclusions across sweeps are :mod:`omni.history.compare`'s, and the Markdown/JSON/HTML
forms :mod:`omni.report.markdown`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from omni.errors import OmniError
from omni.history.calibration import NONE, arm_calibrations, metric_kind, noise_floor
from omni.report.provenance import MUST_AGREE, host_changes, sweep_provenance
from omni.report.roofs import ArmRoofs, arm_roofs
from omni.report.spec_copy import baseline_of, min_effects, primary_metrics, sweep_spec
from omni.report.states import sweep_states, sweep_swings
from omni.report.verdicts import BLOCK, Judged, arm_values, judge, mixed_compile_cache
from omni.report.void import void_arms, void_refusal
from omni.serving.summary import ServingSummary, serving_summary
from omni.spec.settings import DEFAULT_PRIMARY_METRICS, PASSES_MAX
from omni.stats.controls import control_failures, control_of, prompt_audit, seed_replicas, untrusted
from omni.stats.intervals import pooled_log_sd
from omni.stats.modes import Explanation, Modes
from omni.stats.planning import Layout
from omni.stats.sequential import look_levels, planner
from omni.stats.swing import Swing
from omni.stats.verdicts import (
    DEFAULT_FLOORS,
    ESTIMATE_LEVEL,
    Adjustment,
    Summary,
    adjust_for_multiplicity,
    summarize,
)
from omni.store.columns import metric_columns
from omni.store.objstore import results_root
from omni.store.reading import unreadable_under
from omni.store.retract import SweepRows, ok_rows


def default_floor(metric: str) -> float:
    return DEFAULT_FLOORS[metric_kind(metric)]


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
    roofs: dict[str, ArmRoofs] = field(default_factory=dict)  # per arm, its runs against their roofs


def _mark_bimodal(judged: Judged, key: tuple[str, str], baseline: str | None, states: dict) -> Judged:
    """``judged`` marked with which of its two arms ran in two states on its metric."""
    arm, metric = key
    sides = tuple(side for side, name in (("arm", arm), ("baseline", baseline)) if (name, metric) in states)
    return replace(judged, bimodal=sides) if sides else judged


def _reading(judge_at, level: float, secondary: bool, reach: int) -> Judged:
    """One verdict at ``level`` (``judge_at(confidence=...)``), with the most
    passes the spec may run; a secondary metric it leaves inconclusive is
    shown as an estimate at :data:`ESTIMATE_LEVEL` instead, with no verdict
    and no passes asked for (its level is the multiplicity's, the estimate's is not)."""
    judged = judge_at(confidence=level)
    c = judged.comparison
    if c is None:
        return judged
    c = replace(c, reach=reach)
    if secondary and c.verdict == "inconclusive" and c.ci_low is not None:
        wide = judge_at(confidence=ESTIMATE_LEVEL).comparison
        c = replace(c, estimate=(wide.ci_low, wide.ci_high), passes_needed=None)
    return replace(judged, comparison=c)


def _layout(ok, fitted: tuple[str, ...], control: str | None, calibrations: dict, metric: str) -> Layout | None:
    """The fit a verdict on ``metric`` is made of (None: runs without a
    slot), for the planner (:class:`omni.stats.planning.Layout`)."""
    rows = ok[ok["arm"].isin(fitted) & ok[metric].notna()] if BLOCK in ok.columns else ok.iloc[0:0]
    if rows.empty or rows[BLOCK].isna().any():
        return None
    slots = rows[BLOCK].nunique()
    present = sorted(set(rows["arm"]))
    calibrated = all(a in calibrations and calibrations[a].prior(metric) for a in present)
    return Layout(len(present), int(slots), control in present, calibrated)


def _too_few_passes(metrics, arms, cells, values, effects, plan, layouts) -> list[str]:
    """One line: per metric, the passes that would resolve its min_effect at
    the noise seen in this sweep (pooled over arms) and the metric's
    interval level, where the sweep has fewer; primary metrics first, as
    ``metrics`` come. ``plan``: (metric, effect, cv) -> passes (omni.stats.sequential.planner)."""
    short = []
    for metric in metrics:
        sd = pooled_log_sd([np.array(v) for a in arms if len(v := values[(a, metric)]) > 1 and min(v) > 0])
        if sd is None:
            continue
        need = plan(metric, effects[metric][0], max(sd, 1e-9), layouts[metric])
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
    control = None if against else control_of(spec, arms)
    fitted = tuple(a for a in arms if a not in void)  # every arm's runs tell the slots' speeds
    layouts = {m: _layout(ok, fitted, control, calibrations, m) for m in metrics}
    reach = (spec.planned_passes if spec.auto else PASSES_MAX) if spec is not None else PASSES_MAX
    cells, judged, values = {}, {}, {}
    for arm in arms:
        for metric in metrics:
            values[(arm, metric)] = arm_values(ok, arm, metric)
            cells[(arm, metric)] = summarize(values[(arm, metric)])
            if not baseline or arm == baseline:
                continue
            if voided := void.get(arm) or void.get(baseline):
                judged[(arm, metric)] = Judged(None, void_refusal(arm if arm in void else baseline, voided))
                continue
            level = adjustment.confidence[metric]
            priors = {a: calibrations[a].prior(metric) for a in fitted if a in calibrations}
            one = partial(judge, ok, ok, baseline, arm, metric, effects[metric][0], 0.0, block=BLOCK,
                          sweep_arms=fitted, control=control, priors=priors)  # fmt: skip
            judged[(arm, metric)] = _reading(one, level, metric in adjustment.secondary, reach)
            if (c := judged[(arm, metric)].comparison) and c.passes_needed and c.noise and adjustment.look:
                needed = plan(metric, c.min_effect, max(c.noise, c.drift), layouts[metric])
                judged[(arm, metric)] = replace(judged[(arm, metric)], comparison=replace(c, passes_needed=needed))
    warnings = _too_few_passes(metrics, arms, cells, values, effects, plan, layouts)
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
        roofs=arm_roofs(ok, arms),
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
