"""The median of runs some of which are only a bound, and a comparison
that a bound cannot overturn.

A serving run whose capacity lies beyond the levels it tried stores no
figure but a bound: "above 16 in flight", "below 1". Dropping such runs
biases the arm's median toward its weaker (or stronger) runs, so they are
kept as what they are: ranked beyond every figure on their side. That
ranking is exact wherever every bound lies beyond every figure, which is
how a run's levels make them (a capacity above the highest level tried
exceeds every capacity interpolated within the levels); where a bound
does not (runs searched over other ranges), the ranks are not known and
no interval is made.

The median and its interval are the order statistics
:func:`omni.stats.verdicts.median_ci` takes, on the ranks: an end that
falls on a bound is stated as that bound (``> 16``), not as a number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from omni.stats.verdicts import Comparison, compare, median_ci

ABOVE, BELOW = "above", "below"


@dataclass(frozen=True)
class Point:
    """One run: a figure (``side`` None), or a bound: the true value is
    above or below ``value``."""

    value: float
    side: str | None = None


@dataclass(frozen=True)
class CensoredSummary:
    """An arm's median over its runs and the median's interval, each a
    figure or a bound. ``median_side``/``low_side``/``high_side``: None
    where the figure is exact, ``above``/``below`` where it is a bound at
    that value. ``ranked``: False where the bounds do not all lie beyond
    the figures (no median or interval is then given)."""

    n: int
    above: int
    below: int
    median: float | None
    median_side: str | None
    ci_low: float | None
    low_side: str | None
    ci_high: float | None
    high_side: str | None
    ranked: bool = True


def _ranked(points: Sequence[Point]) -> bool:
    exact = [p.value for p in points if p.side is None]
    top, bottom = max(exact, default=-math.inf), min(exact, default=math.inf)
    return all(p.value >= top for p in points if p.side == ABOVE) and all(
        p.value <= bottom for p in points if p.side == BELOW
    )


def _order(points: Sequence[Point]) -> list[Point]:
    """The runs in rank order: bounds below first (the lowest bound
    lowest), figures, bounds above (the lowest bound lowest)."""
    rank = {BELOW: 0, None: 1, ABOVE: 2}
    return sorted(points, key=lambda p: (rank[p.side], p.value))


def summarize_censored(points: Sequence[Point], confidence: float = 0.95) -> CensoredSummary:
    """The median over the runs and its distribution-free interval, the
    bounds ranked beyond the figures."""
    points = [p for p in points if p.value is not None and not math.isnan(p.value)]
    above = sum(p.side == ABOVE for p in points)
    below = sum(p.side == BELOW for p in points)
    if not points:
        return CensoredSummary(0, 0, 0, None, None, None, None, None, None)
    if not _ranked(points):
        return CensoredSummary(len(points), above, below, None, None, None, None, None, None, ranked=False)
    ordered = _order(points)
    n = len(ordered)
    # the median on ranks: the middle run, or the two middle ones' mean when both are figures
    lower, upper = ordered[(n - 1) // 2], ordered[n // 2]
    if lower.side is None and upper.side is None:
        median, median_side = (lower.value + upper.value) / 2, None
    else:
        # a bound in the middle: the median is beyond it, on its side
        middle = upper if upper.side == ABOVE else lower
        median, median_side = middle.value, middle.side
    ranks = median_ci(np.arange(n, dtype=float), confidence)
    if ranks is None:
        return CensoredSummary(n, above, below, median, median_side, None, None, None, None)
    low, high = ordered[int(ranks[0])], ordered[int(ranks[1])]
    return CensoredSummary(n, above, below, median, median_side, low.value, low.side, high.value, high.side)


def compare_censored(
    base: Sequence[Point], other: Sequence[Point], min_effect: float, confidence: float, better: str = "higher"
) -> tuple[Comparison, str | None]:
    """``other`` against ``base`` where runs may be bounds: each bound
    enters :func:`omni.stats.verdicts.compare` at its value, and a verdict
    the bounds could overturn is not made. A bound above (below) in
    ``other`` can only make it larger (smaller), so "better" stands when
    every bound of ``other`` that moves against it and every bound of
    ``base`` that moves toward it is absent; otherwise, and for
    "equivalent", which any bound could break, the verdict is
    inconclusive, and the second value says why (None otherwise)."""
    result = compare(
        [p.value for p in base], [p.value for p in other], better=better, min_effect=min_effect, confidence=confidence
    )
    if not any(p.side for p in [*base, *other]):
        return result, None
    up = "better" if better == "higher" else "worse"
    # sides that could move the ratio other/base up, and down
    raises = any(p.side == ABOVE for p in other) or any(p.side == BELOW for p in base)
    lowers = any(p.side == BELOW for p in other) or any(p.side == ABOVE for p in base)
    holds = {
        up: not lowers,  # a larger ratio than stated can only strengthen it
        ("worse" if up == "better" else "better"): not raises,
    }
    if holds.get(result.verdict, False):
        return result, None
    note = "a run beyond the levels tried, taken at its bound, could overturn it"
    return replace(result, verdict="inconclusive", passes_needed=None, below_min_effect=False), note
