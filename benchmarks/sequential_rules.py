"""``passes: auto``'s sequential rule, simulated with omni's own judging.

Each simulated sweep draws log-normal run values (one run's relative noise
``cv``) for a baseline and some arms, then looks after every pass from the
third on as a sweep does: every arm against the baseline on each judged
primary metric with omni.stats.verdicts.compare, at each look's levels, and
omni.stats.sequential.decide on them; it stops where decide stops. Two rules on
the same draws:

- ``boundaries``: omni's rule, the group-sequential boundaries
  (omni.stats.sequential.look_levels);
- ``bonferroni``: the same spending, alpha_m (n/N)^2, but each look's
  interval at 1 - its own slice (Bonferroni over the looks: valid whatever
  the looks' dependence, and conservative), :func:`bonferroni_levels`.

Part 1 (A/A, the boundaries alone): the rate at which an arm is called
better or worse on a metric, per (arm, metric), at the stop and at any look
before it, against that metric's alpha_m (its Bonferroni share from
omni.stats.verdicts.adjust_for_multiplicity: primaries decode_tok_s and ttft_ms,
2 % each), with 2 arms against one baseline at noise 2, 10 and 30 % and
max_passes 12 and 20, 4 arms, and unequal noise (1:5). The bound: alpha_m
plus 4 Monte Carlo standard errors; the exit status is 1 past it.

Part 2 (both rules, same draws): passes to stop for a 20 % slowdown at 5,
15 and 30 % noise and for an A/A pair at 2 % noise, one arm on
decode_tok_s at a default spec's primary level (4 %/3), max_passes 20,
and how often the verdict omni.stats.sequential.passes_to_stop plans for has
come in by the passes it names.

    .venv/bin/python benchmarks/sequential_rules.py [--draws 4000] [--seed 1] [--part 1|2] [--jobs 2]

tests/unit/test_sequential.py runs a seeded subset of part 1 with
:func:`simulate`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omni.spec.settings import DEFAULT_PRIMARY_METRICS  # noqa: E402
from omni.stats.sequential import FIRST_LOOK, decide, look_alpha, look_levels, passes_to_stop  # noqa: E402
from omni.stats.verdicts import Adjustment, adjust_for_multiplicity, compare  # noqa: E402
from omni.store.columns import COLUMNS_BY_NAME  # noqa: E402

MIN_EFFECT = 0.05
CALLED = ("better", "worse")
# decode_tok_s judged alone, at a default spec's primary level: 3 primaries share 4 % of 5 %
DEFAULT_SPEC = {
    "judged": ("decode_tok_s",),
    "metrics": (*DEFAULT_PRIMARY_METRICS, "tpot_ms"),
    "primary": DEFAULT_PRIMARY_METRICS,
}

# (adjustment, passes, max_passes) -> each metric's level at that look
Levels = Callable[[Adjustment, int, int], Mapping[str, float]]


def boundary_levels(adjustment: Adjustment, passes: int, max_passes: int) -> Mapping[str, float]:
    """omni's rule: the look's levels from the group-sequential boundaries."""
    return look_levels(adjustment, passes, max_passes).confidence


def bonferroni_levels(adjustment: Adjustment, passes: int, max_passes: int) -> Mapping[str, float]:
    """The reference rule: each look's interval at 1 - its slice of alpha_m,
    alpha_m ((n/N)^2 - ((n-1)/N)^2) (the first look alpha_m (3/N)^2)."""
    return {m: 1 - look_alpha(1 - c, passes, max_passes) for m, c in adjustment.confidence.items()}


def fixed_levels(adjustment: Adjustment, passes: int, max_passes: int) -> Mapping[str, float]:
    """A rule that spends nothing: every look at the fixed-sample level."""
    return adjustment.confidence


RULES: dict[str, Levels] = {"boundaries": boundary_levels, "bonferroni": bonferroni_levels}


@dataclass(frozen=True)
class Setting:
    """What one configuration simulates."""

    name: str
    arms: int
    max_passes: int
    base_cv: float
    arm_cv: float
    ratio: float = 1.0  # each arm's true value over the baseline's
    judged: tuple[str, ...] = ("decode_tok_s", "ttft_ms")  # the primaries simulated
    metrics: tuple[str, ...] = ("decode_tok_s", "ttft_ms", "tpot_ms")  # what the adjustment splits over
    primary: tuple[str, ...] = ("decode_tok_s", "ttft_ms")

    def adjustment(self) -> Adjustment:
        return adjust_for_multiplicity(self.metrics, self.primary)


@dataclass(frozen=True)
class Outcome:
    """One simulated sweep under one rule."""

    passes: int
    verdicts: Mapping[tuple[str, str], str]  # at the stop
    ever: Mapping[tuple[str, str], bool]  # called better/worse at some look up to the stop


def draw(rng: np.random.Generator, setting: Setting) -> tuple[dict, list[dict]]:
    """Run values per pass: the baseline's and each arm's, per judged metric."""
    n = setting.max_passes
    base = {m: np.exp(rng.normal(0.0, setting.base_cv, n)) for m in setting.judged}
    shift = math.log(setting.ratio)
    arms = [{m: np.exp(rng.normal(shift, setting.arm_cv, n)) for m in setting.judged} for _ in range(setting.arms)]
    return base, arms


def run_rule(base: dict, arms: list[dict], setting: Setting, levels: Levels) -> Outcome:
    """The sweep on these draws under ``levels``: look after each pass from
    the third, judge with omni.stats.verdicts.compare, stop where omni.stats.sequential.decide says."""
    adjustment = setting.adjustment()
    ever: dict[tuple[str, str], bool] = {}
    for n in range(FIRST_LOOK, setting.max_passes + 1):
        level = levels(adjustment, n, setting.max_passes)
        comparisons = {
            (f"arm{i}", m): compare(
                base[m][:n], arm[m][:n], better=COLUMNS_BY_NAME[m].better, min_effect=MIN_EFFECT, confidence=level[m]
            )
            for i, arm in enumerate(arms)
            for m in setting.judged
        }
        for key, c in comparisons.items():
            ever[key] = ever.get(key, False) or c.verdict in CALLED
        if decide(comparisons, n, setting.max_passes).stop:
            return Outcome(n, {k: c.verdict for k, c in comparisons.items()}, ever)
    raise AssertionError("decide stops at max_passes")


def simulate(setting: Setting, rules: Mapping[str, Levels], draws: int, seed: int) -> dict[str, list[Outcome]]:
    """``draws`` sweeps of ``setting``, each rule on the same draws."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[Outcome]] = {name: [] for name in rules}
    for _ in range(draws):
        base, arms = draw(rng, setting)
        for name, levels in rules.items():
            out[name].append(run_rule(base, arms, setting, levels))
    return out


def called_rates(outcomes: list[Outcome], at_stop: bool = True) -> dict[tuple[str, str], float]:
    """Per (arm, metric): the share of sweeps that called it better or worse
    (at the stop, or at any look up to it)."""
    keys = outcomes[0].verdicts
    if at_stop:
        return {k: float(np.mean([o.verdicts[k] in CALLED for o in outcomes])) for k in keys}
    return {k: float(np.mean([o.ever[k] for o in outcomes])) for k in keys}


def bound(alpha: float, draws: int) -> float:
    """alpha plus 4 Monte Carlo standard errors of a rate of alpha over ``draws``."""
    return alpha + 4 * math.sqrt(alpha * (1 - alpha) / draws)


# --- part 1: A/A, the boundaries ---


def validity_settings() -> list[Setting]:
    """Two arms at 2, 10 and 30 % noise and max_passes 12 and 20; four arms;
    unequal noise (1:5) both ways. Not the whole cross: omni's compare costs
    about 2 ms (its generalized interval's 2^16 draws), and the four-arm
    settings at 20 planned passes alone would take over an hour at 4,000 sweeps."""
    found = [
        Setting(f"A/A 2 arms, N {most}, noise {cv:.0%}", 2, most, cv, cv)
        for most in (12, 20)
        for cv in (0.02, 0.10, 0.30)
    ]
    found.append(Setting("A/A 4 arms, N 12, noise 10%", 4, 12, 0.10, 0.10))
    found += [
        Setting(f"A/A 2 arms, N 12, noise base {b:.0%} arms {a:.0%}", 2, 12, b, a)
        for b, a in ((0.02, 0.10), (0.10, 0.02))
    ]
    return found


def validity_row(setting: Setting, draws: int, seed: int) -> tuple[str, bool]:
    """One setting's row of part 1, and whether every (arm, metric) stayed within the bound."""
    began = time.monotonic()
    outcomes = simulate(setting, {"boundaries": boundary_levels}, draws, seed)["boundaries"]
    alpha = 1 - setting.adjustment().confidence[setting.judged[0]]
    at_stop, ever = called_rates(outcomes), called_rates(outcomes, at_stop=False)
    limit = bound(alpha, draws)
    fine = max(ever.values()) <= limit
    passes = statistics.median(o.passes for o in outcomes)
    row = (
        f"| {setting.name} | {alpha:.2%} | {np.mean(list(at_stop.values())):.2%} / {max(at_stop.values()):.2%} "
        f"| {max(ever.values()):.2%} | {limit:.2%} | {passes:g} | {'ok' if fine else 'OVER'} "
        f"({time.monotonic() - began:.0f} s) |"
    )
    return row, fine


def validity_table(draws: int, seed: int, jobs: int) -> bool:
    print(f"Part 1: A/A, the boundaries, {draws} sweeps each; rates per (arm, metric)")
    print("| setting | alpha_m | called at stop, mean / worst | called at any look, worst | bound | median passes | |")
    print("|---|---|---|---|---|---|---|", flush=True)
    settings = validity_settings()
    ok = True
    with ProcessPoolExecutor(jobs) as pool:
        for row, fine in pool.map(validity_row, settings, [draws] * len(settings), range(seed, seed + len(settings))):
            print(row, flush=True)
            ok &= fine
    return ok


# --- part 2: passes to stop, both rules ---


def passes_settings() -> list[Setting]:
    found = [Setting(f"x0.8 at noise {cv:.0%}", 1, 20, cv, cv, 0.8, **DEFAULT_SPEC) for cv in (0.05, 0.15, 0.30)]
    return [*found, Setting("A/A at noise 2%", 1, 20, 0.02, 0.02, 1.0, **DEFAULT_SPEC)]


def planned(setting: Setting) -> tuple[int, str]:
    """omni's planner for the setting (omni.stats.sequential.passes_to_stop, 80 %
    power) and the verdict it plans for: a ratio r is an effect of 1/r - 1
    the other way round; no effect is equivalence within min_effect."""
    level = setting.adjustment().confidence["decode_tok_s"]
    if setting.ratio == 1.0:
        return passes_to_stop(MIN_EFFECT, setting.arm_cv, level, setting.max_passes, goal="equivalence"), "equivalent"
    effect = 1 / setting.ratio - 1
    return passes_to_stop(effect, setting.arm_cv, level, setting.max_passes, goal="difference"), "worse"


def passes_rows(setting: Setting, draws: int, seed: int) -> list[str]:
    """One setting's rows of part 2, a row per rule, on the same draws."""
    rows = []
    need, goal = planned(setting)
    for name, outcomes in simulate(setting, RULES, draws, seed).items():
        verdicts = [o.verdicts[("arm0", "decode_tok_s")] for o in outcomes]
        share = {v: verdicts.count(v) / len(verdicts) for v in ("worse", "equivalent", "better", "inconclusive")}
        passes = [o.passes for o in outcomes]
        answered = [o.passes for v, o in zip(verdicts, outcomes) if v == goal]
        by_need = sum(p <= need for p in answered) / len(outcomes)
        # the first pass by which the planned verdict has come in 80 % of sweeps
        reached = next(
            (
                n
                for n in range(FIRST_LOOK, setting.max_passes + 1)
                if sum(p <= n for p in answered) >= 0.8 * len(outcomes)
            ),
            None,
        )
        rows.append(
            f"| {setting.name} | {name} | {statistics.median(passes):g} | {statistics.mean(passes):.2f} "
            f"| {share['worse']:.1%} | {share['equivalent']:.1%} | {share['better']:.2%} "
            f"| {share['inconclusive']:.1%} | {need}: {by_need:.1%} | {reached or f'>{setting.max_passes}'} |"
        )
    return rows


def passes_table(draws: int, seed: int, jobs: int) -> None:
    print(f"\nPart 2: passes to stop, both rules on the same {draws} sweeps; one arm, decode_tok_s at 4 %/3, N 20")
    print(
        "| setting | rule | median passes | mean passes | worse | equivalent | better | inconclusive at N "
        "| passes_to_stop n: answered by n | answered in 80 % by |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    settings = passes_settings()
    with ProcessPoolExecutor(jobs) as pool:
        seeds = range(seed + 100, seed + 100 + len(settings))
        for rows in pool.map(passes_rows, settings, [draws] * len(settings), seeds):
            print("\n".join(rows), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=4000, help="simulated sweeps per setting")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--part", choices=("1", "2", "both"), default="both")
    parser.add_argument("--jobs", type=int, default=1, help="settings simulated at once")
    args = parser.parse_args()
    ok = True
    if args.part in ("1", "both"):
        ok = validity_table(args.draws, args.seed, args.jobs)
    if args.part in ("2", "both"):
        passes_table(args.draws, args.seed, args.jobs)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
