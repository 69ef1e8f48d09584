"""A serving level against its SLO, and a run's capacity under it: the
SLO is met only on the 95 % upper bound of its percentile (a point estimate
from few requests is optimistic), and capacity is the load where that bound
reaches the limit, or a bound where the levels tried do not bracket it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from omni.stats.quantiles import bounded_quantile


def slo_margin(record: Mapping, slo: Mapping, upper: bool = False) -> float | None:
    """How far the level is from its SLO at the SLO's percentile: the larger
    of TTFT/limit and TPOT/limit (<= 1 meets it), on the point estimates or
    (``upper``) on their 95 % upper bounds; None where there is none (for the
    bounds: too few requests)."""
    q = slo["percentile"]
    kind = "upper95_ms" if upper else "ms"
    ttft, tpot = record.get(f"ttft_p{q}_{kind}"), record.get(f"tpot_p{q}_{kind}")
    if ttft is None or (upper and tpot is None and record.get("tpot_samples")):
        return None  # no TPOT at all (one-token answers) weighs nothing; an unbounded one is unknown
    return max(ttft / slo["ttft_ms"], (tpot or 0.0) / slo["tpot_ms"])


def slo_verdict(record: Mapping, slo: Mapping) -> str | None:
    """``met``: the 95 % upper bounds of TTFT and TPOT at the SLO's
    percentile are within its limits; ``not_met``: a point estimate is over
    its limit, or (open loop) the level saturated; ``not_established``:
    neither, because the requests are too few to bound the percentile (p99
    needs 299) or a bound is over its limit. The point estimate alone never
    meets an SLO: from 32 requests the true p99 lies above all of them 72 %
    of the time. None: no request to judge."""
    if "saturated" in (record.get("flags") or []):
        return "not_met"  # the queue grew: no latency percentile of it holds for longer
    point = slo_margin(record, slo)
    if point is None:
        return None
    if point > 1.0:
        return "not_met"
    bound = slo_margin(record, slo, upper=True)
    return "met" if bound is not None and bound <= 1.0 else "not_established"


def slo_reach(record: Mapping) -> float | None:
    """The highest percentile the level's requests bound at 95 %, in percent
    (:func:`omni.stats.quantiles.bounded_quantile`: 91.06 from 32 requests,
    99.003 from 299): of the TTFT and TPOT counts, the two an SLO is judged
    on, the smaller. An SLO at a percentile above it is at best not
    established at this level, never met; None: no request to count."""
    counts = [n for n in (record.get("ttft_samples"), record.get("tpot_samples")) if n]
    return 100 * bounded_quantile(min(counts)) if counts else None


@dataclass(frozen=True)
class Capacity:
    """The highest load of one kind a run held within its SLO: ``value``
    where it crossed between two levels, or a bound (``above`` the highest
    level, ``below`` the lowest), or ``unknown`` (a level it needed was not
    judged), or ``not_established`` (a level it needed had too few requests
    to bound the SLO's percentile). ``at``: where an above or below bound
    lies (the highest level that met the SLO, the lowest level tried)."""

    kind: str
    value: float | None
    bound: str | None = None  # "above", "below", "unknown", "not_established"
    at: float | None = None


def run_capacity(records: list[Mapping], kind: str, slo: Mapping) -> Capacity | None:
    """Capacity of one run on one kind of level, from its levels ascending
    and their :func:`slo_verdict`.

    Between the last level that met the SLO and the first that did not,
    log(margin) on the 95 % upper bounds is interpolated linearly in the
    load: the load at which the bound reaches the limit. A level fails when
    it is ``not_met`` (a saturated open-loop level among them: it did not
    hold the rate) or when its bound is over a limit; a level whose requests
    cannot bound the percentile, or that was not judged, stops the search.
    """
    levels = sorted((r for r in records if r["load_kind"] == kind), key=lambda r: r["load_value"])
    if not levels:
        return None
    last_ok = None
    for record in levels:
        verdict = record.get("slo_verdict")
        if verdict == "met":
            last_ok = record
            continue
        if verdict is None:
            return Capacity(kind, None, "unknown")
        if verdict == "not_established" and slo_margin(record, slo, upper=True) is None:
            return Capacity(kind, None, "not_established")
        if last_ok is None:
            return Capacity(kind, None, "below", record["load_value"])
        return Capacity(kind, _crossing(last_ok, record, slo))
    return Capacity(kind, None, "above", levels[-1]["load_value"])


def _crossing(ok: Mapping, failed: Mapping, slo: Mapping) -> float:
    low, high = ok["load_value"], failed["load_value"]
    m_low, m_high = slo_margin(ok, slo, upper=True), slo_margin(failed, slo, upper=True)
    if m_low is None or m_high is None or m_low <= 0 or m_high <= 1.0 or m_high <= m_low:
        return low  # no bound to interpolate on (saturated, or too few requests): the last level that held
    share = (0.0 - math.log(m_low)) / (math.log(m_high) - math.log(m_low))
    return low + (high - low) * min(max(share, 0.0), 1.0)
