"""Whole sweeps simulated through omni's own verdict code: the power to call
a real change at the passes users run, beside the textbook test and the
oracle on the same draws, and the false calls of every arm of the sweep.

A sweep here is what ``omni sweep`` runs: arm 0 the baseline, in a 4-arm
sweep arm 1 its live A/A control (the baseline's configuration, so its
noise), the others changed arms; every arm's pass p on slot (i + p) mod S
(:func:`omni.run.plan.rotated_slot`). The log of a run value is its arm's
level, its slot's speed (sd :data:`SLOT_SD`) and the run's noise. Each arm
is judged against the baseline as the summary judges it
(:func:`omni.stats.verdicts.compare` with the sweep's other arms as
companions, the control as the baseline's replica).

On the same draws, two references:

- the slot-blocked **pooled t**: the same arm + slot fit, one residual
  variance over every run, n - rank degrees of freedom. The textbook answer
  where every arm is equally noisy, and wrong where they are not;
- the **oracle**: the same contrast with each arm's true variance known,
  normal quantiles: what no rule from the data can beat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from omni.run.plan import rotated_slot
from omni.stats.sweepfit import design
from omni.stats.verdicts import Companion, Prior, compare

SLOT_SD = 0.05  # a slot's own speed, sd of its log: sockets and memory controllers differ by a few %
MIN_EFFECT = 0.05


@dataclass(frozen=True)
class Sweep:
    """One simulated sweep's configuration."""

    passes: int
    slots: int
    sds: tuple[float, ...]  # per arm, its runs' noise (sd of the log)
    effects: tuple[float, ...]  # per arm, its true relative change (-0.1: 10 % lower)
    control: bool  # arm 1 is the baseline's A/A replica
    calibrated: float = 0.0  # each arm's calibration: the df its noise was measured from (0: none)
    noisier: tuple[float, ...] = ()  # per arm, its runs' sd now over its sd when calibrated (empty: all 1)

    @property
    def arms(self) -> int:
        return len(self.sds)

    def slots_of(self, arm: int) -> list[int]:
        return [rotated_slot(list(range(self.slots)), arm, p) for p in range(self.passes)]

    def describe(self) -> str:
        kind = f"{self.arms} arms" + (" (baseline, control, others)" if self.control else "")
        noise = "/".join(f"{sd:.0%}" for sd in self.sds)
        calibrated = f", calibrated ({self.calibrated:g} df)" if self.calibrated else ""
        now = f", now {'/'.join(f'{r:g}' for r in self.noisier)}x the calibrated sd" if self.noisier else ""
        return f"{kind}, {self.passes} passes, {self.slots} slots, noise {noise}{calibrated}{now}"


def draw(rng: np.random.Generator, sweep: Sweep) -> list[tuple[np.ndarray, list[int], Prior]]:
    """Each arm's run values, slots and calibration prior: the variance a
    calibration of ``sweep.calibrated`` df measured (a chi-square draw
    around the arm's variance then, its sd now over ``sweep.noisier``)."""
    speed = rng.normal(0.0, SLOT_SD, sweep.slots)
    out = []
    for arm, (sd, effect) in enumerate(zip(sweep.sds, sweep.effects)):
        where = sweep.slots_of(arm)
        logs = math.log1p(effect) + speed[where] + rng.normal(0.0, sd, sweep.passes)
        d0 = sweep.calibrated
        now = sweep.noisier[arm] if sweep.noisier else 1.0
        prior = ((sd / now) ** 2 * rng.chisquare(d0) / d0, d0) if d0 else None
        out.append((np.exp(logs), where, prior))
    if sweep.control and sweep.calibrated:  # the control is the baseline's workload: one calibration
        out[1] = (*out[1][:2], out[0][2])
    return out


def omni_verdict(runs, sweep: Sweep, arm: int, level: float) -> str:
    """``arm`` against the baseline as a summary judges it."""
    companions = tuple(
        Companion(v, s, replica=sweep.control and k == 1, prior=p)
        for k, (v, s, p) in enumerate(runs)
        if k not in (0, arm)
    )
    (b, bs, bp), (o, os_, op) = runs[0], runs[arm]
    return compare(
        b,
        o,
        better="higher",
        min_effect=MIN_EFFECT,
        confidence=level,
        blocks=(bs, os_),
        companions=companions,
        replica=sweep.control and arm == 1,
        priors=(bp, op),
    ).verdict


def references(runs, sweep: Sweep, arm: int, level: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """(difference, half-width) of ``arm`` - baseline by the pooled t and by the oracle."""
    index = [k for k, (v, _, _) in enumerate(runs) for _ in v]
    x = design(index, [s for _, where, _ in runs for s in where], sweep.arms)
    y = np.log(np.concatenate([v for v, _, _ in runs]))
    rows = np.linalg.pinv(x.T @ x) @ x.T
    weight = rows[arm] - rows[0]
    diff = float(weight @ y)
    resid = y - x @ (rows @ y)
    df = y.size - np.linalg.matrix_rank(x)
    pooled = float(sps.t.ppf(0.5 + level / 2, df)) * math.sqrt(resid @ resid / df * float(weight @ weight))
    known = float(np.asarray(sweep.sds)[index] ** 2 @ weight**2)
    return (diff, pooled), (diff, float(sps.norm.ppf(0.5 + level / 2)) * math.sqrt(known))


def _called(diff: float, half: float, direction: int) -> bool:
    """Called in ``direction`` (-1 worse, +1 better, 0 either) by an interval."""
    if direction < 0:
        return diff + half < 0
    if direction > 0:
        return diff - half > 0
    return abs(diff) > half


def power(rng: np.random.Generator, draws: int, sweep: Sweep, arm: int, level: float) -> dict[str, float]:
    """Share of draws in which ``arm`` (a true slowdown) is called worse: by omni, the pooled t, the oracle."""
    calls = {"omni": 0, "pooled t": 0, "oracle": 0}
    for _ in range(draws):
        runs = draw(rng, sweep)
        calls["omni"] += omni_verdict(runs, sweep, arm, level) == "worse"
        pooled, oracle = references(runs, sweep, arm, level)
        calls["pooled t"] += _called(*pooled, -1)
        calls["oracle"] += _called(*oracle, -1)
    return {k: v / draws for k, v in calls.items()}


def false_calls(rng: np.random.Generator, draws: int, sweep: Sweep, level: float) -> dict[str, float]:
    """An A/A sweep (no arm changed): share of draws in which any arm is called
    better or worse against the baseline, by omni and by the pooled t."""
    calls = {"omni": 0, "pooled t": 0}
    arms = range(1, sweep.arms)
    for _ in range(draws):
        runs = draw(rng, sweep)
        calls["omni"] += any(omni_verdict(runs, sweep, a, level) in ("better", "worse") for a in arms)
        calls["pooled t"] += any(_called(*references(runs, sweep, a, level)[0], 0) for a in arms)
    return {k: v / draws for k, v in calls.items()}
