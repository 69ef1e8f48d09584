"""The simulation suite of omni's own decision code (omni.stats.simulation): the
quick rows hold, and the check has teeth (the rule omni used to use fails it)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from omni.stats.simulation import LEVEL, Row, _pair, aa_false_calls, rows_markdown, simulate


def test_the_quick_rows_hold_their_stated_rates():
    """Seeded, so deterministic for this code: it fails only when a change
    moves a rule's rate off its stated side. Were the rules exactly at their
    stated rates, a row would miss its four-standard-error allowance 3 times
    in 100,000; they are below them (conservative), so less often still."""
    rows = simulate(draws=4000, quick=True)
    assert len(rows) == 3 and all(row.draws == 4000 for row in rows)
    assert all(row.holds for row in rows), rows_markdown(rows)


def test_a_row_with_the_pooled_welch_interval_fails():
    """The same 6 v 3 runs at 2 % v 10 % noise over 2 slots, judged by
    Welch's t interval with one Satterthwaite df (what the blocked fit's
    pooled variance and Welch both amount to here, slots ignored): it misses
    about 3 % of the time at a stated 1.33 %, and the row's check says so."""
    rng = np.random.default_rng(3)
    draws, wrong = 4000, 0
    for _ in range(draws):
        (b, _), (o, _) = _pair(rng, 2, (6, 3), (0.02, 0.10))
        lb, lo = np.log(b), np.log(o)
        vb, vo = lb.var(ddof=1) / 6, lo.var(ddof=1) / 3
        df = (vb + vo) ** 2 / (vb**2 / 5 + vo**2 / 2)
        wrong += abs(lo.mean() - lb.mean()) > sps.t.ppf(0.5 + LEVEL / 2, df) * math.sqrt(vb + vo)
    welch = Row("A/A called different", "Welch", 1 - LEVEL, "at most", wrong / draws, draws)
    assert not welch.holds, welch
    # omni's own on other draws of the same configuration holds
    assert aa_false_calls(np.random.default_rng(4), draws, 2, (6, 3), (0.02, 0.10)).holds


def test_row_bounds():
    at_most = Row("r", "s", 0.0133, "at most", 0.0133 + 4.1 * math.sqrt(0.0133 * 0.9867 / 4000), 4000)
    assert not at_most.holds
    at_least = Row("r", "s", 0.8, "at least", 0.8 - 3.9 * math.sqrt(0.16 / 4000), 4000)
    assert at_least.holds


def test_a_reproductions_rerun_of_the_planned_passes_settles_an_aa_target():
    """The closest grid row (4 recorded runs, 1 % noise, 0.5 % drift, 98.67 %):
    81.5 % at 4,000 draws. At 2,000 draws the row fails below 80 % - 4 SE
    (76.4 %): for a true 81.5 %, z = -5.8, a chance of about 1 in 10^8."""
    from omni.stats.simulation import settled_in_reproduction

    row = settled_in_reproduction(np.random.default_rng(7), 2000, 4, 0.01, 0.005, LEVEL)
    assert row.holds, rows_markdown([row])
    assert "4 recorded v 6 new runs" in row.setting
