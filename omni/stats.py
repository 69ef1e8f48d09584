"""Statistics over measurements: pure functions, floats in, frozen dataclasses out.

No I/O, no pandas, no Prefect here (STYLE.md 4); numpy and scipy only.

A number is only useful next to its noise. Per arm and metric,
:func:`summarize` gives n, median, MAD, a robust CV, a bootstrap interval of
the median and the MAD outliers. Per arm against a baseline, :func:`compare`
gives the ratio of medians with an interval and a verdict:

- ``better`` / ``worse``: the interval of the ratio lies entirely on one side
  of 1 (which side is better comes from the column registry);
- ``within noise``: the interval holds 1 and the observed ratio is within
  twice the metric's noise floor (the smallest effect worth resolving:
  what :func:`passes_needed` sizes passes for);
- ``inconclusive``: the interval holds 1 but the observed ratio is beyond
  that: there may be an effect, and :func:`passes_needed` says how many
  passes would resolve it.

The interval is the bootstrap percentile interval of the ratio of medians,
widened where needed to what the noise floor implies at these n: with 3-5
passes a bootstrap interval is far too narrow (measured in the simulation
test: 18 % false positives over A/A comparisons at 5 passes, bootstrap
alone), the floor keeps it honest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats as sps

Better = Literal["higher", "lower"]
Verdict = Literal["better", "worse", "within noise", "inconclusive"]

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample x this = its standard deviation
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # se(median) / se(mean) for normal data
OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's modified z-score cut
RESAMPLES = 2000

# Default noise floors, relative standard deviation of one run's value on a
# shared host (../shared/DESIGN.md): end-to-end throughput and latency swing
# about 30 %, per-op self time about 5 %, RssAnon about 0.2 %. A floor
# measured on the host (omni calibrate) replaces these.
DEFAULT_FLOORS = {"time": 0.30, "memory": 0.002, "op": 0.05}
# The least a measured floor may say. An A/A calibration inside one sweep
# cannot see drift between sweeps: sleep-paced synthetic decode measured
# 0.3 % within a sweep and 0.7 % between two sweeps minutes apart.
MIN_FLOORS = {"time": 0.01, "memory": 0.0001, "op": 0.01}
# The smallest effect worth resolving, in noise floors. At 1 floor an A/A
# comparison at 5 passes lands "inconclusive" about 1 time in 5.
EFFECT_IN_FLOORS = 2.0


def _real(values: Iterable[float | None]) -> np.ndarray:
    arr = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    return arr[~np.isnan(arr)]


# --- one arm, one metric ---


@dataclass(frozen=True)
class Description:
    """n, median, min and max of one arm's values for one metric.

    Missing values (None, NaN: a failed run, a metric the engine does not
    report) are not values: ``n`` counts only real ones.
    """

    n: int
    median: float | None
    min: float | None
    max: float | None


def describe(values: Iterable[float | None]) -> Description:
    real = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not real:
        return Description(0, None, None, None)
    return Description(len(real), statistics.median(real), min(real), max(real))


@dataclass(frozen=True)
class Summary:
    """One arm's values of one metric, robustly.

    ``mad`` is the raw median absolute deviation; ``cv`` is the robust
    coefficient of variation, 1.4826 x MAD / |median|. ``ci_low``/``ci_high``
    bound the median (bootstrap percentile, ``None`` below 2 values).
    ``outliers`` are the values whose modified z-score exceeds 3.5.
    """

    n: int
    median: float | None
    mad: float | None
    cv: float | None
    ci_low: float | None
    ci_high: float | None
    min: float | None
    max: float | None
    outliers: tuple[float, ...] = ()


def mad(values: np.ndarray) -> float:
    return float(np.median(np.abs(values - np.median(values))))


def robust_cv(values: np.ndarray) -> float | None:
    med = float(np.median(values))
    return MAD_TO_SIGMA * mad(values) / abs(med) if med else None


def pooled_cv(samples: Iterable[np.ndarray]) -> tuple[float | None, int]:
    """Robust relative noise of one value, pooled over samples: 1.4826 x the
    median of each value's deviation from its own sample's median, relative
    to that median; and how many deviations went in. A sample whose median is
    0 has no relative deviations and is left out."""
    deviations = [np.abs(s / np.median(s) - 1) for s in samples if s.size and np.median(s) != 0]
    if not deviations:
        return None, 0
    pooled = np.concatenate(deviations)
    return MAD_TO_SIGMA * float(np.median(pooled)), int(pooled.size)


def outliers(values: np.ndarray) -> tuple[float, ...]:
    spread = mad(values)
    if spread == 0:
        return ()
    z = 0.6745 * (values - np.median(values)) / spread
    return tuple(float(v) for v in values[np.abs(z) > OUTLIER_Z])


def bootstrap_median_ci(values: np.ndarray, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    if len(values) < 2 or np.all(values == values[0]):
        med = float(np.median(values))
        return med, med
    res = sps.bootstrap(
        (values,), np.median, confidence_level=confidence, n_resamples=RESAMPLES,
        method="percentile", random_state=np.random.default_rng(seed), vectorized=True,
    )  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarize(values: Iterable[float | None], confidence: float = 0.95, seed: int = 0) -> Summary:
    real = _real(values)
    if real.size == 0:
        return Summary(0, None, None, None, None, None, None, None)
    low, high = bootstrap_median_ci(real, confidence, seed) if real.size >= 2 else (None, None)
    return Summary(
        n=int(real.size), median=float(np.median(real)), mad=mad(real), cv=robust_cv(real),
        ci_low=low, ci_high=high, min=float(real.min()), max=float(real.max()), outliers=outliers(real),
    )  # fmt: skip


# --- an arm against the baseline ---


@dataclass(frozen=True)
class Comparison:
    """``other`` against ``base`` for one metric: ratio of medians (other/base)."""

    n_base: int
    n_other: int
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    floor: float  # relative noise of one run, used for the verdict
    verdict: Verdict
    passes_needed: int | None  # per arm, to resolve the observed effect (inconclusive only)


def _ratio_of_medians(base: np.ndarray, other: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(other, axis=axis) / np.median(base, axis=axis)


def bootstrap_ratio_ci(base: np.ndarray, other: np.ndarray, confidence: float, seed: int) -> tuple[float, float]:
    if (np.all(base == base[0]) and np.all(other == other[0])) or len(base) < 2 or len(other) < 2:
        ratio = float(np.median(other) / np.median(base))
        return ratio, ratio
    res = sps.bootstrap(
        (base, other), _ratio_of_medians, confidence_level=confidence, n_resamples=RESAMPLES,
        method="percentile", paired=False, vectorized=True, random_state=np.random.default_rng(seed),
    )  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def floor_interval(ratio: float, n_base: int, n_other: int, floor: float, confidence: float) -> tuple[float, float]:
    """The narrowest honest interval of the ratio when one run's relative noise is ``floor``."""
    z = sps.norm.ppf(0.5 + confidence / 2)
    se = MEDIAN_EFFICIENCY * floor * math.sqrt(1 / n_base + 1 / n_other)
    return ratio * math.exp(-z * se), ratio * math.exp(z * se)


def compare(
    base: Sequence[float | None],
    other: Sequence[float | None],
    *,
    better: Better,
    floor: float,
    confidence: float = 0.95,
    seed: int = 0,
) -> Comparison:
    b, o = _real(base), _real(other)
    if b.size == 0 or o.size == 0 or np.median(b) == 0:
        return Comparison(int(b.size), int(o.size), None, None, None, floor, "inconclusive", None)
    ratio = float(np.median(o) / np.median(b))
    boot_low, boot_high = bootstrap_ratio_ci(b, o, confidence, seed)
    floor_low, floor_high = floor_interval(ratio, b.size, o.size, floor, confidence)
    low, high = min(boot_low, floor_low), max(boot_high, floor_high)
    needed = None
    if low > 1 or high < 1:
        higher = low > 1
        verdict: Verdict = "better" if higher == (better == "higher") else "worse"
    elif abs(math.log(ratio)) <= math.log1p(EFFECT_IN_FLOORS * floor):
        verdict = "within noise"
    else:
        verdict = "inconclusive"
        # sized at the noise seen here when it is worse than the floor says
        seen, _ = pooled_cv([b, o])
        needed = passes_needed(abs(ratio - 1), max(floor, seen or 0.0), confidence)
    return Comparison(int(b.size), int(o.size), ratio, low, high, floor, verdict, needed)


def passes_needed(effect: float, cv: float, confidence: float = 0.95, power: float = 0.8) -> int:
    """Passes per arm for an effect (relative, e.g. 0.2) to be detected with
    ``power`` at ``confidence`` when one run's relative noise is ``cv``:
    a two-sample test on log medians, n = 2 ((z_a + z_b) * 1.2533 cv / ln(1+effect))^2,
    plus two passes: where the bootstrap interval is the wider one it costs
    power at small n (simulated, effect 2 x cv: 0.78-0.80 at n + 1, 0.87 at n + 2)."""
    if effect <= 0:
        raise ValueError("effect must be > 0")
    z = sps.norm.ppf(0.5 + confidence / 2) + sps.norm.ppf(power)
    n = 2 * (z * MEDIAN_EFFICIENCY * cv / math.log1p(effect)) ** 2
    return max(3, math.ceil(n) + 2)


# --- tables over rows ---


@dataclass(frozen=True)
class ArmTable:
    """Per arm, per metric descriptions, in the order arms were given."""

    arms: tuple[str, ...]
    metrics: tuple[str, ...]
    cells: Mapping[tuple[str, str], Description]
    runs: Mapping[str, int]  # all runs of the arm, ok or not


def describe_arms(rows: Iterable[Mapping], metrics: tuple[str, ...], ok_status: str = "ok") -> ArmTable:
    """Describe each metric per arm over the rows whose status is ``ok_status``."""
    values: dict[tuple[str, str], list] = {}
    runs: dict[str, int] = {}
    for row in rows:
        arm = row["arm"]
        runs[arm] = runs.get(arm, 0) + 1
        for metric in metrics:
            bucket = values.setdefault((arm, metric), [])
            if row.get("status") == ok_status:
                bucket.append(row.get(metric))
    arms = tuple(runs)
    cells = {(a, m): describe(values.get((a, m), [])) for a in arms for m in metrics}
    return ArmTable(arms, metrics, cells, runs)
