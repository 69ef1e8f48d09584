"""Runs that differ beyond their iterations (omni.stats.swing): the AR(1) moments
it rests on, its stated 1 % with correlated iterations, its power, and the
arm-level call the summary makes.

Simulations draw fixed seeds; each bound is the stated rate plus 4 Monte
Carlo standard errors."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from omni.measure.iterations import ac1_log, sd_log
from omni.stats.swing import (
    MIN_ITERATIONS,
    RHO_GRID,
    SWING_ALPHA,
    ar1_moments,
    iteration_noise,
    rho_bound,
    run_statistics,
    runs_swing,
    swing_found,
)

DRAWS = 20_000


def ar1_logs(rng, draws: int, runs: int, k: int, rho: float, sd: float = 0.05) -> np.ndarray:
    """draws x runs x k log iteration values: a stationary Gaussian AR(1) of
    lag-1 correlation rho and marginal sd ``sd`` in each run, level 0."""
    z = rng.standard_normal((draws, runs, k))
    logs = np.empty_like(z)
    logs[..., 0] = z[..., 0]
    for t in range(1, k):
        logs[..., t] = rho * logs[..., t - 1] + math.sqrt(1 - rho**2) * z[..., t]
    return logs * sd


def test_the_ar1_moments_are_the_textbook_ones():
    """g (k x the variance of a mean over sigma^2) and c (E s^2 / sigma^2)
    against the sums, and the effective df of s^2: k - 1 when independent,
    fewer when correlated."""
    for k in (3, 5, 10):
        m = ar1_moments(k)
        for i in (0, 60, 120, 190):
            rho = RHO_GRID[i]
            g = 1 + 2 * sum((1 - j / k) * rho**j for j in range(1, k))
            c = 1 - 2 / (k * (k - 1)) * sum((k - j) * rho**j for j in range(1, k))
            assert m["g"][i] == pytest.approx(g) and m["c"][i] == pytest.approx(c)
        assert m["df"][0] == pytest.approx(k - 1) and m["df"][120] < k - 1
        assert m["tP"][0] / m["tA"][0] == pytest.approx(-1 / k)  # E r1 = -1/k for independent values


def test_the_stored_iteration_statistics_are_the_vectorised_ones():
    """What a run's row stores (omni.measure.iterations) is what the simulations compute."""
    rng = np.random.default_rng(3)
    logs = ar1_logs(rng, 4, 3, 6, 0.5)
    medians, sds, ac1s = run_statistics(logs)
    for run, median, sd, ac1 in zip(logs.reshape(-1, 6), medians.ravel(), sds.ravel(), ac1s.ravel()):
        values = np.exp(run).tolist()
        assert math.log(float(np.median(values))) == pytest.approx(median)
        assert sd_log(values) == pytest.approx(sd) and ac1_log(values) == pytest.approx(ac1)
    assert ac1_log([1.0, 2.0]) is None and ac1_log([5.0, 5.0, 5.0]) is None
    assert ac1_log([1.0, 2.0, 1.0, 2.0]) == pytest.approx(-0.75)  # alternating: a fast one follows a slow one


def test_the_vectorised_decision_is_the_summarys():
    rng = np.random.default_rng(4)
    logs = ar1_logs(rng, 300, 4, 6, 0.4)
    logs[:150, 0] += 0.4
    found = swing_found(logs)
    medians, sds, ac1s = run_statistics(logs)
    one_by_one = [
        runs_swing(np.exp(m).tolist(), iteration_noise(s.tolist(), r.tolist(), [6] * 4)).found
        for m, s, r in zip(medians, sds, ac1s)
    ]
    assert found.tolist() == one_by_one and 0.1 < found.mean() < 0.5


def test_the_correlation_bound_lies_above_rho_and_near_it_with_many_runs():
    rng = np.random.default_rng(5)
    for rho in (0.0, 0.3, 0.6):
        _, sds, ac1s = run_statistics(ar1_logs(rng, 200, 200, 10, rho))
        bound = RHO_GRID[rho_bound(sds, ac1s, np.full(sds.shape, 10.0))]
        assert (bound >= rho - 0.02).mean() > 0.85 and np.median(bound) < rho + 0.1, (rho, np.median(bound))


# (lag-1 correlation, runs, iterations): cells of the simulated table where the uncorrected rule
# called 22 and 27 % (rho 0.6) and 7 % (rho 0.3); the corrected one 0.7, 0.7 and 0.2 %
CELLS = [(0.6, 5, 5), (0.6, 8, 4), (0.3, 8, 9)]


def test_runs_of_one_level_with_correlated_iterations_are_called_different_at_most_1_percent():
    """AR(1) iterations: the rate stays within 1 % plus 4 Monte Carlo
    standard errors (1.28 % at 20,000 arms). Were a cell's true rate the
    full 1 %, it would pass that bound with chance P(Z > 4) = 3.2e-5, so the
    three fail by chance less than 1 in 10,000 (at their simulated 0.2-0.7 %,
    less than 1 in 10^6). The same arms judged as if the iterations were
    independent (rho 0: the rule before v14) break the bound in every cell."""
    bound = SWING_ALPHA + 4 * math.sqrt(SWING_ALPHA * (1 - SWING_ALPHA) / DRAWS)
    for i, (rho, runs, k) in enumerate(CELLS):
        logs = ar1_logs(np.random.default_rng(100 + i), DRAWS, runs, k, rho)
        rate = swing_found(logs).mean()
        assert rate <= bound, (rho, runs, k, rate)
        uncorrected = swing_found(logs, z=-math.inf).mean()  # the bound at rho 0 whatever the runs show
        assert uncorrected > bound, (rho, runs, k, uncorrected)


# one run in three 30 % slower, 5 % noise, its own iterations 4x as spread: found (docs/statistics.md)
POWER = {(0.0, 5): 0.38, (0.0, 10): 0.89, (0.6, 10): 0.36}


@pytest.mark.parametrize("rho, k", list(POWER))
def test_one_run_in_three_30_percent_slower_is_found_as_documented(rho, k):
    logs = ar1_logs(np.random.default_rng(int(rho * 10) + k), 4000, 3, k, rho)
    logs[:, 0] = logs[:, 0] * 4 + math.log(0.7)
    rate = swing_found(logs).mean()
    assert abs(rate - POWER[(rho, k)]) < 0.01 + 4 * math.sqrt(0.25 / 4000), rate


def test_an_arm_is_named_with_its_slow_run_and_says_why_it_is_not_tested():
    iterated = [0.01, 0.01, 0.01], [-0.2, -0.3, -0.1], [5, 5, 5]
    within = iteration_noise(*iterated)
    assert within.runs == 3 and 0 <= within.rho <= RHO_GRID[-1] and within.df > 0
    swing = runs_swing([700.0, 1000.0, 1010.0], within, ["a", "b", "c"])
    assert swing.found and swing.clusters[0].run_ids == ("a",) and swing.clusters[1].run_ids == ("b", "c")
    assert swing.rho == within.rho and swing.p < SWING_ALPHA
    assert not runs_swing([990.0, 1000.0, 1010.0], within).found
    assert runs_swing([700.0, 1000.0], within).reason == "fewer than 3 runs"
    # rows before v14 (no correlation stored) and runs of too few iterations are not tested
    assert iteration_noise([0.01] * 3, [None] * 3, [5] * 3) is None
    assert iteration_noise([0.01] * 3, [-0.3] * 3, [MIN_ITERATIONS - 1] * 3) is None
    untested = runs_swing([700.0, 1000.0, 1010.0], None)
    assert not untested.found and untested.reason.startswith(f"no run of {MIN_ITERATIONS} iterations")
    still = iteration_noise([0.0] * 3, [None] * 3, [5] * 3)  # iterations that agree exactly
    assert runs_swing([700.0, 1000.0, 1010.0], still).reason == "no iteration spread to compare with"


def test_runs_stored_before_v14_read_with_no_correlation_and_are_not_tested(tmp_path):
    """run_v13.parquet: three runs of one arm as the schema-13 writer stored
    them (iterations and their sd, no lag-1 autocorrelation), one 30 % slow:
    upgraded on read with the correlation null, and the arm not tested,
    saying why, rather than tested as if its iterations were independent."""
    from omni.report.states import arm_swing
    from omni.store.columns import SCHEMA_VERSION
    from omni.store.reading import load_runs

    partition = tmp_path / "runs" / "sweep=s-2026-12-04"
    partition.mkdir(parents=True)
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "run_v13.parquet", partition / "r-v13-0001.parquet")
    frame = load_runs(tmp_path)
    assert len(frame) == 3 and (frame["schema_version"] == SCHEMA_VERSION).all()
    assert frame["decode_tok_s_iter_ac1_log"].isna().all() and (frame["decode_tok_s_iter_sd_log"] == 0.01).all()
    swing, explained = arm_swing(frame, "kv-4g", "decode_tok_s", 0.05)
    assert not swing.found and explained is None and swing.reason.startswith("no run of 4 iterations")
    frame["decode_tok_s_iter_ac1_log"] = -0.2  # as a v14 writer would have stored it
    assert arm_swing(frame, "kv-4g", "decode_tok_s", 0.05)[0].found
