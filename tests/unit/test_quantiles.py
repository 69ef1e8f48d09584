"""What a sample count bounds of a percentile (omni.stats.quantiles): the
order-statistic upper bound, its coverage by simulation, and the counts
behind the figures the docs quote (299 for p99, 72 % at 32)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from omni.stats.quantiles import (
    bounded_quantile,
    min_samples,
    percent,
    percentile_bound,
    reach_note,
    upper_rank,
)

DRAWS = 4000


def _allowance(level: float, draws: int = DRAWS) -> float:
    """4 Monte Carlo standard errors of a rate ``level`` over ``draws``: a
    correct bound falls short of it by chance with P(Z < -4) = 3.2e-5."""
    return 4 * math.sqrt(level * (1 - level) / draws)


def test_p99_at_95_percent_needs_299_samples():
    # log(0.05) / log(0.99) = 298.07: the maximum of 299 lies above the p99 with chance 1 - 0.99^299 = 95.05 %
    assert min_samples(0.99) == 299 and (min_samples(0.95), min_samples(0.90), min_samples(0.5)) == (59, 29, 5)
    at = percentile_bound(range(299), 0.99)
    assert at.bounded and at.rank == 299 and at.upper == 298 and at.coverage == pytest.approx(1 - 0.99**299)
    short = percentile_bound(range(298), 0.99)
    assert not short.bounded and short.upper is None and short.needed == 299
    assert short.reach < 0.99 <= bounded_quantile(299)
    assert short.describe() == "298 samples bound only p98.9 at 95 % (p99 needs 299)"
    # with more samples the bound leaves the maximum: the 996th of 1000
    assert upper_rank(1000, 0.99) == 996 and percentile_bound(range(1000), 0.99).describe() == (
        "p99 <= 995 at 95 % (the 996th of 1000 samples)"
    )


def test_32_requests_leave_the_true_p99_above_all_of_them_72_percent_of_the_time():
    """The figure the docs quote, exactly (the binomial: no sample below the
    p99 is a chance of 0.99^n) and by a seeded simulation within 4 Monte
    Carlo standard errors (a false failure about 3 in 100,000)."""
    for n, share in ((32, 0.725), (16, 0.851)):
        exact = float(sps.binom.pmf(n, n, 0.99))  # all n below the p99
        assert round(exact, 3) == share
        draws = np.random.default_rng(n).lognormal(0, 1, (DRAWS, n))
        above = float(np.mean(draws.max(axis=1) < sps.lognorm.ppf(0.99, 1)))
        assert abs(above - exact) < _allowance(exact)
    assert reach_note(32, 0.99, samples="requests") == "32 requests bound only p91 at 95 % (p99 needs 299)"
    assert reach_note(16, 0.99, samples="requests") == "16 requests bound only p82.9 at 95 % (p99 needs 299)"
    assert reach_note(299, 0.99) is None
    assert bounded_quantile(32) == pytest.approx(0.05 ** (1 / 32)) and percent(0.05 ** (1 / 32), floor=True) == "91"


@pytest.mark.parametrize(
    "n, q",
    [(29, 0.90), (59, 0.95), (60, 0.5), (300, 0.99), (600, 0.99)],
)
def test_the_bound_holds_the_true_quantile_at_least_95_percent_of_the_time(n, q):
    """Over 4000 seeded skewed samples the bound lies at or above the true
    quantile at least as often as its exact coverage (>= 95 %) less 4 Monte
    Carlo standard errors: a correct bound fails this check by chance about
    3 times in 100,000, the 5 cases together about 2 in 10,000. The rank is
    the smallest that reaches 95 %: one lower would not."""
    truth = float(sps.lognorm.ppf(q, 1))
    draws = np.random.default_rng(n).lognormal(0, 1, (DRAWS, n))
    bounds = [percentile_bound(row, q) for row in draws]
    covered = float(np.mean([b.upper >= truth for b in bounds]))
    level = bounds[0].coverage
    assert level >= 0.95 and covered >= level - _allowance(level)
    assert sps.binom.cdf(bounds[0].rank - 2, n, q) < 0.95  # the next lower order statistic falls short
    assert bounds[0].upper == np.sort(draws[0])[bounds[0].rank - 1]


def test_a_discrete_distribution_is_bounded_at_least_as_often():
    # ties (a step time seen many times) only make x_(r) >= the quantile likelier
    draws = np.random.default_rng(5).poisson(20, (DRAWS, 59))
    truth = float(sps.poisson.ppf(0.95, 20))
    covered = float(np.mean([percentile_bound(row, 0.95).upper >= truth for row in draws]))
    assert covered >= 0.95 - _allowance(0.95)


@pytest.mark.parametrize("n", [5, 29, 59, 120, 299, 473, 1000])
def test_the_bound_is_scipys_one_sided_quantile_interval(n):
    values = np.random.default_rng(n).exponential(1.0, n)
    for q in (0.5, 0.9, 0.95, 0.99):
        high = sps.quantile_test(values, p=q, alternative="less").confidence_interval(0.95).high
        bound = percentile_bound(values, q)
        assert (bound.upper is None and math.isnan(high)) or bound.upper == high, (n, q)


def test_missing_values_are_left_out_and_a_percent_for_a_fraction_is_refused():
    assert percentile_bound([None, float("nan"), 1.0], 0.5).n == 1
    assert percentile_bound([], 0.99).describe() == "0 samples bound no percentile at 95 % (p99 needs 299)"
    with pytest.raises(ValueError, match=r"q is a quantile in \(0, 1\), got 99"):
        percentile_bound([1.0], 99)
