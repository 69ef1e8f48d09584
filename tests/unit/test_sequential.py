"""The sequential rule of ``passes: auto`` (omni.sequential), proven by simulation.

Simulated sweeps draw log-normal run values (one run's relative noise ``cv``)
for a baseline and an arm, look after every pass from the third on at the
look's spent level with Welch's interval (omni.stats.compare's, checked
equal below), and stop an arm once its verdict is conclusive. Fixed seeds;
each bound is asserted with three Monte Carlo standard errors of margin.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as sps

from omni.sequential import (
    DEFAULT_MAX_PASSES,
    FIRST_LOOK,
    decide,
    look_alpha,
    look_confidence,
    passes_to_stop,
)
from omni.stats import Comparison, compare

PRIMARY = 1 - 0.04 / 3  # a default spec's primary level: 3 primaries share 4 % of 5 %
MAX = 20


def simulate(cv, effect, *, min_effect=0.05, max_passes=MAX, sims=4000, seed=0, confidence=PRIMARY, fixed=False):
    """(passes spent, final verdict) of ``sims`` sequential sweeps of one
    metric (higher is better), ``effect`` the arm's true relative change;
    ``fixed``: every look at ``confidence`` itself (the rule without spending)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, cv, (sims, max_passes))
    other = rng.normal(math.log1p(effect), cv, (sims, max_passes))
    margin = math.log1p(min_effect)
    spent = np.full(sims, max_passes)
    verdict = np.full(sims, "inconclusive", dtype=object)
    active = np.ones(sims, bool)
    for n in range(FIRST_LOOK, max_passes + 1):
        idx = np.flatnonzero(active)
        b, o = base[idx, :n], other[idx, :n]
        vb, vo = b.var(axis=1, ddof=1) / n, o.var(axis=1, ddof=1) / n
        var = vb + vo
        df = var**2 / ((vb**2 + vo**2) / (n - 1))  # Welch-Satterthwaite
        level = confidence if fixed else look_confidence(confidence, n, max_passes)
        half = sps.t.ppf(0.5 + level / 2, df) * np.sqrt(var)
        diff = o.mean(axis=1) - b.mean(axis=1)
        apart = (diff - half > 0) | (diff + half < 0)
        inside = ~apart & (diff - half >= -margin) & (diff + half <= margin)
        verdict[idx] = np.where(apart, np.where(diff > 0, "better", "worse"), np.where(inside, "equivalent", "-"))
        done = idx[apart | inside]
        spent[done] = n
        active[done] = False
    verdict[verdict == "-"] = "inconclusive"
    return spent, verdict


def upper(rate: float, sims: int) -> float:
    """The rate plus three of its Monte Carlo standard errors."""
    return rate + 3 * math.sqrt(max(rate, 1e-3) * (1 - rate) / sims)


# --- the spending ---


@pytest.mark.parametrize("max_passes", [3, 4, 12, 20, 100])
def test_the_looks_spend_exactly_the_metrics_alpha(max_passes):
    slices = [look_alpha(0.05, n, max_passes) for n in range(1, max_passes + 1)]
    assert slices[: FIRST_LOOK - 1] == [0.0] * (FIRST_LOOK - 1)
    assert all(s > 0 for s in slices[FIRST_LOOK - 1 :])
    assert sum(slices) == pytest.approx(0.05)


def test_the_first_look_spends_what_three_passes_of_the_budget_are_worth():
    assert look_alpha(0.05, 3, 20) == pytest.approx(0.05 * (3 / 20) ** 2)
    assert look_confidence(0.95, 20, 20) == pytest.approx(1 - 0.05 * (1 - (19 / 20) ** 2))
    # the spending composes with the multiplicity split: a metric's share, sliced
    assert look_confidence(PRIMARY, 5, 20) == pytest.approx(1 - (1 - PRIMARY) * ((5 / 20) ** 2 - (4 / 20) ** 2))


def test_no_look_past_the_plan():
    with pytest.raises(ValueError, match="plans 12"):
        look_alpha(0.05, 13, 12)
    with pytest.raises(ValueError, match="max_passes"):
        look_alpha(0.05, 2, 2)


# --- the simulator is the rule ---


def test_the_simulated_rule_is_omnis_compare():
    """Each simulated look's verdict equals omni.stats.compare's on the same
    values at the same level (Welch, no slots, no within-run floor)."""
    for sweep in range(40):
        cv, effect = [0.05, 0.15][sweep % 2], [0.0, 0.1, -0.2][sweep % 3]
        spent, verdict = simulate(cv, effect, sims=1, seed=100 + sweep, max_passes=8)
        draw = np.random.default_rng(100 + sweep)
        base = np.exp(draw.normal(0, cv, (1, 8)))[0]
        other = np.exp(draw.normal(math.log1p(effect), cv, (1, 8)))[0]
        for n in range(FIRST_LOOK, int(spent[0]) + 1):
            level = look_confidence(PRIMARY, n, 8)
            got = compare(base[:n], other[:n], better="higher", min_effect=0.05, confidence=level).verdict
            assert got == (verdict[0] if n == spent[0] else "inconclusive"), (sweep, n)


# --- what the rule does, simulated ---

SIMS = 10_000


@pytest.mark.parametrize("cv", [0.05, 0.15, 0.30])
def test_aa_pairs_are_called_different_at_most_5_percent_of_the_time(cv):
    """The whole 5 % on one metric (the worst case of the split) over up to
    18 looks; without the spending the same looks call ~3x as many."""
    _, verdict = simulate(cv, 0.0, sims=SIMS, seed=11, confidence=0.95)
    false = float(np.mean(np.isin(verdict, ["better", "worse"])))
    assert upper(false, SIMS) <= 0.05
    _, naive = simulate(cv, 0.0, sims=SIMS, seed=11, confidence=0.95, fixed=True)
    assert float(np.mean(np.isin(naive, ["better", "worse"]))) > 0.10


def test_aa_at_a_primary_metrics_level_stays_within_its_share():
    _, verdict = simulate(0.15, 0.0, sims=SIMS, seed=12)
    assert upper(float(np.mean(np.isin(verdict, ["better", "worse"]))), SIMS) <= 1 - PRIMARY


@pytest.mark.parametrize(("cv", "median_at_most", "found_at_least"), [(0.05, 5, 0.99), (0.15, 14, 0.85)])
def test_a_20_percent_slowdown_is_found_early(cv, median_at_most, found_at_least):
    spent, verdict = simulate(cv, -0.2, sims=4000, seed=13)
    assert np.median(spent) <= median_at_most
    assert float(np.mean(verdict == "worse")) >= found_at_least
    assert not np.any(verdict == "better")


def test_a_20_percent_slowdown_at_30_percent_noise_mostly_runs_out_of_passes():
    """At 30 % noise 20 passes are too few for 20 % (the planner asks ~40):
    the rule runs to max_passes and says inconclusive, it does not guess."""
    spent, verdict = simulate(0.30, -0.2, sims=4000, seed=14)
    assert np.median(spent) == MAX
    assert float(np.mean(verdict == "better")) < 0.005


def test_aa_pairs_stop_equivalent_where_the_noise_allows_else_at_max_passes():
    spent, verdict = simulate(0.02, 0.0, sims=4000, seed=15)
    assert np.median(spent) <= 10
    assert float(np.mean(verdict == "equivalent")) >= 0.99
    spent, verdict = simulate(0.05, 0.0, sims=4000, seed=16)
    assert np.median(spent) == MAX
    assert float(np.mean(verdict == "equivalent")) < 0.1


# --- the planner agrees with the rule ---


@pytest.mark.parametrize(("cv", "effect"), [(0.05, 0.1), (0.15, 0.2), (0.03, 0.05), (0.05, 0.2), (0.02, 0.05)])
def test_the_rule_stops_where_the_planner_said(cv, effect):
    """The rule has found the effect 80 % of the time (the planner's power)
    within one pass of the passes ``passes_to_stop`` names, either way."""
    need = passes_to_stop(effect, cv, PRIMARY, MAX)
    assert FIRST_LOOK <= need < MAX
    spent, verdict = simulate(cv, -effect, sims=4000, seed=17)
    found = verdict == "worse"
    assert float(np.mean(found & (spent <= need + 1))) >= 0.8 - 3 * math.sqrt(0.16 / 4000)
    assert float(np.mean(found & (spent <= need - 2))) < 0.8


def test_the_planner_past_max_passes_says_more():
    assert passes_to_stop(0.05, 0.30, PRIMARY, 20) > 20


# --- decide ---


def comparison(verdict: str, ratio: float = 1.0) -> Comparison:
    return Comparison(5, 5, ratio, ratio * 0.98, ratio * 1.02, 0.05, 0.02, 0.0, verdict, confidence=0.999)


def test_decide_stops_when_every_primary_is_conclusive():
    verdicts = {("b", "decode_tok_s"): comparison("worse", 0.8), ("b", "ttft_ms"): comparison("equivalent")}
    decision = decide(verdicts, 4, 12)
    assert (decision.stop, decision.reason) == (True, "conclusive")
    assert "b decode_tok_s worse x0.800 [0.784, 0.816]" in decision.lines[0]
    assert decision.describe() == "after pass 4: every primary verdict is conclusive; stopping"


def test_decide_continues_names_the_inconclusive_and_stops_at_the_budget():
    verdicts = {("b", "decode_tok_s"): comparison("inconclusive"), ("b", "ttft_ms"): None}
    decision = decide(verdicts, 4, 12, refused={("b", "ttft_ms"): "refused: why"})
    assert (decision.stop, decision.pending) == (False, ("b decode_tok_s",))
    assert "continuing: 1 inconclusive (b decode_tok_s)" in decision.describe()
    assert "b ttft_ms: refused: why" in decision.lines
    assert decide(verdicts, 12, 12).reason == "max_passes"
    assert decide(verdicts, 5, 12, out_of_time=True).reason == "budget"


# --- the spec ---

AB = "arms:\n  - {name: a, engine: synthetic}\n  - {name: b, engine: synthetic}\n"


def load_text(tmp_path, monkeypatch, text: str):
    from omni.spec import load_spec

    monkeypatch.chdir(tmp_path)
    Path("spec.yaml").write_text(text)
    return load_spec(Path("spec.yaml")).sweep


def spec_problems(tmp_path, monkeypatch, text: str) -> list[str]:
    from omni.errors import SpecError

    with pytest.raises(SpecError) as err:
        load_text(tmp_path, monkeypatch, text)
    return str(err.value).splitlines()


def test_passes_auto_plans_max_passes_and_keeps_the_control(tmp_path, monkeypatch):
    sweep = load_text(tmp_path, monkeypatch, "name: x\npasses: auto\nmax_passes: 12\nbudget: 1h30m\n" + AB)
    assert (sweep.auto, sweep.planned_passes, sweep.budget, sweep.control_arm) == (True, 12, 5400.0, "a.control")
    sweep = load_text(tmp_path, monkeypatch, "name: x\npasses: auto\n" + AB)
    assert (sweep.planned_passes, sweep.budget) == (DEFAULT_MAX_PASSES, None)
    assert load_text(tmp_path, monkeypatch, "name: x\npasses: 4\n" + AB).planned_passes == 4


@pytest.mark.parametrize(("given", "seconds"), [("2h", 7200), ("45m", 2700), ("90s", 90), ("1.5h", 5400), (600, 600)])
def test_a_budget_is_seconds_or_a_duration(tmp_path, monkeypatch, given, seconds):
    sweep = load_text(tmp_path, monkeypatch, f"name: x\npasses: auto\nbudget: {given}\n" + AB)
    assert sweep.budget == seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\npasses: auto\narms:\n  - {name: a, engine: synthetic}\n", "spec.yaml:2 passes: auto stops when"),
        ("name: x\npasses: automatic\n" + AB, "spec.yaml:2 passes: must be an integer or auto, got 'automatic'"),
        ("name: x\npasses: 0\n" + AB, "spec.yaml:2 passes: must be >= 1"),
        ("name: x\npasses: 3\nmax_passes: 9\n" + AB, "spec.yaml:3 max_passes: max_passes is for passes: auto"),
        ("name: x\npasses: auto\nmax_passes: 2\n" + AB, "spec.yaml:3 max_passes: must be >= 3"),
        ("name: x\npasses: auto\nbudget: soon\n" + AB, "spec.yaml:3 budget: 'soon' is no time budget; give seconds"),
        ("name: x\npasses: auto\nbudget: 0\n" + AB, "spec.yaml:3 budget: 0 is no time budget"),
    ],
)
def test_passes_auto_problems_name_the_field_and_the_fix(tmp_path, monkeypatch, text, expected):
    assert any(line.startswith(expected) for line in spec_problems(tmp_path, monkeypatch, text))
