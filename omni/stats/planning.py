"""How many passes settle a verdict: the planner behind "needs N passes",
``passes: auto``'s stopping figure and ``omni plan``.

One variance model with the interval the verdict reads
(:mod:`omni.stats.sweepfit`): where the sweep's layout is known (how many
arms share the fit, over how many slots, whether the baseline has its A/A
control, whether every arm is calibrated), the n asked for is the least
whose contrast, built exactly as the fit builds it at n passes, gives the
half-width the verdict would, from the design's own per-group degrees of
freedom (or the sweep's whole residual df, calibrated). Without a layout
(two samples, across sweeps) the two-sample rule below.

Pure (STYLE.md 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats as sps

from omni.stats.intervals import generalized_half_width, half_widths, two_sided_quantile
from omni.stats.sweepfit import design

Goal = Literal["difference", "equivalence", "either"]


def _power_quantile(power: float, goal: Goal) -> float:
    """The quantile of the power term: a difference of effect is found when
    the estimate lands beyond the interval's half-width on its side (one
    tail: power); equivalence at a true ratio of 1 needs the interval inside
    the margin on both sides (two tails: (1 + power) / 2), the sample size
    of the two one-sided tests (Schuirmann 1987; Chow, Shao and Wang,
    Sample Size Calculations in Clinical Research, sec. 3.2)."""
    return (1 + power) / 2 if goal in ("equivalence", "either") else power


def drift_allows(
    effect: float, drift: float, confidence: float, drift_df: float = math.inf, power: float = 0.8
) -> bool:
    """Whether any number of passes can settle ``effect`` when two sweeps'
    levels drift apart by ``drift`` (a relative sd per sweep, known from
    ``drift_df`` degrees of freedom): the drift's 2 drift^2 of variance does
    not shrink with passes, so at infinitely many the interval's half-width
    is q sqrt(2) drift, and with the power term it must stay inside ln(1 + effect)."""
    if drift <= 0:
        return True
    tail = sps.norm.ppf(_power_quantile(power, "either"))
    return (two_sided_quantile(confidence, drift_df) + tail) * math.sqrt(2) * drift < math.log1p(effect)


def passes_needed(
    effect: float,
    cv: float,
    confidence: float = 0.95,
    power: float = 0.8,
    *,
    drift: float = 0.0,
    drift_df: float = math.inf,
    goal: Goal = "either",
    layout: Layout | None = None,
) -> int:
    """Passes per arm for a relative ``effect`` (e.g. 0.05) to be settled
    with ``power`` at ``confidence`` when one run's log value has sd ``cv``:
    n = 2 ((t_a + t_b) cv / ln(1+effect))^2, iterated because the t
    quantiles depend on n. ``goal``: ``difference`` (an effect of ``effect``
    told apart from 1: t_b at ``power``), ``equivalence`` (a true ratio of 1
    shown inside +-effect: t_b at (1 + power) / 2, the two one-sided tests'
    size) or ``either`` (an inconclusive verdict does not know which it
    faces: the larger, equivalence's). The quantiles take Welch's least df,
    n - 1, not the pooled 2n - 2: with 2n - 2 the simulated power at the 4
    passes it asked for (cv 2 %, effect 5 %) was 0.76, not 0.8.
    Between sweeps the ``drift`` adds 2 drift^2 that passes do not shrink:
    n = 2 cv^2 / (ln(1+effect)^2 / (t_a + t_b)^2 - 2 drift^2), df by
    Satterthwaite with the drift's ``drift_df``; where no n reaches it
    (:func:`drift_allows`), 10,000. At least 3, at most 10,000.

    The search starts at the normal quantiles' n: a t quantile exceeds the
    normal one at every df, so no smaller n can pass, and the answer is the
    one counting up from 3 would give. Counting up from 3 cost two scipy
    quantiles per n, up to 20,000 per call where noise dwarfs the effect:
    ~150,000 of them, 26 s, in the summary of arms/smoke.yaml's 6 runs.

    ``layout``: the blocked verdict's fit (:class:`Layout`): up to
    :data:`LAYOUT_PASSES` passes, the least n whose contrast at n passes,
    built as the fit builds it, has half-width + t_b sd within ln(1+effect).
    ``omni simulate``'s "needs N" rows check the power at the N it names.
    """
    if effect <= 0:
        raise ValueError("effect must be > 0")
    tail = _power_quantile(power, goal)
    delta = math.log1p(effect)

    def needs(z: float) -> float:
        room = (delta / z) ** 2 - 2 * drift**2
        return math.inf if room <= 0 else 2 * cv**2 / room

    n = 3
    if tail >= 0.5:  # where t quantiles exceed normal ones (a power below 0.5 counts from 3)
        lower = needs(sps.norm.ppf(0.5 + confidence / 2) + sps.norm.ppf(tail))
        # a NaN cv passes no n: the count would end at 10,000
        n = 10_000 if math.isnan(lower) or lower >= 10_000 else max(3, math.floor(lower))
    if layout is not None and n <= LAYOUT_PASSES:  # a blocked contrast's variance is at least 2 cv^2 / n
        for k in range(n, LAYOUT_PASSES + 1):
            if _layout_settles(layout, k, delta, cv, confidence, tail, drift, drift_df):
                return k
    while n < 10_000:
        noise_part = 2 * cv**2 / n
        var = noise_part + 2 * drift**2
        terms = noise_part**2 / (n - 1) + ((2 * drift**2) ** 2 / drift_df if math.isfinite(drift_df) else 0.0)
        df = var**2 / terms if terms > 0 else math.inf
        z = two_sided_quantile(confidence, df) + (
            float(sps.t.ppf(tail, df)) if math.isfinite(df) else sps.norm.ppf(tail)
        )
        if n >= needs(z):
            return n
        n += 1
    return n


@dataclass(frozen=True)
class Layout:
    """What a blocked verdict's fit is made of, for planning it."""

    arms: int  # arms in the fit (the compared two included)
    slots: int
    control: bool  # the baseline's A/A replica is one of them
    calibrated: bool  # every arm's noise scaled from its calibration (omni.stats.sweepfit)


# past this many passes the design's df are large enough that the two-sample rule is the design's
LAYOUT_PASSES = 64


@lru_cache(maxsize=4096)
def contrast_shape(layout: Layout, passes: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(per group, sum of w^2 over its runs; per group, its residual df) of
    the last arm against the first at ``passes`` passes of each arm, rotated
    as the plan rotates them: arm i's pass p on slot (i + p) mod slots."""
    arms = [a for a in range(layout.arms) for _ in range(passes)]
    slots = [(a + p) % layout.slots for a in range(layout.arms) for p in range(passes)]
    x = design(arms, slots, layout.arms)
    rows = np.linalg.pinv(x.T @ x) @ x.T
    weight = rows[layout.arms - 1] - rows[0]
    leverage = np.einsum("ij,ji->i", x, rows)
    group = np.array([0 if (a == 1 and layout.control and layout.arms > 2) else a for a in arms])
    names = sorted(set(group.tolist()))
    shares = tuple(float(weight[group == g] @ weight[group == g]) for g in names)
    dfs = tuple(float((1 - leverage[group == g]).sum()) for g in names)
    return shares, dfs


def _layout_settles(layout: Layout, n: int, delta: float, cv: float, confidence: float, tail: float,
                    drift: float, drift_df: float) -> bool:  # fmt: skip
    """Whether n passes in ``layout`` settle ``delta`` (module doc)."""
    shares, dfs = contrast_shape(layout, n)
    noise = cv**2 * sum(shares)
    extra = 2 * drift**2
    var = noise + extra
    if layout.calibrated:
        half = generalized_half_width([noise, extra], [sum(dfs), drift_df], confidence)
        df = sum(dfs)
    else:
        parts = [cv**2 * s for s in shares]
        half = generalized_half_width([*parts, extra], [*dfs, drift_df], confidence)
        terms = sum(p**2 / d for p, d in zip(parts, dfs) if p > 0)
        df = noise**2 / terms if terms > 0 else math.inf
    power = float(sps.t.ppf(tail, df)) if math.isfinite(df) else float(sps.norm.ppf(tail))
    return half + power * math.sqrt(var) <= delta


# sample variances a planner averages over: midpoints of this many chi2 strata per side
STRATA = 16
# :func:`rerun_power` over omni's own compare on simulated draws (4,000 each): 0.5-1.6 points high at
# 7-11 new runs against 5-8 recorded (the strata's midpoints miss the variance's far tail), so the
# planner asks the model for this much more than the power it states
POWER_MARGIN = 0.02


def rerun_power(
    effect: float, cv: float, recorded: int, new: int, confidence: float, drift: float = 0.0, drift_df: float = math.inf
) -> float:
    """The chance that ``new`` rerun runs against ``recorded`` stored ones,
    at a true ratio of 1, give a between-sweep interval (each side's own
    variance and 2 drift^2, :func:`generalized_half_width`) inside
    +-ln(1+effect): the verdict settled. Each side's sample variance is
    averaged over :data:`STRATA` chi2 strata, the difference of means is
    normal given them (independent of the variances); the drift is the
    verdict's plug-in, its ``drift_df`` in the interval."""
    delta = math.log1p(effect)
    true = (cv**2 / recorded, cv**2 / new)
    sd = math.sqrt(sum(true) + 2 * drift**2)
    if sd == 0:
        return 1.0
    mid = (np.arange(STRATA) + 0.5) / STRATA
    scale_b = sps.chi2.ppf(mid, recorded - 1) / (recorded - 1)
    scale_o = sps.chi2.ppf(mid, new - 1) / (new - 1)
    grid = np.zeros((STRATA, STRATA, 3))
    grid[..., 0] = true[0] * scale_b[:, None]
    grid[..., 1] = true[1] * scale_o[None, :]
    grid[..., 2] = 2 * drift**2
    dfs = [recorded - 1.0, new - 1.0, drift_df if math.isfinite(drift_df) else 1e9]
    half = half_widths(grid, dfs, confidence)
    return float(np.mean(np.clip(2 * sps.norm.cdf((delta - half) / sd) - 1, 0.0, 1.0)))


def rerun_runs_needed(
    effect: float,
    cv: float,
    recorded: int,
    confidence: float = 0.95,
    power: float = 0.8,
    *,
    drift: float = 0.0,
    drift_df: float = math.inf,
    most: int = 1000,
) -> int | None:
    """Runs a rerun needs beside ``recorded`` runs that cannot grow (a
    reproduction judges new runs against a stored sweep): the least m whose
    :func:`rerun_power` reaches ``power`` (and :data:`POWER_MARGIN`). None when no m up to ``most``
    does: the recorded side's own runs (their noise and recorded - 1 df) or
    the drift keep it wider whatever the rerun runs. :func:`passes_needed`'s
    "per arm" would grow both sides."""
    if effect <= 0:
        raise ValueError("effect must be > 0")
    if recorded < 2 or not math.isfinite(cv) or cv < 0:
        return None

    def settles(m: int) -> bool:
        return rerun_power(effect, cv, recorded, m, confidence, drift, drift_df) >= power + POWER_MARGIN

    if not settles(most):
        return None
    low, high = 1, most  # settles(high); the least m that settles is in (low, high]
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if settles(mid) else (mid, high)
    return high
