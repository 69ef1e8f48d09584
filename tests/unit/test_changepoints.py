"""Level shifts in a nightly history (omni.stats.changepoints): the false-alarm
rate its penalty is simulated for, through ruptures, and a step found where it is."""

from __future__ import annotations

import math

import numpy as np

from omni.stats.changepoints import ALPHA, MIN_SWEEPS, critical_gain, level_shifts, noise_sd


def test_a_history_without_a_shift_reports_one_at_most_alpha_of_the_time():
    """3000 stationary histories per length, through ruptures' Binseg: at
    most 5 % plus 4 Monte Carlo standard errors (seeded: deterministic; a
    rule exactly at 5 % would fail such a bound 3 times in 100,000)."""
    rng = np.random.default_rng(1)
    draws = 3000
    for length in (5, 9, 20):
        ids = [f"n{i}" for i in range(length)]
        alarms = sum(bool(level_shifts(np.exp(rng.normal(0, 0.03, length)), ids, 0.0)) for _ in range(draws))
        assert alarms / draws <= ALPHA + 4 * math.sqrt(ALPHA * (1 - ALPHA) / draws), (length, alarms)


def test_a_step_is_found_where_it_is_and_its_size_named():
    levels = [100, 101, 99, 100.5, 99.5, 100, 90, 89.5, 90.5, 90, 89]
    ids = [f"n{i}" for i in range(len(levels))]
    (shift,) = level_shifts(levels, ids, 0.05)
    assert (shift.index, shift.sweep_id, shift.before, shift.after) == (6, "n6", 6, 5)
    assert 0.89 < shift.ratio < 0.91
    # the same step smaller than min_effect is not reported
    assert level_shifts(levels, ids, 0.2) == ()


def test_too_short_or_flat_histories_say_nothing():
    assert level_shifts([100, 90, 80, 70], ["a", "b", "c", "d"], 0.05) == ()  # under MIN_SWEEPS
    assert MIN_SWEEPS == 5 and level_shifts([100] * 6, list("abcdef"), 0.05) == ()


def test_the_noise_scale_ignores_a_step_and_the_penalty_falls_with_length_past_a_few():
    logs = np.log([100, 101, 99, 100, 80, 81, 79, 80])
    assert noise_sd(logs) < 0.02  # one difference of 20 %, the median of the others about 1 %
    assert critical_gain(30) < critical_gain(8)


def test_regressions_list_where_a_nightly_level_shifted(tmp_path):
    """Nine nights, the last four 12 % slower: each of them is a change
    against its window only until the window fills with slow nights; the
    shift is named once, at the night it began."""
    from omni.history.compare import nightly_changes
    from omni.report.across import changes_markdown
    from tests.rows import store_sweep

    centers = [100, 101, 99, 100.5, 99.5, 88, 88.5, 87.5, 88]
    for night, center in enumerate(centers):
        store_sweep(tmp_path, f"n{night}", {"a": [center - 0.5, center, center + 0.5]}, name="nightly", day=night)
    nightly = nightly_changes(tmp_path, "nightly", window=3)
    (shift,) = nightly.shifts[("a", "decode_tok_s")]
    assert shift.sweep_id == "n5" and 0.87 < shift.ratio < 0.89
    text = changes_markdown("nightly", nightly)
    assert "Level shifts over the history" in text and "- `a` decode_tok_s: x0.88" in text and "from n5 on" in text
