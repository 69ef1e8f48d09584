"""Runs that differ beyond their iterations: whether an arm's runs (engine
processes) differ by more than the noise of their own iterations implies,
so that the process (its start, its placement, what ran beside it) moved
the number, not the iterations within it.

Pure (STYLE.md 4): floats in, frozen dataclasses out; numpy and scipy only.

The null: each run's log iteration values are its arm's level plus a
stationary Gaussian AR(1) series (variance sigma^2, lag-1 correlation rho,
the same in every run): an iteration's disturbance (a frequency step, a
neighbour, a cache) may outlast it and carry into the next. A run's value is
the median of its k iterations. Under it the runs' sample variance of log
values s^2, against the variance of one run's median that the iterations
imply, is F with (n - 1, df) degrees of freedom, where, for a mean of k AR(1)
values (Box, Jenkins & Reinsel, *Time Series Analysis*, the variance of the
sample mean; the median's efficiency for normal values, pi/2, as before):

- its variance is (pi/2) sigma^2 / k * g, g = 1 + 2 sum_{j<k} (1 - j/k) rho^j;
- a run's iteration variance s_r^2 is biased low: E s^2 = sigma^2 c,
  c = 1 - (g - 1) / (k - 1), so sigma^2 is estimated by s_r^2 / c;
- s_r^2 has tr(AS)^2 / tr(ASAS) effective degrees of freedom (Satterthwaite,
  for the quadratic form x'Ax / (k - 1), A = I - J/k, S the correlation
  matrix), fewer than k - 1.

rho itself is unknown, and from 3-10 iterations hard to know: the lag-1
autocorrelation r1 of one run is biased far below rho (at 5 iterations its
mean is -0.20 at rho 0 and -0.02 at rho 0.6), more than the first-order
correction (Marriott & Pope 1954; Kendall 1954: E r1 ~ rho - (1 + 4 rho) / k)
recovers: plugged in, that correction still called 22 % at a stated 1 % with
AR(1) iterations at rho 0.6. So it is pooled over the arm's runs, R = the sum
of the runs' lag-products over the sum of their squares, its expectation
taken exactly for AR(1) to second order and its variance to first (the
quadratic forms' moments: E x'Mx = tr(MS), Cov(x'Mx, x'Nx) = 2 tr(MSNS) for
Gaussian x), and rho is taken at the largest value that R does not fall
:data:`RHO_Z` standard errors below (a one-sided upper bound: the nuisance
parameter at the edge of its confidence set, as in Berger & Boos 1994, with
the level set by simulation rather than by their exact sum), within
[0, :data:`RHO_MAX`]. Runs of fewer than :data:`MIN_ITERATIONS` iterations
are not used.

Simulated (:func:`swing_found`, tests/unit/test_swing.py; the tables are in
docs/statistics.md): AR(1) iterations at rho 0, 0.3 and 0.6, 3-8 runs of
4-10 iterations, runs of one level are called different at most 0.14 %,
0.22 % and 0.86 % of the time at the stated 1 % (before the correction: up
to 0.55 %, 6.8 % and 49 %); at rho 0.9, up to 3.7 %: the 1 % is claimed for
lag-1 correlations up to 0.6. The price is power where iterations are few:
one run in three 30 % slower (5 % noise, independent iterations) is found
46 % of the time at 5 iterations a run, 89 % at 8, 97 % at 10.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import chi2
from scipy.stats import f as f_dist

from omni.stats.modes import Cluster, cluster_of

SWING_ALPHA = 0.01  # per arm and primary metric: several are tested in a summary
RHO_MAX = 0.95  # beyond it a run's median is one draw of a slow wander: no test would say much
RHO_Z = 1.25  # rho at R's upper bound this many standard errors out: the level holds to rho 0.6 (simulated)
RHO_GRID = np.linspace(0.0, RHO_MAX, 191)  # steps of 0.005; the bound is the grid point at or above it
# Runs of fewer iterations say next to nothing of their correlation: the mean lag-1 autocorrelation
# of 3 values moves from -0.33 at rho 0 to -0.25 at 0.9, against an sd of 0.23 a run (of 2: -0.5 always)
MIN_ITERATIONS = 4


@dataclass(frozen=True)
class Within:
    """What a typical run's iterations imply for its log value: ``variance``
    of one run's median (its iterations' lag-1 correlation allowed for, up to
    ``rho``), estimated with ``df`` degrees of freedom, from ``runs`` runs."""

    variance: float
    df: float
    rho: float
    runs: int


@dataclass(frozen=True)
class Swing:
    """Whether an arm's runs differ by more than their iterations' noise
    implies. ``clusters``: the runs below and above the widest gap between
    sorted values."""

    n: int
    found: bool
    between_sd: float | None = None  # sd of the runs' log values
    within_sd: float | None = None  # sd of one run's log value that its iterations imply
    p: float | None = None
    clusters: tuple[Cluster, Cluster] | None = None
    reason: str | None = None
    rho: float | None = None  # the iterations' lag-1 correlation allowed for (an upper bound)


@lru_cache(maxsize=64)
def ar1_moments(k: int) -> dict[str, np.ndarray]:
    """Per rho of :data:`RHO_GRID`, for k AR(1) values of unit variance:
    ``g`` (k x the variance of their mean), ``c`` (E s^2), ``df`` (effective
    degrees of freedom of s^2), and the traces that give the mean and
    variance of the pooled lag-1 autocorrelation: ``tA`` = E sum (x - mean)^2,
    ``tP`` = E sum of lag products, ``tAA``, ``tPA``, ``tPP`` (tr(ASAS)...)."""
    lag = np.abs(np.subtract.outer(np.arange(k), np.arange(k)))
    s = RHO_GRID[:, None, None] ** lag  # 0 ** 0 = 1: the identity at rho 0
    a = np.eye(k) - 1.0 / k
    pairs = np.eye(k, k=1)
    p = a @ ((pairs + pairs.T) / 2) @ a  # sum_t (x_t - mean)(x_t+1 - mean) = x'Px
    a_s, p_s = a @ s, p @ s
    t_a = np.trace(a_s, axis1=1, axis2=2)
    t_aa = np.einsum("gij,gji->g", a_s, a_s)
    g = s.sum(axis=(1, 2)) / k
    return {
        "g": g,
        "c": t_a / (k - 1),
        "df": t_a**2 / t_aa,
        "tA": t_a,
        "tP": np.trace(p_s, axis1=1, axis2=2),
        "tAA": t_aa,
        "tPA": np.einsum("gij,gji->g", p_s, a_s),
        "tPP": np.einsum("gij,gji->g", p_s, p_s),
    }


def _by_k(iterations: np.ndarray, name: str, index: np.ndarray) -> np.ndarray:
    """``ar1_moments(k)[name]`` at each run's own k and its row's grid index."""
    out = np.empty(iterations.shape)
    rows = np.broadcast_to(index[:, None], iterations.shape)
    for k in np.unique(iterations):
        mask = iterations == k
        out[mask] = ar1_moments(int(k))[name][rows[mask]]
    return out


def rho_bound(sd_logs: np.ndarray, ac1s: np.ndarray, iterations: np.ndarray, z: float = RHO_Z) -> np.ndarray:
    """Per row (an arm's runs: draws x runs, k >= 4 each), the index into
    :data:`RHO_GRID` of the largest rho that the pooled lag-1 autocorrelation
    does not fall ``z`` standard errors below (0 when it falls below even
    rho 0's). Each run's lag products are recovered from its r1 and s^2."""
    squares = (iterations - 1) * sd_logs**2
    with np.errstate(divide="ignore", invalid="ignore"):  # no spread at all: nan, and rho 0's index
        pooled = (ac1s * squares).sum(axis=1) / squares.sum(axis=1)
    counts = {int(k): (iterations == k).sum(axis=1)[:, None] for k in np.unique(iterations)}
    total = {name: sum(n * ar1_moments(k)[name][None, :] for k, n in counts.items()) for name in ar1_moments(3)}
    t_a, t_p = total["tA"], total["tP"]
    ratio = t_p / t_a
    var = 2 * (total["tPP"] - 2 * ratio * total["tPA"] + ratio**2 * total["tAA"]) / t_a**2
    # second order: E N/D ~ EN/ED - Cov(N, D)/ED^2 + EN Var(D)/ED^3, Cov = 2 tr(PSAS), Var D = 2 tr(ASAS);
    # at 3 runs of 5 iterations, rho 0.6: 0.031 against 0.037 simulated, where the first order says 0.076
    mean = ratio - 2 * total["tPA"] / t_a**2 + 2 * t_p * total["tAA"] / t_a**3
    plausible = mean - z * np.sqrt(np.maximum(var, 0.0)) <= pooled[:, None]
    last = plausible.shape[1] - 1 - np.argmax(plausible[:, ::-1], axis=1)
    return np.where(plausible.any(axis=1), last, 0)


def within_noise(sd_logs: np.ndarray, ac1s: np.ndarray, iterations: np.ndarray, z: float = RHO_Z):
    """Per row: (variance of one run's log median, its df, rho allowed for).

    The median over runs of (pi/2) (s^2 / c) g / k, divided by the median of
    a chi-square with the runs' median df over that df, so that it estimates
    the variance (a median, not the mean, as :func:`omni.stats.verdicts.within_run_variance`
    would: a run a neighbour disturbed spreads its own iterations, and must
    not hide that it differs from the others); df: the runs' effective df,
    times the median's efficiency (2 / pi)."""
    index = rho_bound(sd_logs, ac1s, iterations, z)
    g, c, df = (_by_k(iterations, name, index) for name in ("g", "c", "df"))
    parts = math.pi / 2 * sd_logs**2 / c * g / iterations
    typical = np.median(df, axis=1)
    variance = np.median(parts, axis=1) / (chi2.median(typical) / typical)
    return variance, 2 / math.pi * df.sum(axis=1), RHO_GRID[index]


def iteration_noise(
    sd_logs: Sequence[float | None], ac1s: Sequence[float | None], iterations: Sequence[float | None]
) -> Within | None:
    """:func:`within_noise` of one arm's runs: those of 4 iterations or more
    whose sd and lag-1 autocorrelation of log iteration values are known
    (rows before schema v13 have none); None without any."""
    # a run whose iterations agree exactly has no correlation to speak of (0 / 0), nor weight in R
    kept = [
        (float(s), float(r) if _number(r) else 0.0, int(k))
        for s, r, k in zip(sd_logs, ac1s, iterations)
        if _number(s) and _number(k) and int(k) >= MIN_ITERATIONS and (_number(r) or float(s) == 0)
    ]
    if not kept:
        return None
    s, r, k = (np.array([[item[i] for item in kept]]) for i in range(3))
    variance, df, rho = within_noise(s, r, k)
    return Within(float(variance[0]), float(df[0]), float(rho[0]), len(kept))


def _number(value) -> bool:
    return value is not None and math.isfinite(float(value))


def swing_p(logs: np.ndarray, within: np.ndarray, df: np.ndarray) -> np.ndarray:
    """The F test's p per row of run log values (draws x runs): their sample
    variance over ``within``, F with (n - 1, df) degrees of freedom."""
    ratio = logs.var(axis=1, ddof=1) / within
    return f_dist.sf(ratio, logs.shape[1] - 1, np.maximum(df, 1.0))


def runs_swing(
    values: Sequence[float | None],
    within: Within | None,
    run_ids: Sequence[str] | None = None,
    min_swing: float = 0.0,
    alpha: float = SWING_ALPHA,
) -> Swing:
    """Test whether runs differ beyond their iterations (the module's F
    test, ``within`` from :func:`iteration_noise`): found when p is below
    ``alpha`` and the widest and narrowest run differ by ``min_swing`` or
    more. Needs 3 runs and iterations that spread. The sides are split at
    the widest gap between the sorted values."""
    kept = [(i, float(v)) for i, v in enumerate(values) if v is not None and math.isfinite(float(v)) and float(v) > 0]
    n = len(kept)
    if n < 3:
        return Swing(n, False, reason="fewer than 3 runs")
    if within is None:
        return Swing(
            n, False, reason=f"no run of {MIN_ITERATIONS} iterations or more with its iterations' correlation recorded"
        )
    if not within.variance > 0:
        return Swing(n, False, reason="no iteration spread to compare with", rho=within.rho)
    order = sorted(kept, key=lambda item: item[1])
    logs = np.log([[v for _, v in order]])
    p = float(swing_p(logs, np.array([within.variance]), np.array([within.df]))[0])
    cut = int(np.argmax(np.diff(logs[0]))) + 1
    clusters = (cluster_of(order[:cut], run_ids), cluster_of(order[cut:], run_ids))
    found = p < alpha and order[-1][1] / order[0][1] >= 1 + min_swing
    between = math.sqrt(float(logs.var(ddof=1)))
    return Swing(n, found, between, math.sqrt(within.variance), p, clusters, rho=within.rho)


def run_statistics(iteration_logs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log of the median value, sd of logs, lag-1 autocorrelation of logs)
    per run of ``iteration_logs`` (... x k, in iteration order): what a run's
    row stores (:func:`omni.measure.iterations.run_metrics`), vectorised."""
    deviations = iteration_logs - iteration_logs.mean(axis=-1, keepdims=True)
    squares = (deviations**2).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ac1 = (deviations[..., 1:] * deviations[..., :-1]).sum(axis=-1) / squares
    k = iteration_logs.shape[-1]
    return np.log(np.median(np.exp(iteration_logs), axis=-1)), np.sqrt(squares / (k - 1)), ac1


def swing_found(
    iteration_logs: np.ndarray, min_swing: float = 0.0, alpha: float = SWING_ALPHA, z: float = RHO_Z
) -> np.ndarray:
    """The decision of :func:`runs_swing` (with :func:`iteration_noise`) for
    each arm of ``iteration_logs`` (draws x runs x k iterations, the
    logs of iteration values in order): vectorised for the simulations."""
    if iteration_logs.shape[-1] < MIN_ITERATIONS:
        return np.zeros(iteration_logs.shape[0], dtype=bool)
    logs, sd, ac1 = run_statistics(iteration_logs)
    k = np.full(sd.shape, float(iteration_logs.shape[-1]))
    within, df, _ = within_noise(sd, ac1, k, z)
    spread = np.exp(logs.max(axis=1) - logs.min(axis=1))
    return (swing_p(logs, within, df) < alpha) & (spread >= 1 + min_swing)
