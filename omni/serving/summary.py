"""What a sweep's serving arms concluded: per load level, each arm against
the baseline by the same verdict rule as every metric (runs, i.e. server
starts, are the units: a level is run once per start), and each arm's
capacity under its SLO with an interval over its runs.

A level flagged by :func:`omni.serving.levels.level_flags` (a failed request,
a CPU-bound load generator, an open-loop rate the server did not hold) is
left out of the verdicts and counted beside them: its latencies may be the
client's or the queue's, not the server's.

Per level and arm, the SLO's outcome over the runs (:class:`LevelSlo`):
met only on the 95 % upper bound of the SLO's percentile, and "not
established" where the level's requests are too few to bound it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from omni.serving.levels import PERCENTILES
from omni.stats.censored import ABOVE, BELOW, CensoredSummary, Point, compare_censored, summarize_censored
from omni.stats.quantiles import reach_note
from omni.stats.verdicts import ALPHA, Comparison, Summary, compare, summarize
from omni.store.reading import load_side_table

# per level, what is judged, and which way is better
LEVEL_METRICS = {
    "output_tok_s": "higher",
    "ttft_p50_ms": "lower",
    "ttft_p99_ms": "lower",
    "tpot_p50_ms": "lower",
    "tpot_p99_ms": "lower",
}
# per level, each judged run's values kept (ServingSummary.points): the metrics judged, and
# TTFT and TPOT at every percentile with its 95 % upper bound, whichever an arm's SLO is at
POINT_COLUMNS = tuple(
    dict.fromkeys(
        [
            *LEVEL_METRICS,
            *(f"{m}_p{q}{s}" for m in ("ttft", "tpot") for q in PERCENTILES for s in ("_ms", "_upper95_ms")),
        ]
    )
)
CAPACITY_KINDS = ("concurrency", "rate")
SLO_VERDICT_TEXT = {"met": "met", "not_met": "not met", "not_established": "not established"}


@dataclass(frozen=True)
class LevelSlo:
    """The SLO at one level of one arm: each run's verdict
    (:func:`omni.serving.slo.slo_verdict`; a level not judged has none), and
    the fewest requests a run's level judged it on, which bound the SLO's
    ``percentile`` at 95 % or do not."""

    verdicts: tuple[str, ...]
    requests: int | None
    percentile: int | None

    def reach(self) -> str | None:
        """``32 requests bound only p91 at 95 % (p99 needs 299)``, or None
        where the requests bound the SLO's percentile."""
        if self.requests is None or self.percentile is None:
            return None
        return reach_note(self.requests, self.percentile / 100, samples="requests")

    def describe(self) -> str:
        """``met 2/2``, or ``not met 1/2, not established 1/2: ...`` with why
        it is not established: too few requests (``32 requests bound only p91
        at 95 % (p99 needs 299)``) or a bound over its limit."""
        if not self.verdicts:
            return "-"
        counts = {v: self.verdicts.count(v) for v in SLO_VERDICT_TEXT if v in self.verdicts}
        text = ", ".join(f"{SLO_VERDICT_TEXT[v]} {n}/{len(self.verdicts)}" for v, n in counts.items())
        if "not_established" not in counts:
            return text
        return f"{text}: {self.reach() or 'a 95 % upper bound over its limit'}"


@dataclass(frozen=True)
class ServingSummary:
    baseline: str | None
    arms: tuple[str, ...]
    levels: tuple[str, ...]  # level keys, closed-loop ones first, each ascending
    cells: dict[tuple[str, str, str], Summary]  # (arm, level, metric)
    judged: dict[tuple[str, str, str], Comparison]  # arm != baseline
    flagged: dict[tuple[str, str], list[str]]  # (arm, level) -> flags of its levels left out
    capacity: dict[tuple[str, str], CensoredSummary]  # (arm, kind): runs beyond the levels kept as bounds
    capacity_judged: dict[tuple[str, str], Comparison] = field(default_factory=dict)
    level_confidence: float = 0.95  # of every per-level interval: Bonferroni over the levels x metrics judged
    bounds: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (arm, kind) -> runs' bounds
    slo: dict[str, dict] = field(default_factory=dict)  # arm -> its SLO
    points: dict[tuple[str, str], dict[str, list[float]]] = field(default_factory=dict)  # (arm, level) -> values
    level_slo: dict[tuple[str, str], LevelSlo] = field(default_factory=dict)  # (arm, level)
    capacity_notes: dict[tuple[str, str], str] = field(default_factory=dict)  # why a capacity verdict is withheld

    def slo_reach(self, arm: str) -> str | None:
        """Where the arm's levels have too few requests to bound its SLO's
        percentile: ``SLO not established: 32 requests bound only p91 at
        95 % (p99 needs 299)`` (the fewest of its levels); None otherwise."""
        notes = [s for (a, _), s in self.level_slo.items() if a == arm and s.reach()]
        fewest = min(notes, key=lambda s: s.requests, default=None)
        return f"SLO not established: {fewest.reach()}" if fewest else None


def level_sort_key(key: str) -> tuple[int, float]:
    kind, value = key.split("=", 1)
    return (0 if kind == "c" else 1, float(value))


def serving_summary(
    results, sweep_id: str, ok: pd.DataFrame, baseline: str | None, min_effect: float = 0.05, confidence: float = 0.95
) -> ServingSummary | None:
    """The serving part of a sweep's summary, from its ok runs' levels; None
    when it has no serving arm."""
    levels = load_side_table(results, "levels", sweep_id)
    levels = levels[levels["run_id"].isin(set(ok["run_id"]))]
    if levels.empty:
        return None
    arms = tuple(a for a in dict.fromkeys(ok["arm"]) if a in set(levels["arm"]))
    keys = tuple(sorted(set(levels["level"]), key=level_sort_key))
    judged_rows = levels[[len(f) == 0 if f is not None else True for f in levels["flags"]]]
    slo = {}
    for arm in arms:
        rows = ok[ok["arm"] == arm]
        if "slo" in rows.columns and rows["slo"].notna().any():
            slo[arm] = _json(rows["slo"].dropna().iloc[0])
    cells, judged, flagged, points, level_slo = {}, {}, {}, {}, {}
    for arm in arms:
        for key in keys:
            mine = levels[(levels["arm"] == arm) & (levels["level"] == key)]
            flags = [f for fl in mine["flags"] for f in (fl if fl is not None else [])]
            if flags:
                flagged[(arm, key)] = flags
            level_slo[(arm, key)] = level_slo_of(mine, slo.get(arm))
            good = judged_rows[(judged_rows["arm"] == arm) & (judged_rows["level"] == key)]
            points[(arm, key)] = {m: [float(v) for v in good[m].dropna()] for m in POINT_COLUMNS}
            for metric in LEVEL_METRICS:
                cells[(arm, key, metric)] = summarize(points[(arm, key)][metric])
    # levels x metrics verdicts per arm: each interval at 1 - alpha / their
    # number, so that the arm's chance of any false call stays alpha (Bonferroni)
    level_confidence = 1 - ALPHA / max(1, len(keys) * len(LEVEL_METRICS))
    for arm in arms:
        if not baseline or arm == baseline or baseline not in arms:
            continue
        for key in keys:
            for metric, better in LEVEL_METRICS.items():
                judged[(arm, key, metric)] = compare(
                    points[(baseline, key)][metric],
                    points[(arm, key)][metric],
                    better=better,
                    min_effect=min_effect,
                    confidence=level_confidence,
                )
    capacity, capacity_judged, bounds, capacity_notes = {}, {}, {}, {}
    runs: dict[tuple[str, str], list[Point]] = {}
    for arm in arms:
        rows = ok[ok["arm"] == arm]
        for kind in CAPACITY_KINDS:
            column = f"capacity_{kind}"
            if column not in rows.columns or not levels[(levels["arm"] == arm)]["load_kind"].eq(kind).any():
                continue
            stated = [_json(b) for b in rows["capacity_bounds"]] if "capacity_bounds" in rows.columns else []
            bounds[(arm, kind)] = [b[kind] for b in stated if b.get(kind)]
            runs[(arm, kind)] = capacity_points(rows, kind)
            if not runs[(arm, kind)] and not bounds[(arm, kind)]:
                continue  # a search of the other kind: no capacity of this one
            capacity[(arm, kind)] = summarize_censored(runs[(arm, kind)])
    for arm, kind in capacity:
        if baseline and arm != baseline and (baseline, kind) in capacity:
            capacity_judged[(arm, kind)], note = compare_censored(
                runs[(baseline, kind)], runs[(arm, kind)], min_effect=min_effect, confidence=confidence
            )
            if note:
                capacity_notes[(arm, kind)] = note
    return ServingSummary(
        baseline,
        arms,
        keys,
        cells,
        judged,
        flagged,
        capacity,
        capacity_judged,
        level_confidence,
        bounds,
        slo,
        points,
        level_slo,
        capacity_notes,
    )


def capacity_points(rows: pd.DataFrame, kind: str) -> list[Point]:
    """Each run's capacity of one kind: its figure, or its bound where it
    lies beyond the levels tried (``capacity_<kind>_bound_at``; runs
    stored before that column, and runs whose capacity is unknown or not
    established, have neither and are left out)."""
    points = []
    for row in rows.to_dict("records"):
        value, at = row.get(f"capacity_{kind}"), row.get(f"capacity_{kind}_bound_at")
        side = _json(row.get("capacity_bounds")).get(kind)
        if value is not None and not pd.isna(value):
            points.append(Point(float(value)))
        elif side in (ABOVE, BELOW) and at is not None and not pd.isna(at):
            points.append(Point(float(at), side))
    return points


def level_slo_of(rows: pd.DataFrame, slo: Mapping | None) -> LevelSlo:
    """One arm's level over its runs: their SLO verdicts and the fewest
    requests one judged (TTFT's and TPOT's counts, the smaller)."""
    verdicts, counts = [], []
    for row in rows.to_dict("records"):
        verdict = row.get("slo_verdict")
        if pd.isna(verdict) and not pd.isna(row.get("slo_met")):
            # stored before v13, met on the point estimate alone: no bound was kept to meet it on
            verdict = "not_established" if row["slo_met"] else "not_met"
        if pd.isna(verdict):
            continue  # not judged
        verdicts.append(verdict)
        seen = [int(n) for n in (row.get("ttft_samples"), row.get("tpot_samples")) if not pd.isna(n) and n > 0]
        counts.append(min(seen) if seen else int(row["requests"]) - int(row["failed"]))
    percentile = (slo or {}).get("percentile")
    return LevelSlo(tuple(verdicts), min(counts) if counts else None, percentile)


def _json(value) -> dict:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return {}
    return json.loads(value) if isinstance(value, str) else dict(value)
