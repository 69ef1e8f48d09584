"""A capacity search: the next load level a run takes, chosen from the
levels it has measured, so the highest load within the SLO is found
rather than guessed between hand-picked levels.

Concurrency (closed loop) is searched as vLLM's ``bench sweep`` and
GuideLLM's ``sweep`` search a load: one request at a time first; if that
meets the SLO, the load doubles until a level does not (or the search's
``max_concurrency`` meets it: the capacity lies above it); then the
bracket between the highest level that met the SLO and the lowest that
did not is halved (geometric midpoint, whole requests) until it is one
request wide or ``precision`` of its lower end, or the run's budget of
``levels`` is spent.

Rate (open loop) as GuideLLM's ``sweep`` brackets it: a synchronous level
(concurrency 1) and a throughput level (concurrency ``max_concurrency``)
measure the rate one request at a time sustains and the most the server
completes; rates are then probed between them, doubling from the
synchronous rate while the SLO is met and halving the bracket once a rate
does not, each rate rounded to three significant digits. A rate near the
throughput level's is not probed: the server would not hold it.

The capacity is then :func:`omni.serving.slo.run_capacity` over the levels
the search measured, as for levels named by hand; where the search never
brackets it, the capacity is a bound (above ``max_concurrency`` or the
highest rate that met the SLO, below one request at a time), which the
arm's interval keeps (:mod:`omni.stats.censored`).

Every choice is a pure function of the measured records, so a search is
replayed from its stored levels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from omni.serving.levels import Level
from omni.serving.slo import slo_margin

# a rate within this share of the throughput level's completions is not probed:
# an open-loop level there saturates, and the search learns nothing from it
THROUGHPUT_HEADROOM = 0.95


def judged_pass(record: Mapping, slo: Mapping) -> bool | None:
    """Whether a measured level met its SLO for the search: True (met),
    False (not met, or a 95 % bound over a limit), None where it cannot
    say (not judged, or too few requests to bound the percentile): the
    search stops there rather than steer on a guess."""
    verdict = record.get("slo_verdict")
    if verdict == "met":
        return True
    if verdict == "not_met":
        return False
    if verdict == "not_established" and slo_margin(record, slo, upper=True) is not None:
        return False
    return None


def next_level(search: Mapping, slo: Mapping, records: Sequence[Mapping], batch_size: int) -> Level | None:
    """The level to measure next, or None when the search is done.

    ``search``: the arm's ``load.search`` (kind, levels, max_concurrency,
    precision); ``records``: the run's levels so far, in the order
    measured (:func:`omni.serving.levels.level_record`'s); ``batch_size``: the server's sequences at
    once, whose 4x is ``max_concurrency``'s default."""
    if len(records) >= search["levels"]:
        return None
    top = int(search.get("max_concurrency") or 4 * batch_size)
    if search["kind"] == "concurrency":
        return _next_concurrency(records, slo, top, search["precision"])
    return _next_rate(records, slo, top, search["precision"])


def _bracket(records: Sequence[Mapping], slo: Mapping, kind: str) -> tuple[float | None, float | None, bool]:
    """The highest load that met the SLO below the lowest that did not
    (lo, hi), and whether a level could not be judged (the search stops)."""
    mine = [r for r in records if r["load_kind"] == kind]
    if any(judged_pass(r, slo) is None for r in mine):
        return None, None, True
    failed = [r["load_value"] for r in mine if judged_pass(r, slo) is False]
    hi = min(failed, default=None)
    met = [r["load_value"] for r in mine if judged_pass(r, slo) and (hi is None or r["load_value"] < hi)]
    return max(met, default=None), hi, False


def _next_concurrency(records: Sequence[Mapping], slo: Mapping, top: int, precision: float) -> Level | None:
    if not records:
        return Level("concurrency", 1.0)
    lo, hi, stuck = _bracket(records, slo, "concurrency")
    if stuck or lo is None:
        return None  # a level not judged, or one request at a time missed the SLO: below
    if hi is None:
        return None if lo >= top else Level("concurrency", float(min(2 * int(lo), top)))
    if hi - lo <= 1 or hi <= lo * (1 + precision):
        return None
    mid = round(math.sqrt(lo * hi))
    return Level("concurrency", float(min(max(mid, int(lo) + 1), int(hi) - 1)))


def _next_rate(records: Sequence[Mapping], slo: Mapping, top: int, precision: float) -> Level | None:
    closed = {r["load_value"]: r for r in records if r["load_kind"] == "concurrency"}
    if 1.0 not in closed:
        return Level("concurrency", 1.0)  # synchronous
    if float(top) not in closed:
        if judged_pass(closed[1.0], slo) is not True:
            return None  # one request at a time missed the SLO: no rate meets it
        return Level("concurrency", float(top))  # throughput
    sync, most = closed[1.0].get("request_s"), closed[float(top)].get("request_s")
    if not sync or not most:
        return None
    ceiling = THROUGHPUT_HEADROOM * most
    lo, hi, stuck = _bracket(records, slo, "rate")
    if stuck:
        return None
    tried = {r["load_value"] for r in records if r["load_kind"] == "rate"}
    if not tried:
        return _rate(min(sync, ceiling), tried)
    if hi is None:  # every rate so far met the SLO
        if lo >= ceiling * (1 - precision):
            return None  # above: as high as the server completes
        return _rate(min(2 * lo, ceiling), tried)
    if lo is None:  # every rate so far missed it: halve down, within the budget
        return _rate(hi / 2, tried)
    if hi <= lo * (1 + precision):
        return None
    return _rate(math.sqrt(lo * hi), tried)


def _rate(value: float, tried: set[float]) -> Level | None:
    """The rate to three significant digits; None where that was measured
    already (the bracket is narrower than the digits: done)."""
    rounded = float(f"{value:.3g}")
    return None if rounded in tried or rounded <= 0 else Level("rate", rounded)
