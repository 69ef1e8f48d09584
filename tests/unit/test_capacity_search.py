"""The capacity search (omni.serving.search) on a modelled server, and
capacities beyond the levels tried kept as bounds (omni.stats.censored)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from omni.serving.levels import Level
from omni.serving.search import next_level
from omni.serving.slo import run_capacity, slo_verdict
from omni.spec.arm import LoadRequest
from omni.stats.censored import ABOVE, BELOW, Point, compare_censored, summarize_censored

SLO = {"ttft_ms": 100.0, "tpot_ms": 1000.0, "percentile": 50}
SEARCH = {"kind": "concurrency", "levels": 8, "max_concurrency": None, "precision": 0.1}


def modelled_level(level: Level, slots: int = 4, ttft_alone_ms: float = 20.0, served_per_s: float = 40.0) -> dict:
    """A level of a server with ``slots`` sequences at once: TTFT grows with
    the queue beyond its slots (closed loop) or with the offered rate as
    M/M/1 grows (open loop); the bound 5 % over the point estimate."""
    if level.kind == "concurrency":
        ttft = ttft_alone_ms * (1 + max(0.0, level.value - slots) / slots * 4)
        request_s = min(level.value, slots) / (ttft_alone_ms * 3 / 1e3)
    else:
        load = min(level.value / served_per_s, 0.99)
        ttft = ttft_alone_ms / (1 - load)
        request_s = level.value
    record = {
        "load_kind": level.kind,
        "load_value": level.value,
        "request_s": request_s,
        "flags": [],
        "tpot_samples": 16,
        "ttft_p50_ms": ttft,
        "ttft_p50_upper95_ms": ttft * 1.05,
        "tpot_p50_ms": 5.0,
        "tpot_p50_upper95_ms": 5.5,
    }
    record["slo_verdict"] = slo_verdict(record, SLO)
    return record


def searched(search: dict, batch_size: int = 4, **model) -> list[dict]:
    records: list[dict] = []
    while (level := next_level(search, SLO, records, batch_size)) is not None:
        assert level not in [Level(r["load_kind"], r["load_value"]) for r in records], "a level measured twice"
        records.append(modelled_level(level, **model))
    return records


def test_a_concurrency_search_brackets_the_capacity_within_its_budget() -> None:
    # the bound (x1.05 of TTFT) reaches 100 ms where 20 x 1.05 x (1 + (c - 4)) = 100: c = 7.76
    records = searched(SEARCH)
    capacity = run_capacity(records, "concurrency", SLO)
    assert [r["load_value"] for r in records][:4] == [1.0, 2.0, 4.0, 8.0]  # doubling until a level misses
    assert len(records) <= SEARCH["levels"]
    assert capacity.bound is None and capacity.value == pytest.approx(7.76, abs=0.3)


def test_a_search_that_never_misses_stops_at_its_ceiling_and_says_above() -> None:
    records = searched({**SEARCH, "max_concurrency": 6})
    capacity = run_capacity(records, "concurrency", SLO)
    assert [r["load_value"] for r in records] == [1.0, 2.0, 4.0, 6.0]
    assert (capacity.bound, capacity.at) == ("above", 6.0)


def test_a_search_whose_first_level_misses_stops_and_says_below() -> None:
    records = searched(SEARCH, ttft_alone_ms=200.0)
    capacity = run_capacity(records, "concurrency", SLO)
    assert [r["load_value"] for r in records] == [1.0]
    assert (capacity.bound, capacity.at) == ("below", 1.0)


def test_a_level_the_search_cannot_judge_ends_it() -> None:
    first = next_level(SEARCH, SLO, [], 4)
    unjudged = {**modelled_level(first), "slo_verdict": None, "flags": ["failed_requests"]}
    assert next_level(SEARCH, SLO, [unjudged], 4) is None


def test_a_rate_search_measures_synchronous_and_throughput_then_brackets_the_rate() -> None:
    # open loop: TTFT 20 / (1 - r / 40), its bound x1.05 reaches 100 at r = 31.6
    records = searched({**SEARCH, "kind": "rate", "levels": 10})
    kinds = [(r["load_kind"], r["load_value"]) for r in records]
    assert kinds[:2] == [("concurrency", 1.0), ("concurrency", 16.0)]  # synchronous, throughput (4 x batch)
    capacity = run_capacity(records, "rate", SLO)
    assert capacity.bound is None and capacity.value == pytest.approx(31.6, rel=0.1)
    assert len(records) <= 10


def test_a_search_spec_names_no_levels_and_a_spec_without_either_says_how() -> None:
    assert LoadRequest(search={"kind": "rate", "levels": 6}).search.kind == "rate"
    with pytest.raises(ValidationError, match="a search chooses its own levels"):
        LoadRequest(concurrency=[1], search={})
    with pytest.raises(ValidationError, match="search for the capacity"):
        LoadRequest()


def test_runs_beyond_the_levels_count_in_the_median_as_bounds() -> None:
    summary = summarize_censored(
        [Point(5.0), Point(6.0), Point(16.0, ABOVE), Point(16.0, ABOVE), Point(16.0, ABOVE), Point(7.0)]
    )
    # ranks: 5, 6, 7, >16, >16, >16: the median lies between 7 and a bound, so it is a bound
    assert (summary.n, summary.above, summary.median, summary.median_side) == (6, 3, 16.0, ABOVE)
    assert (summary.ci_low, summary.low_side, summary.ci_high, summary.high_side) == (5.0, None, 16.0, ABOVE)
    exact = summarize_censored([Point(v) for v in (5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0)])
    assert (exact.median, exact.median_side) == (8.0, None)
    mixed = summarize_censored([Point(1.0, BELOW), Point(3.0), Point(4.0)])
    assert (mixed.median, mixed.median_side, mixed.ci_low) == (3.0, None, None)  # 3 runs: no 95 % interval


def test_bounds_that_do_not_lie_beyond_the_figures_give_no_median() -> None:
    summary = summarize_censored([Point(5.0), Point(9.0), Point(8.0, ABOVE)])
    assert not summary.ranked and summary.median is None


def test_the_median_interval_on_ranks_covers_as_stated_with_censoring() -> None:
    """Capacities lognormal around 10, censored above 12 (about a third of
    runs) and below 7: the true median (10) lies in the interval at least
    95 % of the time at n = 8 and n = 12. Seeded, so it cannot flake; with
    4,000 draws a coverage of 95 % would read below 94 % with chance 0.1 %."""
    rng = np.random.default_rng(3)
    for n in (8, 12):
        covered = 0
        for _ in range(4000):
            draws = 10 * np.exp(rng.normal(0, 0.3, n))
            points = [Point(12.0, ABOVE) if v > 12 else Point(7.0, BELOW) if v < 7 else Point(float(v)) for v in draws]
            s = summarize_censored(points)
            low = -np.inf if s.low_side == BELOW else s.ci_low
            high = np.inf if s.high_side == ABOVE else s.ci_high
            covered += low <= 10 <= high
        assert covered / 4000 >= 0.94


def test_a_verdict_a_bound_could_overturn_is_not_made() -> None:
    low = [Point(v) for v in (4.0, 4.1, 3.9, 4.05, 3.95, 4.0)]
    high_beyond = [Point(8.0, ABOVE)] * 3 + [Point(v) for v in (7.9, 7.8, 7.95)]
    # the higher arm's bounds can only raise it: "better" stands
    result, note = compare_censored(low, high_beyond, min_effect=0.05, confidence=0.95)
    assert result.verdict == "better" and note is None
    # the baseline's bounds above only raise the baseline: "worse" stands too
    result, note = compare_censored(high_beyond, low, min_effect=0.05, confidence=0.95)
    assert result.verdict == "worse" and note is None
    # but against a higher arm they could put the baseline anywhere above it: no verdict
    higher = [Point(v) for v in (12.0, 12.2, 11.9, 12.1, 11.8, 12.05)]
    result, note = compare_censored(high_beyond, higher, min_effect=0.05, confidence=0.95)
    assert result.verdict == "inconclusive" and "overturn" in note
    # equivalence is never claimed beside a bound
    result, note = compare_censored(high_beyond, high_beyond, min_effect=0.05, confidence=0.95)
    assert result.verdict == "inconclusive" and note
