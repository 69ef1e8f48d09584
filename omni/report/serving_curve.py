"""What the HTML report's serving curve draws (:func:`omni.report.html.curve_svg`),
as data, so what it shows is tested without reading pixels.

Closed-loop levels (``c=8``: requests in flight) and open-loop levels
(``r=2``: requests/s offered) are separate series on separate x axes: a
concurrency and a rate are different loads, and no line joins them. A
series is one arm, one kind of level and one figure: TTFT or TPOT at the
arm's SLO percentile (p50, p90 or p99, the percentile its SLO verdicts are
judged at), or output tok/s. Each point is one level, the median over its
judged runs with their range and, for a latency, the median of the runs'
95 % upper bounds of that percentile, the figure the SLO is met on. A run
whose level was flagged is not judged and not drawn (its latencies may be
the client's or the queue's); :func:`curve_note` names such levels.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from omni.serving.summary import ServingSummary

KINDS = {"c": "concurrency", "r": "rate"}
LOAD_AXIS = {"concurrency": "requests in flight (closed loop)", "rate": "requests/s offered (open loop)"}
FIGURES = ("ttft", "tpot", "output_tok_s")
DEFAULT_PERCENTILE = 99  # the default SLO's, for an arm stored without an SLO


@dataclass(frozen=True)
class CurvePoint:
    """One level of a series: ``median``, ``low`` and ``high`` over its
    ``runs`` judged runs; ``upper95`` the median of their 95 % upper bounds
    (None for throughput, and where a run's requests are too few to bound
    the percentile); ``partial``: some of its runs were flagged and left out."""

    level: str
    load: float
    runs: int
    median: float
    low: float
    high: float
    upper95: float | None = None
    partial: bool = False


@dataclass(frozen=True)
class CurveSeries:
    """One arm's levels of one kind (``concurrency`` or ``rate``) for one
    figure (``ttft``, ``tpot`` or ``output_tok_s``), ascending in load:
    ``column`` the level column drawn (``ttft_p90_ms`` for an SLO at p90),
    ``limit`` the SLO's limit on it in ms (None for throughput)."""

    arm: str
    kind: str
    figure: str
    column: str
    percentile: int | None
    limit: float | None
    points: tuple[CurvePoint, ...]


def level_load(key: str) -> tuple[str, float]:
    """``c=8`` -> ("concurrency", 8.0); ``r=0.5`` -> ("rate", 0.5)."""
    prefix, value = key.split("=", 1)
    return KINDS[prefix], float(value)


def curve_series(serving: ServingSummary) -> list[CurveSeries]:
    """Every series with a point, per arm, kind and figure in that order."""
    found = []
    for arm in serving.arms:
        slo = serving.slo.get(arm) or {}
        q = int(slo.get("percentile", DEFAULT_PERCENTILE))
        for kind in KINDS.values():
            keys = [k for k in serving.levels if level_load(k)[0] == kind]
            for figure in FIGURES:
                latency = figure != "output_tok_s"
                column = f"{figure}_p{q}_ms" if latency else figure
                points = tuple(p for k in keys if (p := _point(serving, arm, k, column, latency)) is not None)
                if points:
                    limit = slo.get(f"{figure}_ms") if latency else None
                    found.append(CurveSeries(arm, kind, figure, column, q if latency else None, limit, points))
    return found


def _point(serving: ServingSummary, arm: str, key: str, column: str, latency: bool) -> CurvePoint | None:
    runs = serving.points.get((arm, key), {})
    values = runs.get(column) or []
    if not values:
        return None
    bounds = (runs.get(column.replace("_ms", "_upper95_ms")) or []) if latency else []
    # a level some of whose runs cannot bound the percentile has no bound: a median of the others would flatter it
    upper = median(bounds) if bounds and len(bounds) == len(values) else None
    return CurvePoint(
        key,
        level_load(key)[1],
        len(values),
        median(values),
        min(values),
        max(values),
        upper,
        (arm, key) in serving.flagged,
    )


def curve_note(serving: ServingSummary) -> str:
    """The flagged levels the curve leaves out, or draws over their judged
    runs only: ``Not drawn (no run judged): a r=4 (2 run(s) saturated).
    Over the judged runs only (hollow marker): a c=8 (1 run(s) client_bound).``;
    empty when no level was flagged."""
    gone, partial = [], []
    for (arm, key), flags in serving.flagged.items():
        counts = ", ".join(f"{flags.count(f)} run(s) {f}" for f in dict.fromkeys(flags))
        drawn = bool(serving.points.get((arm, key), {}).get("output_tok_s"))
        (partial if drawn else gone).append(f"{arm} {key} ({counts})")
    parts = []
    if gone:
        parts.append("Not drawn (no run judged): " + "; ".join(gone) + ".")
    if partial:
        parts.append("Over the judged runs only (hollow marker): " + "; ".join(partial) + ".")
    return " ".join(parts)
