"""Statistics over measurements: pure functions, floats in, frozen dataclasses out.

No I/O, no pandas, no Prefect here (STYLE.md 4); numpy and scipy only.

A number is only useful next to its noise. Per arm and metric,
:func:`summarize` gives n, median, MAD, a robust CV, an exact (order-statistic) interval of
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

The interval: on the difference of mean log run values (a ratio of
geometric means; a run's value is the median of its iterations), each
side's own variance, the half-width by Weerahandi's generalized pivotal
quantity (:func:`omni.stats.intervals.generalized_half_width`): Welch's single Satterthwaite df
misses more often than stated where the noisier side has fewer runs. A
between-sweep ``drift`` adds to the variance when the two samples come from
different sweeps (interleaving cancels drift only within a sweep), with the
degrees of freedom it was estimated from. Noise is estimated from the
compared data itself, hierarchically: the between-run variance of run
values, floored per side by the variance of a run's median that the spread
of its own iterations implies (and by ``floor``, a memory figure's
resolution). ``omni simulate`` (:mod:`omni.stats.simulation`) checks every stated
rate at the configurations users run.

Where the runs of a sweep sit on several slots the interval is instead the
contrast of an arm + slot fit in log space over every arm of the sweep
(:func:`omni.stats.sweepfit.fit_contrast`): the sweep's other arms tell the
slots' speeds, and the baseline's A/A control shares the baseline's noise.
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

from omni.stats.intervals import welch_log_interval
from omni.stats.planning import Layout, drift_allows, passes_needed
from omni.stats.sweepfit import fit_contrast

Better = Literal["higher", "lower"]
Verdict = Literal["better", "worse", "equivalent", "inconclusive"]

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample x this = its standard deviation
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # se(median) / se(mean) for normal data
OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's modified z-score cut
# Fewer runs than this get no interval of the median: the widest one order
# statistics give, [min, max], holds the median with chance 1 - 2 (1/2)^n:
# 75 % at 3 runs, 87.5 % at 4, 93.75 % at 5. min and max are shown beside
# it anyway; a "95 %" label on them would claim what they are not.
MIN_INTERVAL_RUNS = 6

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
# The fewest sweeps a measured drift is used from: k sweeps estimate it from
# k - 1 degrees of freedom, and from 2 (one) an A/A pair compared across
# sweeps was called different 3.6-22 % of the time at a stated 1.3 %
# (omni simulate). From 3 on, the interval carries the estimate's own
# degrees of freedom (omni.stats.intervals.generalized_half_width).
MIN_DRIFT_SWEEPS = 3


def drift_estimate(kind: str, measured: float | None, sweeps: int, source: str) -> tuple[float, float, str]:
    """(drift, its degrees of freedom, where it came from) for a metric of
    ``kind`` whose calibration from ``sweeps`` sweeps measured ``measured``
    (None: it did not): from :data:`MIN_DRIFT_SWEEPS` sweeps or more, at
    least ``MIN_DRIFT``, with k - 1 degrees of freedom; else the default,
    taken as known. ``source`` names the calibration."""
    default = DEFAULT_DRIFT[kind]
    if measured is None:
        return default, math.inf, "default (no calibration measured it)"
    if sweeps < MIN_DRIFT_SWEEPS:
        return (
            default,
            math.inf,
            f"default: {source} measured it from {sweeps} sweeps, {sweeps - 1} degree(s) "
            f"of freedom, too few to use; calibrate from {MIN_DRIFT_SWEEPS} or more (omni calibrate --sweeps 3)",
        )
    return max(measured, MIN_DRIFT[kind]), float(sweeps - 1), f"measured from {sweeps} sweeps, {source}"


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
    bound the median (exact, from order statistics: :func:`median_ci`;
    ``None`` below :data:`MIN_INTERVAL_RUNS` values, where even [min, max]
    holds it less often than ``confidence``: :func:`min_max_coverage`).
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


def median_ci(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """The exact distribution-free interval of the median from order
    statistics, [x_(k), x_(n+1-k)] with k the largest whose binomial tail
    P(Bin(n, 1/2) < k) is at most (1 - confidence) / 2 (the sign test's
    interval: Hollander and Wolfe, Nonparametric Statistical Methods;
    ``scipy.stats.quantile_test``). Its coverage is at least ``confidence``
    at every n and for any continuous distribution, where a percentile
    bootstrap of the median covered 87 % at n = 7 for a stated 95 %. None
    where no pair of order statistics reaches ``confidence`` (fewer than 6
    values at 95 %: [min, max] holds the median 93.75 % of the time at 5)."""
    if min_max_coverage(len(values)) < confidence:
        return None
    interval = sps.quantile_test(values, p=0.5).confidence_interval(confidence)
    return float(interval.low), float(interval.high)


def min_max_coverage(n: int) -> float:
    """The chance that [min, max] of n values holds their median: all n on
    one side of it has chance 2 (1/2)^n (the sign test's order-statistic
    interval, e.g. Hollander and Wolfe, Nonparametric Statistical Methods)."""
    return 1 - 2 * 0.5**n if n >= 1 else 0.0


def summarize(values: Iterable[float | None], confidence: float = 0.95) -> Summary:
    real = _real(values)
    if real.size == 0:
        return Summary(0, None, None, None, None, None, None, None)
    low, high = median_ci(real, confidence) or (None, None)
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
    blocked: bool = False  # judged within blocks (slots): the interval is omni.stats.sweepfit.fit_contrast's
    fitted: bool = False  # the interval is the fit over every arm of the sweep (blocked, or on one slot)
    df: float | None = None  # the interval's variance's degrees of freedom (Satterthwaite's, for reference)
    calibrated: bool = False  # the arms' noise scaled from their calibrations (omni.stats.sweepfit)
    prior_refused: bool = False  # the calibrations were refused: an arm's relative noise is not what they say
    # a secondary metric left inconclusive at its level: its interval at ESTIMATE_LEVEL, shown instead (no verdict)
    estimate: tuple[float, float] | None = None
    reach: int | None = None  # the most passes the spec may run: a passes_needed above it is out of reach
    drift_df: float = math.inf  # the drift's degrees of freedom (a calibration from k sweeps: k - 1)
    # inconclusive for good: the drift alone keeps the interval wider than min_effect at any number of passes
    unreachable: bool = False
    identical: int | None = None  # every run of both sides gave one value: how many runs (memory, mostly)
    floor: float = 0.0  # the least relative sd of one run assumed (a memory figure's resolution)


# (variance of one run's log value, its df) measured elsewhere for an arm's configuration
Prior = tuple[float, float] | None


@dataclass(frozen=True)
class Companion:
    """Another arm of the sweep, in a blocked comparison's fit: its values
    and their blocks; ``replica``: it runs the baseline's configuration."""

    values: Sequence[float | None]
    blocks: Sequence
    replica: bool = False
    within: float = 0.0
    prior: Prior = None


def _sweep_fit(b, o, blocks, companions, replica, priors, confidence, drift, within, drift_df, floor):
    """The blocked interval over base, other and the companions (None: not fittable)."""
    logs, labels, groups, floors = (
        [np.log(b), np.log(o)],
        [blocks[0], blocks[1]],
        [0, 0 if replica else 1],
        list(within),
    )
    for k, companion in enumerate(companions):
        values, where = _positive(companion.values, companion.blocks)
        if values.size:
            logs.append(np.log(values))
            labels.append(where)
            groups.append(0 if companion.replica else 2 + k)
            floors.append(max(companion.within, floor**2))
    by_group = {0: priors[0], 1: priors[1]} | {2 + k: c.prior for k, c in enumerate(companions) if not c.replica}
    by_group = {g: p for g, p in by_group.items() if p is not None and g in groups}
    return fit_contrast(
        logs, labels, groups, 0, 1, confidence, drift=drift, drift_df=drift_df, floors=floors, priors=by_group
    )


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
    drift_df: float = math.inf,
    floor: float = 0.0,
    companions: Sequence[Companion] = (),
    replica: bool = False,
    priors: tuple[Prior, Prior] = (None, None),
) -> Comparison:
    """Judge ``other`` against ``base`` with an equivalence margin (see module doc).

    Values must be positive (times, rates, bytes): the ratio lives on a log
    scale. Fewer than 2 values on a side is ``inconclusive``: no noise seen.
    ``within``: per side, the variance of a run's log value implied by its
    iterations (:func:`within_run_variance`), a floor on the between-run one.
    ``blocks``: per side, the block (slot) of each value; where every value
    has one the interval is the fit's over all arms
    (:func:`omni.stats.sweepfit.fit_contrast`; with one block, the arms'
    means), else :func:`omni.stats.intervals.welch_log_interval`'s.
    ``confidence`` is the interval's (:func:`adjust_for_multiplicity` sets it per metric).
    ``drift`` / ``drift_df``: the between-sweep drift and the degrees of
    freedom it was estimated from (infinite: taken as known).
    ``floor``: the least relative sd one run's value is taken to have, on
    both sides: a figure that repeats exactly (a process's RssAnon, run after
    run) has no spread to see, and without a floor 2 identical values a side
    would give an interval of width zero.
    ``companions``: the sweep's other arms (blocked verdicts only): their
    runs enter the slot fit, a replica's the baseline's variance too.
    ``replica``: ``other`` runs the baseline's own configuration (the A/A
    control): the two share one variance. ``priors``: per side, (variance of
    one run's log value, df) measured elsewhere for its configuration on
    this host (a stored calibration), moderating its variance (blocked
    verdicts only; :mod:`omni.stats.sweepfit`).
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
            drift_df=drift_df,
            floor=floor,
        )
    within = (max(within[0], floor**2), max(within[1], floor**2))
    fitted = (
        _sweep_fit(b, o, (b_blocks, o_blocks), companions, replica, priors, confidence, drift, within, drift_df, floor)
        if blocks
        else None
    )
    diff, half, noise, df = (
        (fitted.diff, fitted.half, fitted.noise, fitted.df)
        if fitted
        else welch_log_interval(b, o, confidence, drift, within, drift_df)
    )
    noise = max(noise, math.sqrt(max(within)))
    ratio, low, high = _exp(diff), _exp(diff - half), _exp(diff + half)
    margin = math.log1p(min_effect)
    inside = -margin <= diff - half and diff + half <= margin
    same = np.all(b == b[0]) and np.all(o == o[0]) and b[0] == o[0]
    common = {
        "confidence": confidence,
        "blocked": bool(fitted and fitted.blocks > 1),
        "fitted": fitted is not None,
        "df": df,
        "calibrated": bool(fitted and fitted.calibrated),
        "prior_refused": bool(fitted and fitted.refused),
        "drift_df": drift_df,
        "identical": int(b.size + o.size) if same else None,
        "floor": floor,
    }
    if low > 1 or high < 1:
        verdict: Verdict = "better" if (low > 1) == (better == "higher") else "worse"
        return Comparison(
            b.size, o.size, ratio, low, high, min_effect, noise, drift, verdict, below_min_effect=inside, **common
        )
    if inside:
        return Comparison(b.size, o.size, ratio, low, high, min_effect, noise, drift, "equivalent", **common)
    if not drift_allows(min_effect, drift, confidence, drift_df):
        return Comparison(
            b.size, o.size, ratio, low, high, min_effect, noise, drift, "inconclusive", unreachable=True, **common
        )
    layout = (
        Layout(
            2 + sum(1 for c in companions if _positive(c.values, c.blocks)[0].size),
            fitted.blocks,
            replica or any(c.replica for c in companions),
            fitted.calibrated,
        )
        if fitted
        else None
    )
    needed = passes_needed(min_effect, noise, confidence, drift=drift, drift_df=drift_df, layout=layout)
    return Comparison(
        b.size, o.size, ratio, low, high, min_effect, noise, drift, "inconclusive", passes_needed=needed, **common
    )


# --- many metrics per arm ---

ALPHA = 0.05  # the chance, per arm against the baseline, of calling an A/A arm different on any metric
# The primary metrics' share of ALPHA; the rest of the judged metrics share the remainder.
PRIMARY_SHARE = 0.8
# An inconclusive secondary metric is shown as an estimate at this level, with no verdict:
# at its Bonferroni level (99.92 % among 13) and 1.5-2 residual df a side, 3 passes gave
# ratio intervals such as [0.013, 67] that tell a reader nothing.
ESTIMATE_LEVEL = 0.95


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
    # passes: auto (omni.stats.sequential.look_levels): the split's levels before
    # spending, and the look (passes done, most passes) whose slice ``confidence`` is
    fixed: Mapping[str, float] | None = None
    look: tuple[int, int] | None = None
    stopped: str | None = None  # passes: auto: why the sweep stopped, when it has

    def describe(self) -> str:
        def level(names: tuple[str, ...], confidence: Mapping[str, float]) -> str:
            return f"{len(names)} at {100 * confidence[names[0]]:.4g} % each" if names else "none"

        fixed = self.fixed or self.confidence
        text = (
            f"Bonferroni, weighted, family-wise {self.alpha:.0%} per arm against the baseline "
            f"(with K arms judged, at most K x {self.alpha:.0%} that any is called different by chance): "
            f"primary metrics {level(self.primary, fixed)}, the others {level(self.secondary, fixed)}"
        )
        if self.look is None:
            return text
        return (
            f"{text}; passes: auto, each metric's share spent over the looks at passes 3 to {self.look[1]} "
            f"by group-sequential boundaries (alpha (n/{self.look[1]})^2 spent by pass n): the look after pass "
            f"{self.look[0]} is at "
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
    """The variance of one run's (log) median that its own iterations imply:
    (pi/2) sd^2 / k for k iterations of log-sd sd (the median's efficiency
    for normal data), the median over runs, divided by the median of a
    chi-square with k - 1 df over k - 1 so that it estimates the variance.
    The median, not the mean: one slow iteration spreads its run's
    iterations but barely moves its median, and averaged in it would floor
    every run's noise at that one run's spread (3 runs whose medians agree
    to 0.27 %, one of them with an iteration 4 % slow, would be floored at
    0.62 %). 0 where no run has 2 iterations."""
    kept = [
        (MEDIAN_EFFICIENCY**2 * float(sd) ** 2 / float(k), float(k))
        for sd, k in zip(sd_logs, iterations)
        if sd is not None and k is not None and not math.isnan(float(sd)) and float(k) >= 2
    ]
    if not kept:
        return 0.0
    df = float(np.median([k for _, k in kept])) - 1
    return float(np.median([part for part, _ in kept])) / (sps.chi2.median(df) / df)


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
