"""One arm against another within a sweep, every arm of the sweep in the fit.

Every arm of a sweep visits the same slots in the same passes (the plan
rotates them, :func:`omni.run.plan.rotated_slot`), so each arm's runs tell
the slots' speeds as well as its own level. A comparison that fitted the
slot effects from its two arms only threw that away: at 3 passes over 2
slots each arm kept 1.5 residual degrees of freedom, and at 4 slots 0.5.

Here the least squares fit of log value = arm + slot (an additive two-way
model without interaction, Montgomery, Design and Analysis of
Experiments, ch. 4) runs over all of the sweep's arms. The compared
difference is a contrast of two arm coefficients, ``w @ y`` with ``w`` its
row of (X'X)^-1 X': other arms' runs enter it through the slot effects.

Variance is not one pooled residual variance: arms of one sweep differ in
noise (a stock and a patched vLLM arm ran 340-910 against 475-625 tok/s in
one sweep), and pooling them undercounts the noisier arm's (``omni
simulate`` shows the pooled t calling an A/A pair different 11 % of the time
at a stated 1.3 % where the noisier arm has the fewer runs). Each variance
*group* has its own: sum r^2 / sum (1 - h) over its runs (h the hat
matrix's diagonal), and the contrast's variance is the sandwich sum over
groups of s_g^2 sum_{i in g} w_i^2, its half-width by the generalized
pivotal quantity over the groups' degrees of freedom
(:func:`omni.stats.intervals.generalized_half_width`). A group is one arm,
except that an arm and its replica share one: the live A/A control runs the
baseline's own configuration, so the two have one noise by construction
and their runs estimate it together. That is the only pooling done without
evidence; pooling distinct arms on the strength of their variances looking
alike is what the A/A rows of ``omni simulate`` show failing at 3 passes
(empirical Bayes moderation across 4 arms, one 5x noisier: 5.6 % false
calls at a stated 1.3 %), because 1.5-2 degrees of freedom cannot tell a
1:5 noise ratio from 1:1.

Where every arm of the sweep has a stored calibration of its workload on
this host (``omni calibrate``: its runs' noise from A/A sweeps, with the df
it was measured from), the calibrations say how the arms' noises compare,
and this sweep says how noisy the host is now: the model is
sigma_g^2 = phi kappa_g, kappa_g the calibrated variance of group g and phi
one factor for the whole sweep (a shared host gets noisier or quieter for
every arm at once). phi is estimated from every run of the sweep,
phi = sum_g r_g'r_g / kappa_g / sum_g d_g, and the contrast's variance is
phi sum_g kappa_g share_g with the sweep's whole residual df: the pooled t
on noise scaled by the calibration. It keeps unequal noise unequal (a
5x noisier arm is calibrated 5x noisier) and a host noisier than when it
was calibrated costs nothing. What it assumes is that each arm's noise
*relative to the others* is what it was; where one group's scaled
variance departs from the rest's (F on (d_g, the others' df) beyond the
two-sided :data:`STALE_ALPHA`), the calibrations are refused for the whole
comparison, each group keeps its own variance, and the fit says so.
Calibrations are 12 df or more (3 sweeps of 2 arms of 3 runs) where this
sweep's groups have 1.5-2: the calibrated ratio is taken as known.

Pure (STYLE.md 4): arrays in, tuples out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from omni.stats.intervals import generalized_half_width

# a group whose runs the fit reproduces exactly holds no variance of its own
LEAST_DF = 0.5
# calibrations are refused where one group's scaled variance departs from the rest's at this chance (two-sided F)
STALE_ALPHA = 0.01


@dataclass(frozen=True)
class Fit:
    """The compared contrast and what its interval is made of."""

    diff: float  # other - base, in log units
    half: float  # half-width at the asked level
    noise: float  # the two compared groups' pooled residual sd (one run's relative noise)
    df: float  # Satterthwaite's df of the contrast's variance (reference)
    variances: tuple[float, ...]  # per group, the variance used (phi kappa_g where calibrated)
    dfs: tuple[float, ...]  # per group, its degrees of freedom
    shares: tuple[float, ...]  # per group, sum of w_i^2 over its runs: its weight in the contrast's variance
    calibrated: bool = False  # the variances are phi kappa_g from every group's calibration
    refused: tuple[int, ...] = ()  # groups whose noise, relative to the others', contradicts their calibration
    blocks: int = 2  # how many blocks (slots) the runs span: 1 fits the arms' means only


def design(arms: Sequence[int], blocks: Sequence, count: int) -> np.ndarray | None:
    """Arm indicators and one indicator per block after the first (none
    where the runs sit in one block: the arms' means); None when a block
    label is missing."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in blocks):
        return None
    levels = sorted(set(blocks), key=str)
    x = np.zeros((len(arms), count + len(levels) - 1))
    x[np.arange(len(arms)), np.asarray(arms)] = 1.0
    for column, level in enumerate(levels[1:]):
        x[:, count + column] = [float(v == level) for v in blocks]
    return x


def _fit(logs: Sequence[np.ndarray], blocks: Sequence[Sequence]):
    """The arm + block least squares fit: (y, arm of each run, (X'X)^-1 X',
    residuals, leverages), or None where it cannot be fitted."""
    arm = np.concatenate([np.full(len(v), i) for i, v in enumerate(logs)])
    labels = [b for bs in blocks for b in bs]
    y = np.concatenate([np.asarray(v, float) for v in logs])
    x = design(arm.tolist(), labels, len(logs)) if len(labels) == y.size else None
    if x is None or y.size <= x.shape[1] or np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    rows = np.linalg.inv(x.T @ x) @ x.T
    return y, arm, rows, y - x @ (rows @ y), np.einsum("ij,ji->i", x, rows)


def residual_sums(logs: Sequence[np.ndarray], blocks: Sequence[Sequence]) -> list[tuple[float, float]] | None:
    """Per arm, (sum r^2, sum (1 - h)) over its runs in the arm + block fit of
    every arm: what its noise is with the blocks' speeds taken out (a
    calibration's noise from its A/A sweeps); None where it cannot be fitted."""
    fitted = _fit(logs, blocks)
    if fitted is None:
        return None
    _, arm, _, resid, leverage = fitted
    return [(float(resid[arm == i] @ resid[arm == i]), float((1 - leverage[arm == i]).sum())) for i in range(len(logs))]


def fit_contrast(
    logs: Sequence[np.ndarray],
    blocks: Sequence[Sequence],
    groups: Sequence[int],
    base: int,
    other: int,
    confidence: float,
    *,
    drift: float = 0.0,
    drift_df: float = math.inf,
    floors: Sequence[float] | None = None,
    priors: Mapping[int, tuple[float, float]] | None = None,
) -> Fit | None:
    """Arm ``other`` minus arm ``base`` over the arm + block fit of every arm.

    ``logs``/``blocks``: per arm, its runs' log values and blocks (slots).
    ``groups``: per arm, its variance group (arms sharing a group share one
    noise by construction). ``floors``: per arm, the least variance of one of
    its runs' log value (its iterations' spread; a memory figure's page).
    ``priors``: group -> (variance, df) its calibration measured; used where every group has one.
    ``drift`` adds 2 drift^2 with ``drift_df`` degrees of freedom.
    Runs in one block fit the arms' means (the groups' variances and the
    calibrations apply as with blocks). None where it cannot be fitted: a
    label missing, an arm confounded with the blocks, or a group the contrast leans on with
    no residual degree of freedom of its own; the caller falls back.
    """
    fitted = _fit(logs, blocks)
    if fitted is None:
        return None
    y, arm, rows, resid, leverage = fitted
    weight = rows[other] - rows[base]
    group_of = np.asarray(groups)[arm]
    floors = floors or [0.0] * len(logs)
    priors = priors or {}
    names = sorted(set(groups))
    variances, dfs, shares, sums, least = [], [], [], [], []
    for group in names:
        runs = group_of == group
        shares.append(float(weight[runs] @ weight[runs]))
        dfs.append(float((1 - leverage[runs]).sum()))
        sums.append(float(resid[runs] @ resid[runs]))
        least.append(max(f for f, g in zip(floors, groups) if g == group))
        variances.append(max(sums[-1] / dfs[-1], least[-1]) if dfs[-1] >= LEAST_DF else math.nan)
    scaled, refused = _calibrated(names, sums, dfs, priors)
    if scaled:
        variances = [max(v, floor) for v, floor in zip(scaled, least)]
        dfs = [sum(dfs)] * len(dfs)
    elif any(math.isnan(v) and sh > 1e-12 * max(float(weight @ weight), 1e-300) for v, sh in zip(variances, shares)):
        return None
    variances = [0.0 if math.isnan(v) else v for v in variances]
    parts = [v * s for v, s in zip(variances, shares)]
    extra = 2 * drift**2
    var = sum(parts) + extra
    noise_terms = sum(parts) ** 2 / dfs[0] if scaled else sum(p**2 / d for p, d in zip(parts, dfs) if p > 0)
    terms = noise_terms + (extra**2 / drift_df if math.isfinite(drift_df) else 0)
    compared = [names.index(g) for g in sorted({groups[base], groups[other]})]
    pooled = sum(variances[i] * dfs[i] for i in compared) / sum(dfs[i] for i in compared)
    if scaled:  # one estimated factor: the pooled t's interval (and the drift's own part, where there is one)
        half = generalized_half_width([sum(parts), extra], [dfs[0], drift_df], confidence)
    else:
        half = generalized_half_width([*parts, extra], [*dfs, drift_df], confidence)
    return Fit(
        float(weight @ y),
        half,
        math.sqrt(pooled),
        math.inf if terms == 0 else var**2 / terms,
        tuple(variances),
        tuple(dfs),
        tuple(shares),
        bool(scaled),
        tuple(refused),
        len({b for bs in blocks for b in bs}),
    )


def _calibrated(names, sums, dfs, priors) -> tuple[list[float] | None, tuple[int, ...]]:
    """Per group, phi kappa_g (module doc), or None where a group has no
    calibration or the sweep contradicts them (then the groups that did)."""
    if not all(g in priors and priors[g][0] > 0 for g in names) or sum(dfs) <= 0:
        return None, ()
    kappa = [priors[g][0] for g in names]
    scaled = [s / k for s, k in zip(sums, kappa)]  # r'r / kappa: phi d chi2-like per group
    if sum(scaled) <= 0:  # runs that repeat exactly (a memory figure to the page): no noise to scale
        return None, ()
    refused = []
    for i, group in enumerate(names):
        rest = sum(dfs) - dfs[i]
        if dfs[i] < LEAST_DF or rest < LEAST_DF:
            continue
        rest_sum = sum(scaled) - scaled[i]
        f = (scaled[i] / dfs[i]) / (rest_sum / rest) if rest_sum > 0 else math.inf
        if not sps.f.ppf(STALE_ALPHA / 2, dfs[i], rest) <= f <= sps.f.ppf(1 - STALE_ALPHA / 2, dfs[i], rest):
            refused.append(group)
    if refused:
        return None, tuple(refused)
    phi = sum(scaled) / sum(dfs)
    return [phi * k for k in kappa], ()
