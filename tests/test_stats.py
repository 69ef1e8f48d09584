"""Statistics on fixed data against values computed independently, and the
A/A simulation: false positives and power at the planner's passes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from omni.stats import (
    EFFECT_IN_FLOORS,
    compare,
    describe,
    floor_interval,
    passes_needed,
    summarize,
)


def test_summary_of_fixed_data():
    s = summarize([1, 2, 3, 4, 100, None, float("nan")])
    # by hand: median 3; |x - 3| = 2 1 0 1 97 -> MAD 1; CV = 1.4826 * 1 / 3
    assert (s.n, s.median, s.mad, s.min, s.max) == (5, 3.0, 1.0, 1.0, 100.0)
    assert s.cv == pytest.approx(1.4826 / 3)
    # modified z = 0.6745 (x - 3) / 1: only 100 (65.4) is beyond 3.5
    assert s.outliers == (100.0,)
    assert s.ci_low <= 3.0 <= s.ci_high and s.ci_low >= 1 and s.ci_high <= 100


def test_empty_constant_and_single_values():
    assert summarize([None]).n == 0 and summarize([]).median is None
    constant = summarize([5, 5, 5])
    assert (constant.mad, constant.cv, constant.ci_low, constant.ci_high, constant.outliers) == (0, 0, 5, 5, ())
    one = summarize([7])
    assert (one.n, one.median, one.ci_low) == (1, 7.0, None)
    assert describe([2, None, 4]).median == 3.0


def test_bootstrap_interval_of_the_median_matches_a_hand_rolled_bootstrap():
    """Percentile bootstrap written out in numpy (20000 resamples, another
    random stream): the bounds agree within Monte Carlo error."""
    values = np.random.default_rng(7).normal(100, 10, 200)
    s = summarize(values)
    rng = np.random.default_rng(99)
    medians = np.median(values[rng.integers(0, len(values), (20000, len(values)))], axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    se = medians.std()
    assert s.ci_low == pytest.approx(low, abs=0.3 * se) and s.ci_high == pytest.approx(high, abs=0.3 * se)
    assert s.cv == pytest.approx(1.4826 * np.median(np.abs(values - np.median(values))) / np.median(values))


def test_ratio_of_constant_samples_gets_the_floor_interval():
    c = compare([10, 10, 10], [20, 20, 20], better="higher", floor=0.1)
    # by hand: se = sqrt(pi/2) * 0.1 * sqrt(2/3) = 0.102333; 1.959964 se = 0.200570
    assert c.ratio == 2.0
    assert (c.ci_low, c.ci_high) == pytest.approx((2 * math.exp(-0.200570), 2 * math.exp(0.200570)), rel=1e-5)
    assert c.verdict == "better"
    assert floor_interval(1.0, 4, 4, 0.3, 0.95) == pytest.approx((math.exp(-0.521094), math.exp(0.521094)), rel=1e-5)


@pytest.mark.parametrize(
    "base, other, better, verdict",
    [
        ([100, 101, 99, 100, 100], [80, 81, 79, 80, 80], "higher", "worse"),  # throughput down 20 %
        ([100, 101, 99, 100, 100], [80, 81, 79, 80, 80], "lower", "better"),  # latency down 20 %
        ([100, 101, 99, 100, 100], [101, 100, 100, 99, 101], "higher", "within noise"),
        ([100, 60, 140], [70, 130, 50], "higher", "inconclusive"),  # 30 % apart, too noisy to tell
    ],
)
def test_verdicts(base, other, better, verdict):
    c = compare(base, other, better=better, floor=0.02)
    assert c.verdict == verdict, c
    assert (c.passes_needed is not None) == (verdict == "inconclusive")


def test_passes_needed_by_hand():
    # 2 ((1.959964 + 0.841621) * 1.253314 * 0.1 / ln 1.2)^2 = 7.418 -> 8, plus 2
    assert passes_needed(0.2, 0.1) == 10
    assert passes_needed(0.5, 0.01) == 3  # never below 3
    with pytest.raises(ValueError):
        passes_needed(0, 0.1)


def test_a_a_false_positives_and_power_at_the_planned_passes():
    """200 A/A comparisons on log-normal noise (CV 10 %, 5 passes) call at
    most 5 % of them better or worse at 95 % nominal; an effect of twice the
    noise CV is found at least 80 % of the time at the passes the planner
    recommends. Measured: 0.5 % false positives (bootstrap alone: 2.5 % at 5
    passes, 8 % at 3), power 0.87 at the planner's 10 passes."""
    rng = np.random.default_rng(2026)
    cv = 0.10
    draw = lambda center, n: center * np.exp(rng.normal(0, cv, n))  # noqa: E731
    false = sum(
        compare(draw(100, 5), draw(100, 5), better="higher", floor=cv, seed=i).verdict in ("better", "worse")
        for i in range(200)
    )
    assert false / 200 <= 0.05
    effect = EFFECT_IN_FLOORS * cv
    n = passes_needed(effect, cv)
    found = sum(
        compare(draw(100, n), draw(100 * (1 + effect), n), better="higher", floor=cv, seed=i).verdict == "better"
        for i in range(200)
    )
    assert found / 200 >= 0.80, (found, n)
