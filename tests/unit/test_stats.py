"""Statistics on fixed data against values computed independently, and the
simulations of the decision rule: A/A false positives at 3, 5 and 10
passes, power at the planner's passes, a 20 % effect, equivalence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from omni.stats import (
    compare,
    describe,
    passes_needed,
    summarize,
    within_run_variance,
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


def test_welch_interval_by_hand():
    c = compare([100, 110, 90], [120, 130, 125], better="higher", min_effect=0.05)
    # by hand (numpy only): logs, Welch se and df, t quantile from scipy.stats.t
    lb, lo = np.log([100, 110, 90]), np.log([120, 130, 125])
    sb, so = lb.var(ddof=1) / 3, lo.var(ddof=1) / 3
    df = (sb + so) ** 2 / (sb**2 / 2 + so**2 / 2)
    from scipy.stats import t

    half = t.ppf(0.975, df) * math.sqrt(sb + so)
    diff = lo.mean() - lb.mean()
    assert c.ratio == pytest.approx(math.exp(diff))
    assert (c.ci_low, c.ci_high) == pytest.approx((math.exp(diff - half), math.exp(diff + half)))
    assert c.verdict == "better" and not c.below_min_effect and c.passes_needed is None


def test_constant_samples_and_drift():
    same = compare([10, 10, 10], [10, 10, 10], better="higher", min_effect=0.05)
    assert (same.verdict, same.ci_low, same.ci_high) == ("equivalent", 1.0, 1.0)
    apart = compare([10, 10, 10], [10.1, 10.1, 10.1], better="higher", min_effect=0.05)
    assert apart.verdict == "better" and apart.below_min_effect  # real, but 1 % < 5 %
    # two sweeps: a 1 % drift per sweep widens by 1.959964 * sqrt(2) * 0.01 on the log scale
    drifted = compare([10, 10, 10], [10, 10, 10], better="higher", min_effect=0.05, drift=0.01)
    assert drifted.ci_high == pytest.approx(math.exp(1.959964 * math.sqrt(2) * 0.01), rel=1e-5)
    assert drifted.verdict == "equivalent"


@pytest.mark.parametrize(
    "base, other, better, verdict",
    [
        ([100, 101, 99, 100, 100], [80, 81, 79, 80, 80], "higher", "worse"),  # throughput down 20 %
        ([100, 101, 99, 100, 100], [80, 81, 79, 80, 80], "lower", "better"),  # latency down 20 %
        ([100, 101, 99, 100, 100], [101, 100, 100, 99, 101], "higher", "equivalent"),
        ([100, 60, 140], [70, 130, 50], "higher", "inconclusive"),  # 30 % apart, too noisy to tell
        ([100], [80], "higher", "inconclusive"),  # one run each: no noise seen, nothing to say
    ],
)
def test_verdicts(base, other, better, verdict):
    c = compare(base, other, better=better, min_effect=0.05)
    assert c.verdict == verdict, c
    assert (c.passes_needed is not None) == (verdict == "inconclusive")


def test_the_old_rule_hid_a_20_percent_regression_the_new_one_names_it():
    """Issue 11's case: sleep-paced decode, spread well under 1 %, one arm 25 %
    slower. The old rule said "within noise: x0.802 [0.503, 1.278]"."""
    before = [101.2, 100.8, 101.0, 100.9, 101.1]
    after = [81.0, 80.9, 81.2, 80.8, 81.1]
    c = compare(before, after, better="higher", min_effect=0.05, drift=0.01)
    assert c.verdict == "worse" and 0.79 < c.ratio < 0.81 and c.ci_high < 0.83


def test_passes_needed_by_hand():
    # n = 2 ((t.975(n-1) + t.8(n-1)) 0.02 / ln 1.05)^2: n=5 -> 2 (2.776 + 0.941)^2 0.168 = 4.64 <= 5; n=4 -> 5.7 > 4
    assert passes_needed(0.05, 0.02) == 5
    assert passes_needed(0.5, 0.01) == 3  # never below 3
    with pytest.raises(ValueError):
        passes_needed(0, 0.1)


def test_passes_needed_is_the_least_n_counting_up_from_3():
    """The search starts at the normal quantiles' n; the answer is the one a
    count from 3 to 10,000 gives (here every n at once, vectorized)."""
    from scipy import stats as sps

    n = np.arange(3, 10_000)
    for effect in (0.01, 0.02, 0.05, 0.2, 1.0):
        for cv in (0.0, 1e-4, 0.005, 0.02, 0.1, 0.3, 2.0, math.inf, math.nan):
            for confidence, power in ((0.95, 0.8), (0.9, 0.9), (0.99, 0.5)):
                t = sps.t.ppf(0.5 + confidence / 2, n - 1) + sps.t.ppf(power, n - 1)
                ok = n >= 2 * (t * cv / math.log1p(effect)) ** 2
                expected = int(n[ok][0]) if ok.any() else 10_000
                assert passes_needed(effect, cv, confidence, power) == expected, (effect, cv, confidence, power)


SIMULATIONS = 400
# Monte Carlo allowance on a 5 % rate over SIMULATIONS draws: 2 standard errors
FP_BOUND = 0.05 + 2 * math.sqrt(0.05 * 0.95 / SIMULATIONS)


def draw(rng, center: float, cv: float, n: int) -> np.ndarray:
    return center * np.exp(rng.normal(0, cv, n))


@pytest.mark.parametrize("passes", [3, 5, 10])
def test_a_a_false_positives_at_95_percent(passes):
    """A/A on log-normal noise (CV 10 %): better/worse at most 5 % of the time
    (plus Monte Carlo error). Measured over 2000: 3.6 % at 3 passes, 4.0 % at
    5, 4.7 % at 10 (Welch's df makes it a little conservative at small n)."""
    rng = np.random.default_rng(passes)
    false = sum(
        compare(draw(rng, 100, 0.1, passes), draw(rng, 100, 0.1, passes), better="higher", min_effect=0.05).verdict
        in ("better", "worse")
        for _ in range(SIMULATIONS)
    )
    assert false / SIMULATIONS <= FP_BOUND, false


@pytest.mark.parametrize("cv", [0.01, 0.02, 0.05])
def test_min_effect_found_with_80_percent_power_at_the_planned_passes(cv):
    rng = np.random.default_rng(int(cv * 1000))
    n = passes_needed(0.05, cv)
    found = sum(
        compare(draw(rng, 100, cv, n), draw(rng, 105, cv, n), better="higher", min_effect=0.05).verdict == "better"
        for _ in range(200)
    )
    assert found / 200 >= 0.80, (found, n)


def test_a_20_percent_effect_at_5_passes_and_1_percent_noise_is_always_worse():
    rng = np.random.default_rng(20)
    verdicts = {
        compare(draw(rng, 100, 0.01, 5), draw(rng, 80, 0.01, 5), better="higher", min_effect=0.05).verdict
        for _ in range(200)
    }
    assert verdicts == {"worse"}


def test_a_a_with_enough_passes_is_equivalent():
    """10 passes at 2 % noise against a 5 % margin (the planner asks 5 to
    detect 5 %; at 5, A/A came out equivalent 80 % of the time)."""
    rng = np.random.default_rng(10)
    verdicts = [
        compare(draw(rng, 100, 0.02, 10), draw(rng, 100, 0.02, 10), better="higher", min_effect=0.05).verdict
        for _ in range(200)
    ]
    assert verdicts.count("equivalent") / 200 >= 0.9, {v: verdicts.count(v) for v in set(verdicts)}
    assert verdicts.count("better") + verdicts.count("worse") <= 200 * FP_BOUND


def hierarchical_runs(rng, center: float, between: float, within: float, passes: int, k: int = 5):
    """Run medians of ``k`` iterations each, and each run's sd of log iteration
    values: a run level drawn with sd ``between``, iterations around it with ``within``."""
    levels = np.log(center) + rng.normal(0, between, passes)
    iters = levels[:, None] + rng.normal(0, within, (passes, k))
    return np.exp(np.median(iters, axis=1)), iters.std(axis=1, ddof=1)


@pytest.mark.parametrize("passes", [3, 5, 10])
@pytest.mark.parametrize("between,within", [(0.02, 0.02), (0.0, 0.05)])
def test_a_a_runs_of_iterations_false_positives(passes, between, within):
    """Hierarchical A/A: run medians of 5 iterations, the within-run floor on.
    Better/worse at most 5 % (+ Monte Carlo error) over 200 comparisons."""
    rng = np.random.default_rng(passes * 7 + int(within * 100))
    k, false = 5, 0
    for _ in range(SIMULATIONS):
        (b, sb), (o, so) = (hierarchical_runs(rng, 100, between, within, passes, k) for _ in range(2))
        within_var = (within_run_variance(sb, [k] * passes), within_run_variance(so, [k] * passes))
        false += compare(b, o, better="higher", min_effect=0.05, within=within_var).verdict in ("better", "worse")
    assert false / SIMULATIONS <= FP_BOUND, false


def test_within_run_spread_floors_a_lucky_quiet_between_run_variance():
    # three runs whose medians happen to agree to 0.05 %, from iterations that spread 5 %
    base, other = [100.0, 100.05, 99.95], [102.0, 102.05, 101.95]
    quiet = compare(base, other, better="higher", min_effect=0.05)
    floor = within_run_variance([0.05] * 3, [5] * 3)
    assert floor == pytest.approx(math.pi / 2 * 0.05**2 / 5)
    honest = compare(base, other, better="higher", min_effect=0.05, within=(floor, floor))
    assert quiet.verdict == "better" and quiet.below_min_effect  # 2 %, certain on 3 agreeing runs
    assert honest.verdict == "inconclusive" and honest.noise == pytest.approx(math.sqrt(floor))
    assert within_run_variance([None, float("nan")], [5, 5]) == 0.0  # no iterations recorded: no floor
