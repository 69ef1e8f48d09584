"""Level shifts in a spec's nightly history: where the per-sweep level of an
arm's metric moved and stayed moved, by change-point detection.

``omni regressions`` judges each sweep against a window of the ones before
it; that finds a night that differs, and says nothing of where a slow
creep or a step the window straddles began. Here the series of per-sweep
mean log values (one point per sweep: the geometric mean of its runs) is
segmented by binary segmentation on an L2 cost (``ruptures.Binseg``;
Truong, Oudre and Vayatis, Signal Processing 167, 2020): the best split
point first, then the best split within each side, while a split's cost
reduction exceeds a penalty.

The penalty is what sets the false-alarm rate, so it is not a rule of
thumb: the series is standardized by a noise sd read from its own
successive differences (the MAD of the first differences / (0.6745 sqrt 2):
a level shift moves one difference, not their median, so a step does not
inflate it), and the penalty is the (1 - alpha) quantile of the best single
split's cost reduction under no change for that series length, simulated
through the same standardization (:func:`critical_gain`). So a history with
no shift reports one with chance ``alpha`` (5 % per arm and metric);
``omni simulate`` checks it through ruptures. A shift is reported only
where the two segments' levels differ by min_effect or more.

Pure: floats in, frozen dataclasses out (STYLE.md 4); numpy and ruptures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import ruptures

ALPHA = 0.05  # the chance that a history with no shift reports one, per arm and metric
MIN_SWEEPS = 5  # fewer points cannot place a shift with a segment of 2 on each side
MIN_SEGMENT = 2  # a single sweep apart is one night, the window verdict's business
NULL_DRAWS = 20_000
MAD_TO_SD = 1 / (0.6745 * math.sqrt(2))  # a difference of two N(0, s^2) has sd s sqrt 2


@dataclass(frozen=True)
class Shift:
    """The level moved between ``sweeps[index - 1]`` and ``sweeps[index]``."""

    index: int  # the first sweep of the new level
    sweep_id: str
    ratio: float  # the new segment's geometric mean over the old one's
    before: int  # sweeps in the segment before
    after: int  # and after


def noise_sd(logs: np.ndarray) -> float:
    """One point's sd from the series' successive differences, robust to a level shift."""
    return float(np.median(np.abs(np.diff(logs)))) * MAD_TO_SD


def best_gain(y: np.ndarray) -> np.ndarray:
    """Per series (rows of ``y``), the largest cost reduction of one split into
    two segments of :data:`MIN_SEGMENT` or more: k (L - k) / L (mean_1 - mean_2)^2."""
    length = y.shape[1]
    csum = np.cumsum(y, axis=1)
    total = csum[:, -1:]
    k = np.arange(MIN_SEGMENT, length - MIN_SEGMENT + 1)
    left = csum[:, k - 1] / k
    right = (total - csum[:, k - 1]) / (length - k)
    return (k * (length - k) / length * (left - right) ** 2).max(axis=1)


@lru_cache(maxsize=256)
def critical_gain(length: int, alpha: float = ALPHA) -> float:
    """The penalty: the (1 - alpha) quantile of the best split's gain in a
    standardized series of ``length`` points with no shift (normal points,
    standardized by :func:`noise_sd` as a real history is), simulated with a fixed seed."""
    rng = np.random.default_rng([20261204, length])
    y = rng.standard_normal((NULL_DRAWS, length))
    sd = np.median(np.abs(np.diff(y, axis=1)), axis=1) * MAD_TO_SD
    return float(np.quantile(best_gain(y / sd[:, None]), 1 - alpha))


def level_shifts(
    levels: Sequence[float], sweep_ids: Sequence[str], min_effect: float, alpha: float = ALPHA
) -> tuple[Shift, ...]:
    """The shifts of a per-sweep level series (positive values, time order)
    whose segments differ by ``min_effect`` or more; none below
    :data:`MIN_SWEEPS` points or where the series has no spread to scale by."""
    logs = np.log(np.asarray(levels, dtype=float))
    if logs.size < MIN_SWEEPS:
        return ()
    sd = noise_sd(logs)
    if not sd > 0:
        return ()
    y = (logs - logs.mean()) / sd
    algo = ruptures.Binseg(model="l2", min_size=MIN_SEGMENT, jump=1).fit(y.reshape(-1, 1))
    ends = algo.predict(pen=critical_gain(logs.size, alpha))
    starts = [0, *ends[:-1]]
    shifts = []
    for i, cut in enumerate(ends[:-1]):
        before, after = logs[starts[i] : cut], logs[cut : ends[i + 1]]
        ratio = math.exp(after.mean() - before.mean())
        if abs(math.log(ratio)) >= math.log1p(min_effect):
            shifts.append(Shift(cut, sweep_ids[cut], ratio, before.size, after.size))
    return tuple(shifts)
