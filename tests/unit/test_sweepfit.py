"""The sweep-wide slot fit (omni.stats.sweepfit), the planner on its layout
(omni.stats.planning) and the rotation check (omni.run.plan.rotation_balance)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from omni.run.plan import rotation_balance
from omni.stats.planning import Layout, contrast_shape, passes_needed
from omni.stats.sweep_simulation import Sweep, draw, power
from omni.stats.sweepfit import fit_contrast
from omni.stats.verdicts import Companion, compare

LEVEL = 1 - 0.04 / 3


def _sweep(rng, passes=3, slots=2, sds=(0.02, 0.02, 0.02, 0.02), effects=(0, 0, 0, 0)):
    runs = draw(rng, Sweep(passes, slots, sds, effects, True))
    return [np.log(v) for v, _, _ in runs], [w for _, w, _ in runs]


def test_the_contrast_is_the_least_squares_difference_and_pooled_t_when_calibrated_alike():
    """Every group calibrated at the same variance: the interval is the
    slot-blocked pooled t's, by hand (one residual variance, n - rank df)."""
    logs, blocks = _sweep(np.random.default_rng(1))
    fit = fit_contrast(logs, blocks, [0, 0, 2, 3], 0, 3, LEVEL, priors={g: (1e-4, 12) for g in (0, 2, 3)})
    y = np.concatenate(logs)
    arm = np.repeat(np.arange(4), 3)
    slot = np.concatenate(blocks)
    x = np.column_stack([arm == a for a in range(4)] + [slot == 1]).astype(float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    df = y.size - 5
    cov = resid @ resid / df * np.linalg.inv(x.T @ x)
    half = sps.t.ppf(0.5 + LEVEL / 2, df) * math.sqrt(cov[3, 3] + cov[0, 0] - 2 * cov[0, 3])
    assert fit.calibrated and fit.diff == pytest.approx(coef[3] - coef[0])
    assert fit.half == pytest.approx(half, rel=2e-3)  # the GPQ's quasi-random draws: within 0.2 %


def test_a_calibration_the_sweep_contradicts_is_refused():
    """One arm 10x noisier than its calibration says, relative to the rest: refused, own variances kept."""
    rng = np.random.default_rng(2)
    logs, blocks = _sweep(rng, passes=6, sds=(0.01, 0.01, 0.01, 0.10))
    fit = fit_contrast(logs, blocks, [0, 0, 2, 3], 0, 3, LEVEL, priors={g: (1e-4, 12) for g in (0, 2, 3)})
    assert not fit.calibrated and 3 in fit.refused  # the quiet ones depart from a rest that holds it, too
    partly = fit_contrast(logs, blocks, [0, 0, 2, 3], 0, 3, LEVEL, priors={0: (1e-4, 12)})
    assert not partly.calibrated and not partly.refused  # not every group calibrated: each its own


def test_other_arms_tell_the_slots_speeds():
    """The same two arms, with and without the sweep's other two as
    companions: the fit over all four leaves the compared arm more residual
    df and a narrower interval (3 passes, 2 slots, equal noise)."""
    logs, blocks = _sweep(np.random.default_rng(3))
    alone = fit_contrast(logs[::3], blocks[::3], [0, 1], 0, 1, LEVEL)
    whole = fit_contrast(logs, blocks, [0, 0, 2, 3], 0, 3, LEVEL)
    assert whole.dfs[-1] > alone.dfs[-1] and whole.dfs[0] > 2 * alone.dfs[0] - 1e-9
    assert sum(whole.shares) <= sum(alone.shares) + 1e-12


def test_compare_with_companions_reads_the_control_as_the_baselines_replica():
    rng = np.random.default_rng(4)
    runs = draw(rng, Sweep(3, 2, (0.02,) * 4, (0, 0, 0, -0.1), True))
    (b, bs, _), (c, cs, _), (o, os_, _), (s, ss, _) = runs
    kw = dict(better="higher", min_effect=0.05, confidence=LEVEL)
    judged = compare(b, s, blocks=(bs, ss), companions=(Companion(c, cs, True), Companion(o, os_)), **kw)
    control = compare(b, c, blocks=(bs, cs), companions=(Companion(o, os_), Companion(s, ss)), replica=True, **kw)
    assert judged.blocked and control.blocked and judged.df is not None
    # the control shares the baseline's 6 runs' variance: 3.5 residual df, where the other arm has its own 1.75
    assert contrast_shape(Layout(4, 2, True, False), 3)[1] == pytest.approx((3.5, 1.75, 1.75))


def test_calibrated_power_meets_its_goals_at_three_passes():
    """4 arms (baseline, control, two others), 3 passes over 2 slots, 2 %
    noise, every arm calibrated (12 df): a 10 % slowdown called worse in at
    least 80 % of 600 seeded draws (simulated 97 %; were it 90 %, 600 draws
    fall below 80 % with chance < 1e-12), and in a 2-arm sweep at least 0.9x
    the pooled t's calls on the same draws (simulated 0.94x)."""
    cal = {"calibrated": 12}
    four = power(np.random.default_rng(5), 600, Sweep(3, 2, (0.02,) * 4, (0, 0, 0, -0.1), True, **cal), 3, LEVEL)
    two = power(np.random.default_rng(6), 1500, Sweep(3, 2, (0.02,) * 2, (0, -0.1), False, **cal), 1, LEVEL)
    assert four["omni"] >= 0.8, four
    assert two["omni"] >= 0.9 * two["pooled t"], two


def test_the_planner_reads_the_layout():
    """The layout's planner asks no more than the two-sample rule, fewer
    where the control and calibration add degrees of freedom; an effect
    too small for the layout's range falls back to the two-sample rule."""
    plain = passes_needed(0.05, 0.02, LEVEL, goal="difference")
    two = passes_needed(0.05, 0.02, LEVEL, goal="difference", layout=Layout(2, 2, False, False))
    four = passes_needed(0.05, 0.02, LEVEL, goal="difference", layout=Layout(4, 2, True, True))
    assert four < two <= plain
    assert passes_needed(0.05, 0.1, LEVEL, layout=Layout(4, 2, True, True)) == passes_needed(0.05, 0.1, LEVEL)


def test_rotation_balance():
    assert rotation_balance(4, 2) is None and rotation_balance(3, 1) is None and rotation_balance(8, 4) is None
    why = rotation_balance(3, 2)
    assert "3 passes over 2 slots" in why and "passes: 2 or 4" in why
    assert "passes: 4 balance" in rotation_balance(3, 4)  # 0 passes is no suggestion
    assert "passes: 4 or 8" in rotation_balance(5, 4)


def test_one_slot_fits_the_arms_means_and_takes_the_calibrations():
    """A host with one slot (every run on slot 0): the arms' means, each
    group's own variance, or pooled on calibrated scale with the sweep's
    whole residual df (6 runs - 2 arms) where both arms are calibrated."""
    a, b = np.log([100.0, 101.0, 99.0]), np.log([99.0, 101.5, 100.0])
    own = fit_contrast([a, b], [[0] * 3, [0] * 3], [0, 1], 0, 1, LEVEL)
    assert own.blocks == 1 and not own.calibrated and own.dfs == pytest.approx((2, 2))
    assert own.diff == pytest.approx(b.mean() - a.mean())
    calibrated = fit_contrast([a, b], [[0] * 3, [0] * 3], [0, 1], 0, 1, LEVEL, priors={0: (1e-4, 12), 1: (1e-4, 12)})
    pooled = (((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / 4
    assert calibrated.calibrated and calibrated.half == pytest.approx(
        sps.t.ppf(0.5 + LEVEL / 2, 4) * math.sqrt(pooled * 2 / 3), rel=2e-3
    )  # the GPQ's quasi-random draws: within 0.2 %
    c = compare([100, 101, 99], [99, 101.5, 100], better="higher", min_effect=0.05, confidence=LEVEL,
                blocks=([0] * 3, [0] * 3), priors=((1e-4, 12), (1e-4, 12)))  # fmt: skip
    assert c.calibrated and not c.blocked  # no slot fitted: the summary does not say it was


def test_a_reproductions_rerun_is_planned_with_the_recorded_side_fixed():
    from omni.stats.planning import rerun_runs_needed

    # two recorded runs (make sweep's 2 passes): 1 df on their side, no rerun reaches 5 % at the primary level
    assert rerun_runs_needed(0.05, 0.01, 2, 0.9867) is None
    # the recorded side bounds what any rerun can do: fewer recorded runs need more new ones, or cannot be had
    needed = [rerun_runs_needed(0.05, 0.02, r, 0.95) for r in (5, 8, 30)]
    assert needed[0] > needed[1] >= needed[2] >= 2
    # where both sides may grow, passes_needed asks for fewer per side than a rerun against 5 fixed runs needs
    assert passes_needed(0.05, 0.02, 0.95) < needed[0]
    # a drift the interval cannot shed: none
    assert rerun_runs_needed(0.05, 0.01, 30, 0.95, drift=0.02) is None
    with pytest.raises(ValueError):
        rerun_runs_needed(0.0, 0.01, 5)
