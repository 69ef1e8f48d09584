"""Passes that stop when the answer is known (``passes: auto``): a sequential
rule whose chance of a false call is bounded whatever the number of looks.

A sweep with ``passes: auto`` runs one pass of every arm at a time and, from
the third pass on, judges the arms against the baseline after each one; it
stops when every primary verdict is conclusive. Judging at the sweep's fixed
levels after every pass would inflate false calls: an A/A arm judged at
95 % after each of passes 3 to 8 is called different 8.4 % of the time
where 5 % is allowed (tests/unit/test_sequential.py), and the more looks
the more often. So the looks share the metric's error between them.

The rule: group-sequential boundaries by alpha spending (Lan and DeMets
1983, Biometrika 70:659), with the power spending function alpha t^rho
(Kim and DeMets 1987, Biometrics 43:857), rho = 2. The metric's error
alpha_m (its Bonferroni share of the arm's 5 %,
omni.stats.verdicts.adjust_for_multiplicity) is spent over the planned looks at
passes n_k = 3, 4, ... N (N = max_passes), information fraction t_k = n_k/N:
on the standardized difference Z_k, with the canonical joint distribution
of the looks (Z_k ~ N(theta sqrt(I_k), 1), Cov(Z_j, Z_k) = sqrt(I_j/I_k)
for j <= k, information I_k proportional to n_k), the two-sided boundaries
c_1 .. c_K are those with

    P_0(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha_m (t_k^rho - t_{k-1}^rho),

so the chance that any look crosses is alpha_m. Each look's interval is at
the nominal level 1 - 2 (1 - Phi(c_k)): that sequence is the repeated
confidence intervals of Jennison and Turnbull (1989, JRSS B 51:305; 2000,
Group Sequential Methods, ch. 9), which hold the true ratio at every look
at once with chance 1 - alpha_m. A miss at some look is the only way an A/A
arm is called better or worse, or a real effect beyond min_effect called
equivalent, so that chance is at most alpha_m whatever stopped the sweep:
this arm's verdicts, another arm's, max_passes or the budget. Over metrics
the split is Bonferroni, so an A/A arm is called different on any metric at
most 5 % of the time.

Unlike spending each look's slice as its own level (Bonferroni over the
looks, valid whatever the dependence), the boundaries use how strongly the
looks agree (look k shares n_{k-1}/n_k of its passes with look k-1): of 20
planned passes the last look runs at about half the metric's error, where
its own slice is a tenth. Narrower intervals, fewer passes, the same error.

The boundaries are normal theory; omni's intervals (omni.stats.verdicts.compare)
are not normal ones but carry each arm's own degrees of freedom, on 3 to N
runs an arm. Each look keeps the boundary's nominal level and takes the
interval at that level (the "significance level" approach to an unknown
variance, Jennison and Turnbull 2000, ch. 3). That is an approximation at
few passes; benchmarks/sequential_rules.py checks it by simulation with
omni's own compare and decide (log-normal runs, 2 % to 30 % noise, unequal
noise, 2 and 4 arms against one baseline, max_passes 12 and 20).

The boundaries come from the recursive numerical integration of Armitage,
McPherson and Rowe (1969, JRSS A 132:235; Jennison and Turnbull 2000,
ch. 19): the density of the score S_k = Z_k sqrt(n_k) on the region the
rule has not left, carried from look to look by the N(0, n_k - n_{k-1})
increment, Simpson's rule on a grid. Hand-written: Python has no
established library for it (R has gsDesign, rpact and ldbounds; the PyPI
packages that offer it are early releases of small projects), and the
recursion is a screen, checked against scipy's multivariate normal
(tests/unit/test_sequential.py).

Why rho = 2: rho = 1 spends the most on the early looks, where 3 to 5 runs
an arm give wide intervals anyway, and keeps the least for the late ones;
rho = 3 (near O'Brien-Fleming) spends so little early that every clear
answer waits.

Pure: floats and verdicts in, frozen dataclasses out (STYLE.md 4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize
from scipy.stats import norm

from omni.stats.planning import passes_needed
from omni.stats.verdicts import Adjustment, Comparison

FIRST_LOOK = 3  # passes before the first look: fewer give no noise estimate worth a verdict
DEFAULT_MAX_PASSES = 20
RHO = 2.0  # the spending function's power (see the module doc)
CONCLUSIVE = ("better", "worse", "equivalent")
# The grid's spacing on the score scale, in sds of one pass's increment.
# Not Jennison and Turnbull's grid of fixed size on the Z scale: there the
# kernel from one look to the next, one pass later, has sd 1/sqrt(n), ever
# finer for a fixed grid as n grows; on the score scale it has sd 1 at every
# n. At 0.25 the boundaries of 20 looks agree with those at 0.05 to 1e-5;
# 20 planned passes take about 0.01 s, 100 about 0.1 s, 1000 (the spec's
# most) a few seconds, once a process.
GRID_STEP = 0.25
KERNEL_REACH = 9.0  # sds of one increment past which the grid's points are not summed


def spent(fraction: float, alpha: float, rho: float = RHO) -> float:
    """The error spent by information ``fraction`` (passes / max passes): alpha t^rho."""
    return alpha * min(max(fraction, 0.0), 1.0) ** rho


def _check_look(passes: int, max_passes: int) -> None:
    if max_passes < FIRST_LOOK:
        raise ValueError(f"max_passes must be >= {FIRST_LOOK}")
    if passes > max_passes:
        raise ValueError(f"no look after pass {passes}: the rule plans {max_passes} passes")


def look_alpha(alpha: float, passes: int, max_passes: int, rho: float = RHO) -> float:
    """The error the look after ``passes`` passes spends: the chance, under
    no effect, that the rule first crosses there (0 before :data:`FIRST_LOOK`)."""
    _check_look(passes, max_passes)
    if passes < FIRST_LOOK:
        return 0.0
    before = spent((passes - 1) / max_passes, alpha, rho) if passes > FIRST_LOOK else 0.0
    return spent(passes / max_passes, alpha, rho) - before


def _simpson_grid(bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Points spanning [-bound, bound], at most GRID_STEP apart, and their Simpson weights."""
    half = max(1, math.ceil(bound / GRID_STEP))
    points = np.linspace(-bound, bound, 2 * half + 1)
    weights = np.ones(points.size)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return points, weights * (points[1] - points[0]) / 3


def _excess(c: float, n: int, step: float, points: np.ndarray, mass: np.ndarray, slice_: float) -> float:
    """The chance of first crossing +-c at the look after ``n`` passes, less the look's ``slice_``."""
    edge = c * math.sqrt(n)
    crossed = norm.sf((edge - points) / step) + norm.cdf((-edge - points) / step)
    return float(mass @ crossed) - slice_


def _carry(points: np.ndarray, mass: np.ndarray, inner: np.ndarray, step: float) -> np.ndarray:
    """The density at ``inner`` of S one N(0, step^2) increment on from ``mass``
    (density x weight at ``points``): each point sums only the old points
    within KERNEL_REACH sds of it, as the normal density beyond is below
    1e-17 of its peak; at 1000 planned passes the whole matrix took 7x as long."""
    reach = KERNEL_REACH * step
    width = min(points.size, math.ceil(2 * reach / (points[1] - points[0])) + 1)
    first = np.clip(np.searchsorted(points, inner - reach), 0, points.size - width)
    near = first[:, None] + np.arange(width)
    return (norm.pdf((inner[:, None] - points[near]) / step) / step * mass[near]).sum(axis=1)


@lru_cache(maxsize=64)
def boundaries(alpha: float, max_passes: int, rho: float = RHO) -> tuple[float, ...]:
    """The two-sided boundaries c_k on Z_k of the looks at passes
    :data:`FIRST_LOOK` .. ``max_passes`` that spend ``alpha`` t^rho (see the
    module doc): recursive numerical integration (Armitage, McPherson and
    Rowe 1969; Jennison and Turnbull 2000, ch. 19).

    Carried on the score S = Z sqrt(n), whose increment over a pass is
    N(0, 1): ``mass`` is the density of S at ``points`` times the Simpson
    weights, over the region no earlier look has left. Each c_k solves
    P(|S_k| >= c_k sqrt(n_k), not stopped before) = the look's slice.
    Memoized: a summary asks for every look of every metric's alpha.
    """
    _check_look(FIRST_LOOK, max_passes)
    looks = range(FIRST_LOOK, max_passes + 1)
    first = spent(FIRST_LOOK / max_passes, alpha, rho)
    found = [float(norm.isf(first / 2))]  # one look alone: the marginal quantile
    points, weights = _simpson_grid(found[0] * math.sqrt(FIRST_LOOK))
    mass = norm.pdf(points, scale=math.sqrt(FIRST_LOOK)) * weights
    for before, n in zip(looks, looks[1:]):
        step = math.sqrt(n - before)
        total = spent(n / max_passes, alpha, rho)
        slice_ = total - spent(before / max_passes, alpha, rho)
        # c_k lies between the marginal quantiles of all spent so far and of
        # the slice alone (Bonferroni's bounds on the crossing chance); the
        # lower bound can be tight to 1e-9 where the looks are near one, so
        # the bracket is widened past both for the grid's rounding
        low, high = max(norm.isf(total / 2) - 0.5, 0.0), norm.isf(slice_ / 2) + 0.5
        c = optimize.brentq(_excess, low, high, args=(n, step, points, mass, slice_), xtol=1e-10)
        found.append(float(c))
        inner, inner_weights = _simpson_grid(c * math.sqrt(n))
        points, mass = inner, _carry(points, mass, inner, step) * inner_weights
    return tuple(found)


def look_confidence(metric_confidence: float, passes: int, max_passes: int, rho: float = RHO) -> float:
    """The interval level of the look after ``passes`` passes of ``max_passes``
    for a metric whose fixed-sample level is ``metric_confidence`` (its
    multiplicity-adjusted level): the boundary's nominal level,
    1 - 2 (1 - Phi(c_k)) (:func:`boundaries`); 1 before the first look."""
    _check_look(passes, max_passes)
    if passes < FIRST_LOOK:
        return 1.0
    c = boundaries(1.0 - metric_confidence, max_passes, rho)[passes - FIRST_LOOK]
    return 1.0 - 2.0 * float(norm.sf(c))


def passes_to_stop(
    effect: float,
    cv: float,
    metric_confidence: float,
    max_passes: int,
    power: float = 0.8,
    rho: float = RHO,
    **needed: Any,
) -> int:
    """The passes per arm by which the rule resolves ``effect`` with ``power``:
    the first look n whose own level (:func:`look_confidence`) gives that
    power at n passes (:func:`omni.stats.verdicts.passes_needed`, with ``needed``'s
    keywords: what is to be settled, the drift). The rule may have stopped
    at an earlier look too, so its power by look n is at least that one
    look's: simulated with omni's compare, a 20 % slowdown at 5 % and 15 %
    noise and equivalence at 2 % are settled in 80 % of sweeps at this
    figure or a pass before (benchmarks/sequential_rules.py; the first in
    tests/unit/test_sequential.py).
    Not reached by ``max_passes``: the fixed-sample figure at the metric's
    whole error, and more than ``max_passes`` (more than the rule will run)."""
    for n in range(FIRST_LOOK, max_passes + 1):
        level = look_confidence(metric_confidence, n, max_passes, rho)
        if n >= passes_needed(effect, cv, level, power, **needed):
            return n
    return max(max_passes + 1, passes_needed(effect, cv, metric_confidence, power, **needed))


def look_levels(adjustment: Adjustment, passes: int, max_passes: int, stopped: str | None = None) -> Adjustment:
    """``adjustment`` with each metric's level that of the look after
    ``passes`` passes (before the first look: the first look's); ``stopped``:
    the rule's stop, in words, when the sweep has stopped."""
    passes = min(max(passes, FIRST_LOOK), max_passes)
    levels = {m: look_confidence(c, passes, max_passes) for m, c in adjustment.confidence.items()}
    return replace(
        adjustment, confidence=levels, fixed=adjustment.confidence, look=(passes, max_passes), stopped=stopped
    )


def planner(adjustment: Adjustment) -> Callable[..., int]:
    """(metric, effect, cv, layout=None) -> the passes per arm that resolve ``effect``
    (``layout``: the blocked fit's, :class:`omni.stats.planning.Layout`): the
    fixed-sample :func:`omni.stats.verdicts.passes_needed` at the metric's level, or
    for a sequential sweep's levels (:func:`look_levels`) :func:`passes_to_stop`."""
    if adjustment.look is None or adjustment.fixed is None:
        return lambda metric, effect, cv, layout=None: passes_needed(
            effect, cv, adjustment.confidence[metric], layout=layout
        )
    fixed, most = adjustment.fixed, adjustment.look[1]
    return lambda metric, effect, cv, layout=None: passes_to_stop(effect, cv, fixed[metric], most, layout=layout)


@dataclass(frozen=True)
class Decision:
    """Whether an ``auto`` sweep stops after a look, and why, in words."""

    stop: bool
    reason: str  # "conclusive", "max_passes", "budget", or "continue"
    passes: int
    lines: tuple[str, ...]  # one per primary verdict: "b decode_tok_s worse x0.800 [0.77, 0.83]"
    pending: tuple[str, ...]  # "arm metric" still inconclusive

    def describe(self) -> str:
        if self.reason == "conclusive":
            return f"after pass {self.passes}: every primary verdict is conclusive; stopping"
        if self.reason in ("max_passes", "budget"):
            why = "max_passes" if self.reason == "max_passes" else "the time budget"
            return f"after pass {self.passes}: {why} spent with {len(self.pending)} inconclusive; stopping"
        return f"after pass {self.passes}: continuing: {len(self.pending)} inconclusive ({', '.join(self.pending)})"


def verdict_line(arm: str, metric: str, comparison: Comparison | None, refused: str | None = None) -> str:
    if comparison is None:
        return f"{arm} {metric}: {refused or 'no verdict'}"
    if comparison.ratio is None or comparison.ci_low is None:
        return f"{arm} {metric} {comparison.verdict}"
    return (
        f"{arm} {metric} {comparison.verdict} x{comparison.ratio:.3f} "
        f"[{comparison.ci_low:.3f}, {comparison.ci_high:.3f}] at {100 * comparison.confidence:.4g} %"
    )


def decide(
    comparisons: Mapping[tuple[str, str], Comparison | None],
    passes: int,
    max_passes: int,
    out_of_time: bool = False,
    refused: Mapping[tuple[str, str], str] | None = None,
) -> Decision:
    """Stop or continue after the look at ``passes`` passes.

    ``comparisons``: (arm, primary metric) -> its comparison at the look's
    level, None where there is none (refused: like for like impossible, a
    void arm; ``refused`` says why). Those cannot become conclusive by more
    passes and do not hold the sweep. It stops when every other one is
    better, worse or equivalent (below min_effect or not), else when
    ``max_passes`` is reached or the time budget is ``out_of_time``.
    """
    refused = refused or {}
    lines = tuple(verdict_line(a, m, c, refused.get((a, m))) for (a, m), c in comparisons.items())
    pending = tuple(f"{a} {m}" for (a, m), c in comparisons.items() if c is not None and c.verdict not in CONCLUSIVE)
    if not pending and passes >= FIRST_LOOK:
        reason = "conclusive"
    elif passes >= max_passes:
        reason = "max_passes"
    elif out_of_time:
        reason = "budget"
    else:
        reason = "continue"
    return Decision(reason != "continue", reason, passes, lines, pending)
