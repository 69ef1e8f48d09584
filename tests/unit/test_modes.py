"""Two states in an arm's runs: the detection's critical values regenerated,
its rate on continua of run levels (uniform, exponential, normal, skewed)
at several spreads and n, its power against a 30 % swing at 6 runs (the
figures docs/statistics.md reports), and what separates the states. Runs
that differ beyond their iterations: tests/unit/test_swing.py.

Simulations draw fixed seeds; every bound leaves at least 4 standard errors
of the simulation (a test that fails one run in twenty helps nobody)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from omni.stats.modes import (
    CRITICAL,
    MIN_RUNS,
    NULLS,
    critical_value,
    critical_values,
    detect_modes,
    explain_modes,
    split_found,
    split_scores,
)

DRAWS = 20_000


def _margin(p: float, draws: int = DRAWS) -> float:
    return 4.5 * math.sqrt(p * (1 - p) / draws)


def test_the_critical_table_is_the_simulated_95th_percentile():
    """CRITICAL was drawn with 1,000,000 samples per n and shape; fresh
    samples of the shape that splits most at each n (uniform or
    exponential) exceed it 5 % of the time, the other at most that, and a
    fresh (smaller) simulation lands near it. The statistic is location- and
    scale-free, so one table serves every spread."""
    rng = np.random.default_rng(11)
    for n, critical in CRITICAL.items():
        rates = [(split_scores(draw(rng, (DRAWS, n)))[0] > critical).mean() for draw in NULLS.values()]
        assert max(rates) < 0.05 + _margin(0.05) and max(rates) > 0.05 - _margin(0.05), (n, rates)
    fresh = critical_values([6, 12], draws=50_000, seed=5)
    assert fresh[6] == pytest.approx(CRITICAL[6], rel=0.06) and fresh[12] == pytest.approx(CRITICAL[12], rel=0.04)
    assert list(CRITICAL.values()) == sorted(CRITICAL.values(), reverse=True)  # so the last serves above 30
    assert critical_value(4) is None and critical_value(60) == CRITICAL[30]


def _unimodal(rng, shape: str, size: tuple[int, int]) -> np.ndarray:
    """Standardised run levels (logs) of a unimodal ``shape``."""
    if shape == "normal":
        return rng.standard_normal(size)
    if shape == "uniform":
        return (rng.random(size) - 0.5) * math.sqrt(12)
    if shape == "exponential":
        return rng.exponential(1.0, size) - 1.0
    if shape == "gamma 2":  # skewed, a mode inside
        return (rng.gamma(2.0, 1.0, size) - 2.0) / math.sqrt(2)
    return (rng.lognormal(0.0, 0.5, size) - math.exp(0.125)) / math.sqrt(math.expm1(0.25) * math.exp(0.25))


SHAPES = ("normal", "uniform", "exponential", "gamma 2", "lognormal 0.5")


@pytest.mark.parametrize("n", range(5, 13))
def test_a_continuum_of_run_levels_is_split_at_most_5_percent_of_the_time(n):
    """Run levels spread 5 to 40 % (sd of the logs) in a unimodal shape,
    plus 1 % noise, with the min_swing the summary uses for times and
    rates (5 %): at most 5 % for every shape and spread; the shape that
    splits most, near 5 % (docs/statistics.md)."""
    rng = np.random.default_rng(100 + n)
    for spread in (0.05, 0.10, 0.20, 0.40):
        rates = {}
        for shape in SHAPES:
            logs = _unimodal(rng, shape, (DRAWS, n)) * spread + rng.standard_normal((DRAWS, n)) * 0.01
            rates[shape] = split_found(logs, min_swing=0.05).mean()
            assert rates[shape] < 0.05 + _margin(0.05), (n, spread, shape, rates[shape])
        assert max(rates.values()) > 0.04 - _margin(0.04) or spread < 0.1  # not bought by a blunt test


# (runs in the low state of 6, within-state noise per run) -> the detection
# rate docs/statistics.md reports for a 30 % swing
POWER_30 = {(3, 0.03): 0.76, (2, 0.03): 0.70, (3, 0.05): 0.28, (2, 0.05): 0.24, (3, 0.08): 0.08, (2, 0.08): 0.07}


@pytest.mark.parametrize("low, noise", list(POWER_30))
def test_a_30_percent_swing_at_6_runs_is_found_as_documented(low, noise):
    rng = np.random.default_rng(int(noise * 1000) + low)
    logs = rng.standard_normal((DRAWS, 6)) * noise
    logs[:, low:] += math.log(1.3)
    rate = split_found(logs, min_swing=0.05).mean()
    assert abs(rate - POWER_30[(low, noise)]) < 0.01 + _margin(0.5), rate


def test_two_states_at_8_percent_noise_are_found_when_they_are_twice_apart():
    """The host's own swings (vLLM 480 / 1150, llama.cpp 2402 / 4742) are 2x and more."""
    rng = np.random.default_rng(2)
    for low, documented in ((3, 0.75), (2, 0.69)):
        logs = rng.standard_normal((DRAWS, 6)) * 0.08
        logs[:, low:] += math.log(2.0)
        assert abs(split_found(logs, 0.05).mean() - documented) < 0.01 + _margin(0.5)


def test_detect_modes_names_the_states_and_their_runs():
    values = [480.0, 1150.0, 470.0, None, 1130.0, 495.0, 1160.0]
    ids = [f"r{i}" for i in range(7)]
    modes = detect_modes(values, ids)
    assert modes.found and modes.n == 6 and modes.critical == CRITICAL[6] and modes.statistic > modes.critical
    slow, fast = modes.clusters
    assert (slow.indices, slow.run_ids, slow.median, slow.count) == ((0, 2, 5), ("r0", "r2", "r5"), 480.0, 3)
    assert (fast.indices, fast.median, fast.count) == ((1, 4, 6), 1150.0, 3)
    assert modes.swing == pytest.approx(1150 / 480)
    assert not detect_modes([100, 101, 99, 102, 98, 100]).found
    assert detect_modes([480, 1150, 470, 1130]).reason == f"fewer than {MIN_RUNS} runs"
    assert not detect_modes([480, 1150, 470, 1130]).found
    assert detect_modes([0, 1, 2, 3, 4]).reason == "a value <= 0 has no log"
    # page-quantised memory: two values 0.01 % apart are no states worth a word
    assert not detect_modes([73.11] * 3 + [73.12] * 3, min_swing=0.01).found
    assert detect_modes([100.0] * 3 + [110.0] * 3, min_swing=0.01).found  # exact states, 10 % apart
    assert not detect_modes([100.0] * 6).found
    # a single run apart is an outlier, not a state
    assert not detect_modes([100, 101, 99, 100.5, 99.5, 300]).found


def _rows(involuntary, freq, **extra):
    return [
        {"ctx_switches_involuntary": i, "cpu_freq_mhz": f, "telemetry_window_s": 1.0, **extra}
        for i, f in zip(involuntary, freq)
    ]


def test_explanation_names_the_columns_whose_ranges_lie_apart_strongest_first():
    slow = _rows([4000, 5200, 4700], [2800, 2810, 2790], slot_index=1, cpu_migrations=None)
    fast = _rows([100, 130], [3000, 3010], slot_index=0)
    for row, nivcsw in zip(slow + fast, [800, 900, 850, 20, 22]):
        row["thread_sched"] = json.dumps(
            [
                {"name": "EngineCore", "cpu_s": 9.0, "nvcsw": 10, "nivcsw": nivcsw, "migrations": 3, "cpus": [0, 1]},
                {"name": "python", "cpu_s": 1.0, "nvcsw": 5, "nivcsw": 1, "migrations": 1, "cpus": [0, 1]},
            ]
        )
    explained = explain_modes(slow, fast)
    texts = [s.text for s in explained.separators]
    assert texts[0] == "the slow runs ran on slot 1, the fast on 0"
    assert "the slow runs had 40x the involuntary switches of the EngineCore thread (median 850/s vs 21/s)" in texts
    assert "the slow runs had 41x the involuntary context switches (median 4700/s vs 115/s)" in texts
    assert "the slow runs had 7% less CPU frequency (median 2800 vs 3005)" in texts
    assert len(texts) == 4  # equal CPU times, switches of python and CPUs separate nothing
    assert explained.separators[0].chance == pytest.approx(2 / math.comb(5, 2))
    assert (
        "(13 column(s) compared; at 3 v 2 runs an unrelated one separates completely 20% of the time)" in explained.text
    )


def test_overlap_or_a_small_ratio_separates_nothing():
    slow = _rows([400, 520, 90], [2800, 2810, 2790])  # one slow run among the fast ones' switches
    fast = _rows([100, 130, 110], [2850, 2860, 2870])  # 2 % apart: not a frequency that explains anything
    assert explain_modes(slow, fast).text == "nothing measured separates them (2 column(s) compared)"
    assert not explain_modes(_rows([140, 150], [1, 1]), _rows([100, 110], [1, 1])).separators  # 1.4x


def test_missing_columns_none_values_and_json_are_handled():
    slow = [
        {"host_conditions": json.dumps({"governor": "powersave", "thp": "always"}), "major_faults": 40},
        {"host_conditions": json.dumps({"governor": "powersave", "thp": "always"}), "major_faults": None},
        {"host_conditions": None, "thread_sched": "not json", "major_faults": 30},
    ]
    fast = [
        {"host_conditions": json.dumps({"governor": "performance", "thp": "always"}), "major_faults": 0},
        {"host_conditions": json.dumps({"governor": "performance", "thp": "always"}), "major_faults": 0},
    ]
    for row in slow + fast:
        row["telemetry_window_s"] = 2.0  # counts are compared a second
    texts = [s.text for s in explain_modes(slow, fast).separators]
    assert 'the slow runs had host_conditions governor "powersave", the fast "performance"' in texts
    assert "the slow runs had 35 major faults, the fast 0" in texts and len(texts) == 2
    assert explain_modes([{}, {}], [{}, {}]).text == "nothing measured separates them (0 column(s) compared)"


def test_an_unrelated_column_separates_2_v_3_runs_one_time_in_5():
    """The chance every separator carries: 2 / C(5, 2) for 2 v 3 runs."""
    rng = np.random.default_rng(4)
    column = rng.lognormal(0, 1, (DRAWS, 5))
    low, high = column[:, :2], column[:, 2:]
    apart = (low.max(1) < high.min(1)) | (low.min(1) > high.max(1))
    assert abs(apart.mean() - 0.2) < _margin(0.2)
    ratio = np.median(low, 1) / np.median(high, 1)
    large = apart & ((ratio >= 1.5) | (ratio <= 1 / 1.5))
    assert large.mean() < apart.mean()  # the ratio rule lowers it, by how much depends on the column's spread
