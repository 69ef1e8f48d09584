"""What a sample count says of a percentile: the distribution-free upper
confidence bound of a quantile from an order statistic, and the quantile a
count can bound at all. Pure: floats in, a frozen dataclass out.

omni states a percentile as its peers do, the interpolated sample
percentile (numpy's "linear" rule, ``vllm bench serve``'s p99). From few
samples that is close to their maximum: the true 99th percentile lies above
every one of 32 samples with chance 0.99^32 = 72.5 % (85.1 % at 16). So
beside each stored p99 omni keeps the count and, where the count allows it,
an upper bound of the true percentile that holds at 95 %; an SLO is judged
met only on that bound. MLPerf Inference likewise states a percentile only
with the sample count that bounds it (its minimum query counts).

The bound: of n independent draws of one continuous distribution, the r-th
smallest, x_(r), lies at or above the q-quantile unless r or more draws fall
below it, so P(x_(r) >= the q-quantile) = P(Bin(n, q) <= r - 1), the
binomial CDF at r - 1 (e.g. David and Nagaraja, Order Statistics, 3rd ed.,
section 7.1; the one-sided interval of ``scipy.stats.quantile_test``). The
bound is the smallest r whose chance reaches the confidence; for any
distribution, discrete ones included, the chance is at least that. None
reaches it when even the maximum falls short: 1 - q^n < confidence, i.e.
n < log(1 - confidence) / log(q), 299 samples for p99 at 95 % (59 for p95,
29 for p90). n samples bound at 95 % at most the quantile their maximum
bounds, q' = 0.05^(1/n): p91 at 32, p82.9 at 16.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

# every bound omni stores is at this level (the columns say "upper95")
BOUND_CONFIDENCE = 0.95


@dataclass(frozen=True)
class PercentileBound:
    """The order-statistic upper bound of the ``q``-quantile from ``n``
    samples at ``confidence``: ``upper`` = the ``rank``-th smallest sample
    (1-based, ``n`` = the maximum), which lies at or above the true quantile
    with chance ``coverage`` >= ``confidence``. ``upper``, ``rank`` and
    ``coverage`` are None where ``n`` samples cannot bound it (fewer than
    ``needed``); ``reach`` is then the highest quantile they can bound."""

    q: float
    n: int
    confidence: float
    upper: float | None
    rank: int | None
    coverage: float | None

    @property
    def bounded(self) -> bool:
        return self.upper is not None

    @property
    def needed(self) -> int:
        """The fewest samples that bound the ``q``-quantile at ``confidence``."""
        return min_samples(self.q, self.confidence)

    @property
    def reach(self) -> float | None:
        """The highest quantile ``n`` samples bound at ``confidence`` (their maximum's)."""
        return bounded_quantile(self.n, self.confidence)

    def describe(self, samples: str = "samples") -> str:
        """``p99 <= 41.2 at 95 % (the 299th of 300 samples)`` or, unbounded,
        ``32 samples bound only p91 at 95 % (p99 needs 299)``."""
        if not self.bounded:
            return reach_note(self.n, self.q, self.confidence, samples) or ""
        level = f"{100 * self.confidence:g} %"
        return f"p{percent(self.q)} <= {self.upper:.4g} at {level} (the {_ordinal(self.rank)} of {self.n} {samples})"


def _check(q: float, confidence: float) -> None:
    # a percent (99) where a fraction (0.99) is meant is the likely slip
    if not 0 < q < 1:
        raise ValueError(f"q is a quantile in (0, 1), got {q}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence is in (0, 1), got {confidence}")


def upper_rank(n: int, q: float, confidence: float = BOUND_CONFIDENCE) -> int | None:
    """The rank (1-based) of the order statistic of ``n`` samples that bounds
    the ``q``-quantile from above at ``confidence``: the smallest r with
    P(Bin(n, q) <= r - 1) >= confidence; None where r would pass ``n``.
    Taken as ``scipy.stats.quantile_test``'s one-sided interval takes it
    (``binom.isf``), so the two agree on every n."""
    _check(q, confidence)
    if n < 1:
        return None
    rank = int(sps.binom.isf(1 - confidence, n, q)) + 1
    return rank if rank <= n else None


def min_samples(q: float, confidence: float = BOUND_CONFIDENCE) -> int:
    """The fewest samples whose maximum bounds the ``q``-quantile at
    ``confidence``: the smallest n with 1 - q^n >= confidence, i.e.
    n >= log(1 - confidence) / log(q) (299 for p99 at 95 %)."""
    _check(q, confidence)
    n = max(1, math.ceil(math.log(1 - confidence) / math.log(q)))
    # the ceiling of a rounded ratio may be one off where it is near an integer: settle it by the rank rule
    while n > 1 and upper_rank(n - 1, q, confidence) is not None:
        n -= 1
    while upper_rank(n, q, confidence) is None:
        n += 1
    return n


def bounded_quantile(n: int, confidence: float = BOUND_CONFIDENCE) -> float | None:
    """The highest quantile ``n`` samples bound at ``confidence``: their
    maximum bounds q' where 1 - q'^n = confidence, q' = (1 - confidence)^(1/n)
    (0.9107 at 32, 0.8293 at 16); None for no samples."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence is in (0, 1), got {confidence}")
    return (1 - confidence) ** (1 / n) if n >= 1 else None


def percentile_bound(
    samples: Iterable[float | None], q: float, confidence: float = BOUND_CONFIDENCE
) -> PercentileBound:
    """The order-statistic upper bound of the ``q``-quantile (a fraction:
    0.99 for p99) of ``samples`` at ``confidence`` (None and NaN left out),
    or, where their count cannot bound it, what it can (module docstring).
    Assumes independent draws of one distribution."""
    values = np.sort(np.array([np.nan if v is None else float(v) for v in samples], dtype=float))
    values = values[~np.isnan(values)]
    n = int(values.size)
    rank = upper_rank(n, q, confidence)
    if rank is None:
        return PercentileBound(q, n, confidence, None, None, None)
    coverage = float(sps.binom.cdf(rank - 1, n, q))
    return PercentileBound(q, n, confidence, float(values[rank - 1]), rank, coverage)


def reach_note(n: int, q: float, confidence: float = BOUND_CONFIDENCE, samples: str = "samples") -> str | None:
    """What ``n`` samples bound where they cannot bound the ``q``-quantile,
    ``32 requests bound only p91 at 95 % (p99 needs 299)``; None where they can."""
    if upper_rank(n, q, confidence) is not None:
        return None
    reach = bounded_quantile(n, confidence)
    what = f"only p{percent(reach, floor=True)}" if reach is not None else "no percentile"
    return f"{n} {samples} bound {what} at {100 * confidence:g} % (p{percent(q)} needs {min_samples(q, confidence)})"


def percent(q: float, floor: bool = False) -> str:
    """A quantile as a percentile's name: 0.99 -> "99", 0.9107 -> "91.1" (or
    "91" floored: a bound on p91.07 is one on p91, not on p91.1)."""
    tenths = math.floor(q * 1000 + 1e-9) if floor else round(q * 1000)
    return f"{tenths / 10:g}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
