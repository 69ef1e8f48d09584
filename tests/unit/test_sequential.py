"""The sequential rule of ``passes: auto`` (omni.stats.sequential).

The boundaries are checked against scipy's multivariate normal (exact, a
few looks) and a simulated canonical process (many looks); the rule itself
by simulated sweeps judged with omni's own compare and decide
(benchmarks/sequential_rules.py's ``simulate``, a seeded subset of what
that benchmark runs at 4,000 sweeps a setting).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from omni.stats.sequential import (
    DEFAULT_MAX_PASSES,
    FIRST_LOOK,
    boundaries,
    decide,
    look_alpha,
    look_confidence,
    passes_to_stop,
    spent,
)
from omni.stats.verdicts import Comparison
from tests.conftest import REPO

PRIMARY = 1 - 0.04 / 3  # a default spec's primary level: 3 primaries share 4 % of 5 %


@pytest.fixture(scope="module")
def rules():
    """benchmarks/sequential_rules.py as a module (registered first: its dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location("sequential_rules", REPO / "benchmarks" / "sequential_rules.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# --- the spending ---


@pytest.mark.parametrize("max_passes", [3, 4, 12, 20, 100])
def test_the_looks_spend_exactly_the_metrics_alpha(max_passes):
    slices = [look_alpha(0.05, n, max_passes) for n in range(1, max_passes + 1)]
    assert slices[: FIRST_LOOK - 1] == [0.0] * (FIRST_LOOK - 1)
    assert all(s > 0 for s in slices[FIRST_LOOK - 1 :])
    assert sum(slices) == pytest.approx(0.05)


def test_the_first_look_is_at_what_three_passes_of_the_budget_are_worth():
    """One look alone: its boundary is the marginal quantile of its slice."""
    assert look_alpha(0.05, 3, 20) == pytest.approx(0.05 * (3 / 20) ** 2)
    assert look_confidence(0.95, 3, 20) == pytest.approx(1 - 0.05 * (3 / 20) ** 2)
    assert look_confidence(PRIMARY, 3, 12) == pytest.approx(1 - (1 - PRIMARY) * (3 / 12) ** 2)
    assert look_confidence(0.95, 3, 3) == pytest.approx(0.95)  # one planned look spends it all


@pytest.mark.parametrize("max_passes", [4, 12, 20])
def test_later_looks_run_below_their_slice_and_above_the_fixed_level(max_passes):
    """The boundaries use the looks' correlation: every later look's level is
    lower (its interval narrower) than 1 - its own slice, as Bonferroni over
    the looks would have it, yet above the metric's fixed-sample level, and
    the levels fall look by look as the spending rises."""
    levels = [look_confidence(0.95, n, max_passes) for n in range(FIRST_LOOK, max_passes + 1)]
    for n, level in zip(range(FIRST_LOOK + 1, max_passes + 1), levels[1:]):
        assert 0.95 < level < 1 - look_alpha(0.05, n, max_passes)
    assert levels == sorted(levels, reverse=True)


@pytest.mark.parametrize(("max_passes", "alpha"), [(4, 0.05), (5, 0.01), (6, 0.04 / 3), (8, 0.05)])
def test_the_boundaries_cross_with_the_spent_chance_exactly(max_passes, alpha):
    """P(some |Z_j| >= c_j, j <= k) under no effect, from scipy's
    multivariate normal of the looks (Cov(Z_j, Z_k) = sqrt(n_j / n_k)),
    equals alpha (n_k/N)^2 at every look k: the recursion's integral is the
    canonical joint distribution's. To 1e-5: scipy's integration (Genz's
    quasi-Monte Carlo) is good to about 1e-6 in 6 dimensions, the grid's to 1e-7."""
    c = np.array(boundaries(alpha, max_passes))
    n = np.arange(FIRST_LOOK, max_passes + 1)
    cov = np.sqrt(np.minimum.outer(n, n) / np.maximum.outer(n, n))
    for k in range(1, n.size + 1):
        law = multivariate_normal(np.zeros(k), cov[:k, :k], abseps=1e-9, releps=1e-9, maxpts=10**6)
        crossed = 1 - law.cdf(c[:k], lower_limit=-c[:k])
        assert crossed == pytest.approx(spent(n[k - 1] / max_passes, alpha), abs=1e-5)


@pytest.mark.parametrize(("max_passes", "alpha"), [(20, 0.05), (100, 0.02)])
def test_the_boundaries_cross_with_the_spent_chance_over_many_looks(max_passes, alpha):
    """The canonical process drawn: S_n a sum of n standard normals, Z_n =
    S_n / sqrt(n); the share of paths that have crossed by each look is the
    spent alpha within 4 Monte Carlo standard errors (a seeded draw: a
    correct recursion fails it with chance under 1e-4 per look)."""
    draws = 200_000
    paths = np.cumsum(np.random.default_rng(3).standard_normal((draws, max_passes), dtype=np.float32), axis=1)
    c = np.array(boundaries(alpha, max_passes))
    n = np.arange(FIRST_LOOK, max_passes + 1)
    crossed = np.logical_or.accumulate(np.abs(paths[:, n - 1]) / np.sqrt(n) >= c, axis=1).mean(axis=0)
    expected = alpha * (n / max_passes) ** 2
    assert np.all(np.abs(crossed - expected) <= 4 * np.sqrt(expected * (1 - expected) / draws) + 1e-5)


def test_the_boundaries_are_memoized():
    assert boundaries(0.05, 20) is boundaries(0.05, 20)


def test_no_look_past_the_plan():
    with pytest.raises(ValueError, match="plans 12"):
        look_alpha(0.05, 13, 12)
    with pytest.raises(ValueError, match="plans 12"):
        look_confidence(0.95, 13, 12)
    with pytest.raises(ValueError, match="max_passes"):
        look_alpha(0.05, 2, 2)
    with pytest.raises(ValueError, match="max_passes"):
        boundaries(0.05, 2)


# --- the rule, simulated with omni's compare and decide ---

AA = {"judged": ("decode_tok_s",), "metrics": ("decode_tok_s",), "primary": ("decode_tok_s",)}


def test_aa_false_calls_stay_within_alpha_where_fixed_levels_do_not(rules):
    """An A/A arm at 10 % noise with the whole 5 % on one metric, 6 looks
    (max_passes 8): called better or worse at any look up to the stop at
    most alpha + 4 Monte Carlo standard errors of 1,000 sweeps (7.76 %;
    this seed: 3.7 %). The draws are seeded, so the test is deterministic;
    were the rule's true rate exactly 5 %, a seed drawn at random would fail
    it with chance about 3e-5. The same looks at the fixed 95 % (a rule
    that spends nothing) call 8.4 % on these draws, and fail it. (1,000
    sweeps of omni's compare, about 2 ms each: the costliest test here.)"""
    setting = rules.Setting("A/A", 1, 8, 0.10, 0.10, **AA)
    draws = 1000
    found = rules.simulate(setting, {"boundaries": rules.boundary_levels, "fixed": rules.fixed_levels}, draws, 7)
    limit = rules.bound(0.05, draws)
    (rate,) = rules.called_rates(found["boundaries"], at_stop=False).values()
    (fixed,) = rules.called_rates(found["fixed"], at_stop=False).values()
    assert rate <= limit
    assert fixed > limit


def test_a_20_percent_slowdown_is_found_early_and_never_later_than_bonferroni(rules):
    """At 5 % noise every sweep finds it worse, by 6 passes at the median.
    Each later look's interval is nested in Bonferroni-over-looks' (same
    centre, a lower level), so on the same draws the rule stops at the
    same look or earlier, never later."""
    setting = rules.Setting("x0.8", 1, 20, 0.05, 0.05, 0.8, **AA)
    found = rules.simulate(setting, rules.RULES, 200, 8)
    ours, theirs = found["boundaries"], found["bonferroni"]
    assert all(o.verdicts[("arm0", "decode_tok_s")] == "worse" for o in ours)
    assert np.median([o.passes for o in ours]) <= 6
    assert all(a.passes <= b.passes for a, b in zip(ours, theirs))
    assert sum(a.passes for a in ours) < sum(b.passes for b in theirs)


def test_the_rule_finds_an_effect_by_the_passes_the_planner_names(rules):
    """A 20 % slowdown (x0.8, an effect of 25 % the other way round) at 5 %
    noise at a default spec's primary level: ``passes_to_stop`` names the
    look by which the rule has found it 80 % of the time (within 4 Monte
    Carlo standard errors of 400 sweeps, seeded), and not one two passes
    earlier."""
    need = passes_to_stop(0.25, 0.05, PRIMARY, 20, goal="difference")
    setting = rules.Setting("x0.8", 1, 20, 0.05, 0.05, 0.8, **rules.DEFAULT_SPEC)
    outcomes = rules.simulate(setting, {"boundaries": rules.boundary_levels}, 400, 9)["boundaries"]
    found = np.array([o.verdicts[("arm0", "decode_tok_s")] == "worse" for o in outcomes])
    spent_passes = np.array([o.passes for o in outcomes])
    assert float(np.mean(found & (spent_passes <= need))) >= 0.8 - 4 * math.sqrt(0.16 / 400)
    assert float(np.mean(found & (spent_passes <= need - 2))) < 0.8


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
