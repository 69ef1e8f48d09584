"""Statistics over measurements: pure functions, floats in, frozen dataclasses out.

No I/O, no pandas, no Prefect here (STYLE.md 4); numpy and scipy only.

A number is only useful next to its noise. Per arm and metric,
:func:`summarize` gives n, median, MAD, a robust CV, a bootstrap interval of
the median and the MAD outliers. Per arm against a baseline, :func:`compare`
gives the ratio with an interval and a verdict, against ``min_effect``, the
smallest relative effect that matters (an equivalence margin):

- ``better`` / ``worse``: the interval excludes 1 (which side is better comes
  from the column registry); ``below_min_effect`` when the whole interval
  lies inside +-min_effect: real, but smaller than what matters;
- ``equivalent``: the interval lies inside +-min_effect and holds 1. The only
  verdict that may read as "no difference";
- ``inconclusive``: anything else; ``passes_needed`` says how many passes
  per arm would resolve an effect of min_effect.

The interval: Welch's t interval on the difference of mean log run values
(a ratio of geometric means; a run's value is the median of its
iterations), df by Welch-Satterthwaite, with a known between-sweep ``drift``
added to the variance when the two samples come from different sweeps
(interleaving cancels drift only within a sweep). Noise is estimated from the
compared data itself, hierarchically: the between-run variance of run
values, floored per side by the variance of a run's median that the spread
of its own iterations implies. At 3-5 passes it stays honest where
a bootstrap does not: over A/A comparisons of log-normal data, 3.6 % false
positives at 3 passes (tests/unit/test_stats.py simulates it), where a percentile
bootstrap of the ratio of medians gave 8 % when the rule was chosen.

Where the runs of a sweep sit on several slots the interval is instead the
arm coefficient of an arm + slot fit in log space (:func:`blocked_log_interval`).
An arm is judged on many metrics at once; :func:`adjust_for_multiplicity`
sets each metric's interval level so that an arm identical to the baseline
is called different on any of them at most 5 % of the time.
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
Verdict = Literal["better", "worse", "equivalent", "inconclusive"]

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample x this = its standard deviation
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # se(median) / se(mean) for normal data
OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's modified z-score cut
RESAMPLES = 2000
# Fewer runs than this get no interval of the median: with n runs the
# percentile bootstrap's 95 % interval of the median is [min, max], whose
# coverage is 1 - 2 (1/2)^n: 75 % at 3 runs, 87.5 % at 4. min and max are
# shown beside it anyway; a "95 %" label on them would claim what they are not.
MIN_INTERVAL_RUNS = 5

# Default noise of one run's value on a shared host (../shared/DESIGN.md):
# end-to-end throughput and latency swing about 30 %, per-op self time about
# 5 %, RssAnon about 0.2 %. Only the report's trend bands use these, where no
# calibration measured the workload; verdicts measure noise from their data.
DEFAULT_FLOORS = {"time": 0.30, "memory": 0.002, "op": 0.05}
# The smallest effect that matters, by kind of metric, unless the spec says
# (min_effect): 5 % of a time or rate, 1 % of memory, 5 % of an op's time.
DEFAULT_MIN_EFFECT = {"time": 0.05, "memory": 0.01, "op": 0.05}
# Between-sweep drift of one sweep's level (relative sd) assumed when two
# sweeps are compared: the 0.7 % measured between two sweeps minutes apart,
# rounded up. It does not shrink with passes.
DEFAULT_DRIFT = {"time": 0.01, "memory": 0.0001, "op": 0.01}
# The least drift a calibration may claim: two sweeps estimate it from one
# degree of freedom, and a lucky pair must not make cross-sweep verdicts exact.
MIN_DRIFT = {"time": 0.002, "memory": 0.00005, "op": 0.002}


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
    bound the median (bootstrap percentile, ``None`` below
    :data:`MIN_INTERVAL_RUNS` values: there it would be [min, max], at
    :func:`min_max_coverage`, far below its nominal level).
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
        (values,),
        np.median,
        confidence_level=confidence,
        n_resamples=RESAMPLES,
        method="percentile",
        random_state=np.random.default_rng(seed),
        vectorized=True,
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def min_max_coverage(n: int) -> float:
    """The chance that [min, max] of n values holds their median: all n on
    one side of it has chance 2 (1/2)^n (the sign test's order-statistic
    interval, e.g. Hollander and Wolfe, Nonparametric Statistical Methods)."""
    return 1 - 2 * 0.5**n if n >= 1 else 0.0


def summarize(values: Iterable[float | None], confidence: float = 0.95, seed: int = 0) -> Summary:
    real = _real(values)
    if real.size == 0:
        return Summary(0, None, None, None, None, None, None, None)
    enough = real.size >= MIN_INTERVAL_RUNS
    low, high = bootstrap_median_ci(real, confidence, seed) if enough else (None, None)
    return Summary(
        n=int(real.size),
        median=float(np.median(real)),
        mad=mad(real),
        cv=robust_cv(real),
        ci_low=low,
        ci_high=high,
        min=float(real.min()),
        max=float(real.max()),
        outliers=outliers(real),
    )


# --- an arm against the baseline ---


@dataclass(frozen=True)
class Comparison:
    """``other`` against ``base`` for one metric: ratio of geometric means
    (other/base) of the run values, its interval and the verdict."""

    n_base: int
    n_other: int
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    min_effect: float  # the equivalence margin, relative
    noise: float | None  # pooled sd of log run values: one run's relative noise, seen here
    drift: float  # between-sweep sd added (0 within one sweep)
    verdict: Verdict
    below_min_effect: bool = False  # better/worse, but the whole interval is inside +-min_effect
    passes_needed: int | None = None  # per arm, to resolve min_effect (inconclusive only)
    confidence: float = 0.95  # of the interval: above 0.95 where adjusted for the metrics judged with it
    blocked: bool = False  # judged within blocks (slots): the interval is blocked_log_interval's


def pooled_log_sd(samples: Iterable[np.ndarray]) -> float | None:
    """Pooled sd of log values over samples of positive values (each sample's
    own mean removed): one run's relative noise. ``None`` without 2 values."""
    logs = [np.log(s) for s in samples if s.size > 1]
    dof = sum(x.size - 1 for x in logs)
    if not dof:
        return None
    return math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / dof)


def welch_log_interval(
    b: np.ndarray, o: np.ndarray, confidence: float, drift: float = 0.0, within: tuple[float, float] = (0.0, 0.0)
) -> tuple[float, float, float, float]:
    """(difference of mean logs, its half-width, pooled sd of logs, df).

    Welch's two-sample t interval (Welch 1947, df by Satterthwaite 1946) on
    log values; ``drift`` (a relative sd per sweep) adds 2 drift^2 to the
    variance of the difference, with infinite degrees of freedom of its own.
    ``within`` is, per side, the variance of one run's log value that its
    own iterations imply: the between-run variance of run values cannot be
    smaller, so a side whose few runs happened to agree is floored at it.
    """
    lb, lo = np.log(b), np.log(o)
    vb, vo = max(float(lb.var(ddof=1)), within[0]), max(float(lo.var(ddof=1)), within[1])
    sb, so = vb / lb.size, vo / lo.size
    extra = 2 * drift**2
    var = sb + so + extra
    diff = float(lo.mean() - lb.mean())
    noise = pooled_log_sd([b, o])
    if var == 0:
        return diff, 0.0, noise, math.inf
    parts = sb**2 / (lb.size - 1) + so**2 / (lo.size - 1)
    df = math.inf if parts == 0 else var**2 / parts
    t = float(sps.t.ppf(0.5 + confidence / 2, df)) if math.isfinite(df) else float(sps.norm.ppf(0.5 + confidence / 2))
    return diff, t * math.sqrt(var), noise, df


def blocked_log_interval(
    b: np.ndarray,
    o: np.ndarray,
    blocks: tuple[Sequence, Sequence],
    confidence: float,
    drift: float = 0.0,
    within: tuple[float, float] = (0.0, 0.0),
) -> tuple[float, float, float, float] | None:
    """(difference of log means, its half-width, residual sd, df) with the
    block (a slot) as a blocking factor; None where it cannot be fitted.

    Least squares of log value = level + arm + block (an additive two-way
    model without interaction, e.g. Montgomery, Design and Analysis of
    Experiments, ch. 4): the arm coefficient is the difference of the arms
    within blocks, its variance s^2 (X'X)^-1 from the residual variance at
    n - parameters degrees of freedom. A slot on another socket or nearer the
    orchestrator shifts every run on it; unblocked, that shift is noise (a
    wider interval) or, where arms visited slots unequally, bias. The
    residual variance is floored by ``within`` as Welch's is, and the
    between-sweep ``drift`` adds 2 drift^2. None when the runs sit in one
    block, a block label is missing, or the arm is confounded with the
    blocks (no degree of freedom left): the caller falls back to Welch.
    """
    labels = [*blocks[0], *blocks[1]]
    if len(labels) != b.size + o.size or any(v is None or (isinstance(v, float) and math.isnan(v)) for v in labels):
        return None
    levels = sorted(set(labels))
    if len(levels) < 2:
        return None
    y = np.concatenate([np.log(b), np.log(o)])
    arm = np.r_[np.zeros(b.size), np.ones(o.size)]
    x = np.column_stack([np.ones(y.size), arm, *[[float(v == level) for v in labels] for level in levels[1:]]])
    df = y.size - x.shape[1]
    if df < 1 or np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    s2 = max(float(resid @ resid) / df, *within)
    var = s2 * float(np.linalg.inv(x.T @ x)[1, 1]) + 2 * drift**2
    t = float(sps.t.ppf(0.5 + confidence / 2, df))
    return float(coef[1]), t * math.sqrt(var), math.sqrt(s2), float(df)


def _positive(values: Sequence[float | None], blocks: Sequence | None) -> tuple[np.ndarray, list]:
    """The real, positive values and the block of each (blocks None: all None)."""
    blocks = blocks if blocks is not None else [None] * len(values)
    kept = [
        (float(v), k) for v, k in zip(values, blocks) if v is not None and not math.isnan(float(v)) and float(v) > 0
    ]
    return np.array([v for v, _ in kept], dtype=float), [k for _, k in kept]


def _exp(x: float) -> float:
    """e^x, inf past the float range: at 2 runs a side and a Bonferroni
    level, t has one degree of freedom and a log interval can be hundreds of
    units wide (a ratio interval of [0, inf] says what that is)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def compare(
    base: Sequence[float | None],
    other: Sequence[float | None],
    *,
    better: Better,
    min_effect: float,
    drift: float = 0.0,
    confidence: float = 0.95,
    within: tuple[float, float] = (0.0, 0.0),
    blocks: tuple[Sequence, Sequence] | None = None,
) -> Comparison:
    """Judge ``other`` against ``base`` with an equivalence margin (see module doc).

    Values must be positive (times, rates, bytes): the ratio lives on a log
    scale. Fewer than 2 values on a side is ``inconclusive``: no noise seen.
    ``within``: per side, the variance of a run's log value implied by its
    iterations (:func:`within_run_variance`), a floor on the between-run one.
    ``blocks``: per side, the block (slot) of each value; where the runs span
    2 blocks or more the interval is :func:`blocked_log_interval`'s, else Welch's.
    ``confidence`` is the interval's (:func:`adjust_for_multiplicity` sets it per metric).
    """
    b, b_blocks = _positive(base, blocks[0] if blocks else None)
    o, o_blocks = _positive(other, blocks[1] if blocks else None)
    if b.size < 2 or o.size < 2:
        ratio = float(np.median(o) / np.median(b)) if b.size and o.size else None
        return Comparison(
            int(b.size),
            int(o.size),
            ratio,
            None,
            None,
            min_effect,
            None,
            drift,
            "inconclusive",
            passes_needed=3,
            confidence=confidence,
        )
    fitted = blocked_log_interval(b, o, (b_blocks, o_blocks), confidence, drift, within) if blocks else None
    diff, half, noise, _ = fitted or welch_log_interval(b, o, confidence, drift, within)
    noise = max(noise, math.sqrt(max(within)))
    ratio, low, high = _exp(diff), _exp(diff - half), _exp(diff + half)
    margin = math.log1p(min_effect)
    inside = -margin <= diff - half and diff + half <= margin
    common = {"confidence": confidence, "blocked": fitted is not None}
    if low > 1 or high < 1:
        verdict: Verdict = "better" if (low > 1) == (better == "higher") else "worse"
        return Comparison(
            b.size, o.size, ratio, low, high, min_effect, noise, drift, verdict, below_min_effect=inside, **common
        )
    if inside:
        return Comparison(b.size, o.size, ratio, low, high, min_effect, noise, drift, "equivalent", **common)
    needed = passes_needed(min_effect, max(noise, drift), confidence)
    return Comparison(
        b.size, o.size, ratio, low, high, min_effect, noise, drift, "inconclusive", passes_needed=needed, **common
    )


# --- many metrics per arm ---

ALPHA = 0.05  # the chance, per arm against the baseline, of calling an A/A arm different on any metric
# The primary metrics' share of ALPHA; the rest of the judged metrics share the remainder.
PRIMARY_SHARE = 0.8


@dataclass(frozen=True)
class Adjustment:
    """Each metric's interval level when one arm is judged on many metrics.

    A weighted Bonferroni split of ``alpha`` (Holm 1979 sec. 2; any
    dependence between the metrics, which reciprocal pairs such as TTFT and
    prefill rate have in full): the primary metrics share ``PRIMARY_SHARE`` of
    it equally, the others the rest, so the chance that an arm identical to
    the baseline is called better or worse on any metric is at most
    ``alpha``. Intervals rather than Holm's step-down: a verdict reads off its
    interval, and Holm's has no interval of its own (a step-down on p-values
    would leave the printed intervals at a level no verdict used).
    """

    alpha: float
    primary: tuple[str, ...]
    secondary: tuple[str, ...]
    confidence: Mapping[str, float]
    # passes: auto (omni.sequential.look_levels): the split's levels before
    # spending, and the look (passes done, most passes) whose slice ``confidence`` is
    fixed: Mapping[str, float] | None = None
    look: tuple[int, int] | None = None
    stopped: str | None = None  # passes: auto: why the sweep stopped, when it has

    def describe(self) -> str:
        def level(names: tuple[str, ...], confidence: Mapping[str, float]) -> str:
            return f"{len(names)} at {100 * confidence[names[0]]:.4g} % each" if names else "none"

        fixed = self.fixed or self.confidence
        text = (
            f"Bonferroni, weighted, family-wise {self.alpha:.0%} per arm against the baseline: "
            f"primary metrics {level(self.primary, fixed)}, the others {level(self.secondary, fixed)}"
        )
        if self.look is None:
            return text
        return (
            f"{text}; passes: auto, each metric's share spent over the looks at passes 3 to {self.look[1]} "
            f"(alpha (n/{self.look[1]})^2): the look after pass {self.look[0]} is at "
            f"primary {level(self.primary, self.confidence)}, the others {level(self.secondary, self.confidence)}"
            + (f"; {self.stopped}" if self.stopped else "")
        )


def adjust_for_multiplicity(metrics: Sequence[str], primary: Sequence[str], alpha: float = ALPHA) -> Adjustment:
    """The level of each of ``metrics``' intervals (see :class:`Adjustment`);
    ``primary``: the spec's primary metrics (those not in ``metrics`` have no values and are left out)."""
    first = tuple(m for m in metrics if m in primary)
    rest = tuple(m for m in metrics if m not in primary)
    share = PRIMARY_SHARE if first and rest else 1.0 if first else 0.0
    confidence = {m: 1 - alpha * share / len(first) for m in first}
    confidence |= {m: 1 - alpha * (1 - share) / len(rest) for m in rest}
    return Adjustment(alpha, first, rest, confidence)


def between_sweep_drift(by_sweep: Sequence[np.ndarray], noise: float) -> float:
    """A sweep level's relative sd from sweep to sweep, beyond run noise.

    The variance of the sweeps' mean log values, less what ``noise`` (one
    run's sd of log values within a sweep) explains for means of that many
    runs (the method of moments of a one-way random-effects model), floored
    at 0. ``by_sweep``: each sweep's positive run values, 2 sweeps or more.
    """
    means = np.array([np.log(s).mean() for s in by_sweep if s.size])
    if means.size < 2:
        raise ValueError("drift needs 2 sweeps or more")
    explained = noise**2 * float(np.mean([1 / s.size for s in by_sweep if s.size]))
    return math.sqrt(max(float(means.var(ddof=1)) - explained, 0.0))


def within_run_variance(sd_logs: Sequence[float | None], iterations: Sequence[float | None]) -> float:
    """The variance of one run's (log) median that its own iterations imply,
    averaged over runs: (pi/2) sd^2 / k for k iterations of log-sd sd (the
    median's efficiency for normal data). 0 where no run has 2 iterations."""
    parts = [
        MEDIAN_EFFICIENCY**2 * float(sd) ** 2 / float(k)
        for sd, k in zip(sd_logs, iterations)
        if sd is not None and k is not None and not math.isnan(float(sd)) and float(k) >= 2
    ]
    return sum(parts) / len(parts) if parts else 0.0


def passes_needed(effect: float, cv: float, confidence: float = 0.95, power: float = 0.8) -> int:
    """Passes per arm for a relative ``effect`` (e.g. 0.05) to be told apart
    from 1 with ``power`` at ``confidence`` when one run's log value has sd
    ``cv``: the two-sample t test's n = 2 ((t_a + t_b) cv / ln(1+effect))^2,
    iterated because the t quantiles depend on n. The quantiles take Welch's
    least df, n - 1, not the pooled 2n - 2: with 2n - 2 the simulated power
    at the 4 passes it asked for (cv 2 %, effect 5 %) was 0.76, not 0.8.
    At least 3, at most 10,000.

    The search starts at the normal quantiles' n: a t quantile exceeds the
    normal one at every df, so no smaller n can pass, and the answer is the
    one counting up from 3 would give. Counting up from 3 cost two scipy
    quantiles per n, up to 20,000 per call where noise dwarfs the effect:
    ~150,000 of them, 26 s, in the summary of arms/smoke.yaml's 6 runs.
    """
    if effect <= 0:
        raise ValueError("effect must be > 0")
    n = 3
    if power >= 0.5:  # where t quantiles exceed normal ones (a power below 0.5 counts from 3)
        z = sps.norm.ppf(0.5 + confidence / 2) + sps.norm.ppf(power)
        lower = 2 * (z * cv / math.log1p(effect)) ** 2
        # a NaN cv passes no n: the count would end at 10,000
        n = 10_000 if math.isnan(lower) or lower >= 10_000 else max(3, math.floor(lower))
    while n < 10_000:
        df = n - 1
        t = sps.t.ppf(0.5 + confidence / 2, df) + sps.t.ppf(power, df)
        if n >= 2 * (t * cv / math.log1p(effect)) ** 2:
            return n
        n += 1
    return n


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
