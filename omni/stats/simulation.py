"""The error rates omni states, simulated with omni's own decision code.

Every verdict omni prints carries a stated chance of being wrong: an A/A
pair is called different at most 1 - level of the time, an interval of the
median holds it at least 95 % of the time, "needs N passes" is settled at N
with 80 % power. Those claims are only as good as the configurations they
were checked at. Here each rule is run, as the summary runs it (the same
functions: :func:`omni.stats.verdicts.compare`, :func:`omni.stats.verdicts.drift_estimate`,
:func:`omni.stats.verdicts.passes_needed`, :func:`omni.stats.verdicts.summarize`,
:func:`omni.run.plan.rotated_slot`), on simulated runs at the configurations a
two-socket host produces: 1, 2 and 4 slots with a speed each, 2-30 runs an
arm (runs lost to failures leave them unequal), run noise unequal up to 1:5,
drift between sweeps estimated from 3-5 calibration sweeps, 2-8 arms.

Each :class:`Row` holds the rate omni states and the simulated one, and
holds when the simulated rate is on the stated side of it within four
Monte Carlo standard errors (``omni simulate`` prints the table;
docs/statistics.md holds it). Runs are log-normal: the log of a run value
is its arm's level, its slot's speed, the sweep's level and the run's noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from omni.run.plan import rotated_slot
from omni.stats.changepoints import ALPHA as SHIFT_ALPHA
from omni.stats.changepoints import level_shifts
from omni.stats.intervals import pooled_log_sd, two_sided_quantile, welch_log_interval
from omni.stats.modes import ALPHA as STATES_ALPHA
from omni.stats.modes import split_found
from omni.stats.planning import Layout, passes_needed, rerun_runs_needed
from omni.stats.quantiles import percentile_bound
from omni.stats.sequential import FIRST_LOOK, decide, look_confidence, passes_to_stop
from omni.stats.sweep_simulation import MIN_EFFECT, SLOT_SD, Sweep, false_calls, power
from omni.stats.swing import SWING_ALPHA, swing_found
from omni.stats.verdicts import (
    adjust_for_multiplicity,
    between_sweep_drift,
    compare,
    drift_estimate,
    summarize,
)

METRIC = "decode_tok_s"  # a time-kind metric: its drift rules are the ones simulated
# A default spec's primary level: 3 primary metrics share 4 % of the arm's 5 %.
PRIMARY = adjust_for_multiplicity(
    ["decode_tok_s", "ttft_ms", "e2e_s", "rss_anon_steady_mb"], ["decode_tok_s", "ttft_ms", "e2e_s"]
)
LEVEL = PRIMARY.confidence[METRIC]


@dataclass(frozen=True)
class Row:
    """One rule at one configuration: the rate omni states and the simulated one."""

    rule: str
    setting: str
    stated: float | None  # None: a power row, which states no rate and is read beside its references
    bound: str  # "at most" | "at least": which side of ``stated`` the rate must be on
    rate: float
    draws: int
    references: tuple[tuple[str, float], ...] = ()  # (test, its rate on the same draws)

    @property
    def se(self) -> float:
        """The Monte Carlo standard error of ``rate`` were the true rate the stated one (or the simulated one)."""
        p = self.rate if self.stated is None else self.stated
        return math.sqrt(p * (1 - p) / self.draws)

    @property
    def holds(self) -> bool:
        if self.stated is None:
            return True
        if self.bound == "at most":
            return self.rate <= self.stated + 4 * self.se
        return self.rate >= self.stated - 4 * self.se


def _log_normal(rng: np.random.Generator, sd: float, n: int) -> np.ndarray:
    return rng.normal(0.0, sd, n)


def _slots_of(slots: int, arm: int, runs: int) -> list[int]:
    """The slot of each of an arm's runs, as the plan rotates them (pass p, arm position ``arm``)."""
    return [rotated_slot(list(range(slots)), arm, p) for p in range(runs)]


def _pair(rng, slots: int, runs: tuple[int, int], sds: tuple[float, float], effect: float = 0.0):
    """Base and other run values and slots of one simulated sweep; the other arm ``effect`` (log) apart."""
    speed = rng.normal(0.0, SLOT_SD, slots)
    out = []
    for arm, (n, sd) in enumerate(zip(runs, sds)):
        where = _slots_of(slots, arm, n)
        out.append((np.exp(arm * effect + speed[where] + _log_normal(rng, sd, n)), where))
    return out


def aa_false_calls(rng, draws: int, slots: int, runs: tuple[int, int], sds: tuple[float, float]) -> Row:
    """A/A pair, judged as a summary judges it (slot-blocked where it spans 2 slots): called better or worse."""
    wrong = 0
    for _ in range(draws):
        (b, bs), (o, os_) = _pair(rng, slots, runs, sds)
        c = compare(b, o, better="higher", min_effect=MIN_EFFECT, confidence=LEVEL, blocks=(bs, os_))
        wrong += c.verdict in ("better", "worse")
    setting = f"{slots} slot(s), {runs[0]} v {runs[1]} runs, noise {sds[0]:.0%} v {sds[1]:.0%}"
    return Row("A/A called different", setting, 1 - LEVEL, "at most", wrong / draws, draws)


def aa_any_of_k_arms(rng, draws: int, arms: int, runs: int, sd: float, slots: int = 2) -> Row:
    """K arms, each A/A against one shared baseline: any of them called different (per sweep: K x the per-arm rate)."""
    wrong = 0
    for _ in range(draws):
        speed = rng.normal(0.0, SLOT_SD, slots)
        values = []
        for arm in range(arms + 1):
            where = _slots_of(slots, arm, runs)
            values.append((np.exp(speed[where] + _log_normal(rng, sd, runs)), where))
        (b, bs), others = values[0], values[1:]
        wrong += any(
            compare(b, o, better="higher", min_effect=MIN_EFFECT, confidence=LEVEL, blocks=(bs, os_)).verdict
            in ("better", "worse")
            for o, os_ in others
        )
    setting = f"{arms} arms against one baseline, {runs} runs each, {slots} slots, noise {sd:.0%}"
    return Row("A/A: any arm called different", setting, min(1.0, arms * (1 - LEVEL)), "at most", wrong / draws, draws)


def settled_at_planned(rng, draws: int, sd: float, effect: float, slots: int = 2) -> Row:
    """At the passes the planner names for ``sd`` (goal: equivalence for an
    A/A pair, difference for an effect of min_effect), how often the verdict
    is settled the right way: ``equivalent`` at a true ratio of 1, ``worse``
    at 1 - min_effect. Stated: 80 % power."""
    goal = "equivalence" if effect == 0 else "difference"
    n = passes_needed(MIN_EFFECT, sd, LEVEL, goal=goal, layout=Layout(2, slots, False, False) if slots > 1 else None)
    want = "equivalent" if effect == 0 else "worse"
    right = 0
    for _ in range(draws):
        (b, bs), (o, os_) = _pair(rng, slots, (n, n), (sd, sd), math.log1p(-effect))
        c = compare(b, o, better="higher", min_effect=MIN_EFFECT, confidence=LEVEL, blocks=(bs, os_))
        right += c.verdict == want
    what = "A/A" if effect == 0 else f"{effect:.0%} slower"
    return Row(f"'needs N passes' settles it at N ({want})", f"{what}, noise {sd:.0%}, N = {n}, {slots} slots",
               0.8, "at least", right / draws, draws)  # fmt: skip


def settled_in_sweep(rng, draws: int, sd: float, calibrated: bool) -> Row:
    """A 4-arm sweep (baseline, control, two others; 2 slots) at the passes
    the planner names for its layout: the arm min_effect slower called
    worse, stated 80 %."""
    n = passes_needed(MIN_EFFECT, sd, LEVEL, goal="difference", layout=Layout(4, 2, True, calibrated))
    sweep = _four(n, 2, (sd, sd, sd), MIN_EFFECT, **(CALIBRATED if calibrated else {}))
    rate = power(rng, draws, sweep, 3, LEVEL)["omni"]
    return Row("'needs N passes' settles it at N (worse)", f"{sweep.describe()}, N = {n}", 0.8, "at least", rate, draws)


def _calibrated(rng, sweeps: int, runs: int, noise: float, drift: float) -> tuple[float, float, str]:
    """The drift a calibration as ``omni calibrate --sweeps`` measures it
    gives (:func:`omni.stats.verdicts.drift_estimate`): an A/A workload (two
    arms) run ``sweeps`` times, each sweep's level moved by the drift."""
    by_sweep, samples = [], []
    for _ in range(sweeps):
        level = rng.normal(0.0, drift)
        arms = [np.exp(level + _log_normal(rng, noise, runs)) for _ in range(2)]
        samples += arms
        by_sweep.append(np.concatenate(arms))
    sd = pooled_log_sd(samples)
    return drift_estimate("time", between_sweep_drift(by_sweep, sd), sweeps, "simulated")


def cross_sweep_aa(rng, draws: int, sweeps: int, noise: float, drift: float, runs: int = 5) -> Row:
    """Two sweeps of one arm, compared as ``omni compare`` does, with the
    drift a calibration of ``sweeps`` sweeps measured (or the default, where
    omni does not use so few): called different."""
    wrong = 0
    for _ in range(draws):
        value, df, _ = _calibrated(rng, sweeps, runs, noise, drift)
        before = np.exp(rng.normal(0.0, drift) + _log_normal(rng, noise, runs))
        after = np.exp(rng.normal(0.0, drift) + _log_normal(rng, noise, runs))
        c = compare(before, after, better="higher", min_effect=MIN_EFFECT, confidence=LEVEL, drift=value, drift_df=df)
        wrong += c.verdict in ("better", "worse")
    setting = f"drift {drift:.0%}, noise {noise:.0%}, calibrated from {sweeps} sweeps, {runs} v {runs} runs"
    return Row("A/A across sweeps called different", setting, 1 - LEVEL, "at most", wrong / draws, draws)


def settled_in_reproduction(rng, draws: int, recorded: int, noise: float, drift: float, level: float) -> Row:
    """``omni reproduce``: ``recorded`` runs of a stored sweep against a rerun
    of the passes :func:`rerun_runs_needed` names (the recorded side fixed),
    judged as ``omni compare`` judges two sweeps, each sweep's level moved
    by the drift (known). A true ratio of 1 settled: equivalent, or a
    difference inside min_effect. Stated 80 %."""
    m = rerun_runs_needed(MIN_EFFECT, noise, recorded, level, drift=drift)
    right = welch = 0
    margin = math.log1p(MIN_EFFECT)
    for _ in range(draws):
        before = np.exp(rng.normal(0.0, drift) + _log_normal(rng, noise, recorded))
        after = np.exp(rng.normal(0.0, drift) + _log_normal(rng, noise, m))
        c = compare(before, after, better="higher", min_effect=MIN_EFFECT, confidence=level, drift=drift)
        right += c.verdict == "equivalent" or (c.verdict in ("better", "worse") and c.below_min_effect)
        # the textbook: Welch's t interval (Satterthwaite's df, the known drift in it) with 2 drift^2 added
        diff, _, _, df = welch_log_interval(before, after, level, drift)
        var = np.log(before).var(ddof=1) / recorded + np.log(after).var(ddof=1) / m + 2 * drift**2
        welch += abs(diff) + two_sided_quantile(level, df) * math.sqrt(var) <= margin
    setting = f"{recorded} recorded v {m} new runs, noise {noise:.0%}, drift {drift:.1%}, at {level:.2%}"
    return Row("reproduce: 'a rerun of N passes' settles an A/A target", setting, 0.8, "at least", right / draws, draws,
               (("Welch", welch / draws),))  # fmt: skip


def median_coverage(rng, draws: int, n: int, spread: float) -> Row:
    """The summary's interval of the median, over skewed (log-normal) runs: holds the true median."""
    held = 0
    for _ in range(draws):
        cell = summarize(np.exp(_log_normal(rng, spread, n)))
        held += cell.ci_low <= 1.0 <= cell.ci_high
    return Row("interval of the median holds it", f"{n} runs, log-normal sd {spread:.0%}", 0.95, "at least",
               held / draws, draws)  # fmt: skip


def percentile_coverage(rng, draws: int, n: int, q: float) -> Row:
    """A serving level's or a run's percentile bound (:func:`omni.stats.quantiles.percentile_bound`)
    over log-normal latencies: at or above the true q-quantile. Where n
    cannot bound q, the quantile it can bound (its maximum's) instead."""
    true_q = q
    held = 0
    for _ in range(draws):
        samples = np.exp(rng.normal(0.0, 0.5, n))
        bound = percentile_bound(samples, q)
        if not bound.bounded:  # the row then checks what omni says n samples do bound
            true_q = bound.reach
            bound = percentile_bound(samples, true_q * (1 - 1e-9))
        held += bound.upper >= math.exp(0.5 * _normal_quantile(true_q))
    setting = f"{n} samples, p{100 * q:g}" + (f" (bound only p{100 * true_q:.3g})" if true_q != q else "")
    return Row("percentile's upper bound at or above it", setting, 0.95, "at least", held / draws, draws)


def shift_false_alarms(rng, draws: int, sweeps: int, noise: float, drift: float, runs: int = 3) -> Row:
    """A nightly history with no shift (each sweep's level: its drift and its
    runs' noise), through ``omni regressions``' change-point rule: a shift reported."""
    ids = [f"n{i}" for i in range(sweeps)]
    alarms = 0
    for _ in range(draws):
        levels = [
            math.exp(float((rng.normal(0.0, drift) + _log_normal(rng, noise, runs)).mean())) for _ in range(sweeps)
        ]
        alarms += bool(level_shifts(levels, ids, 0.0))
    setting = f"{sweeps} nightly sweeps, drift {drift:.0%}, noise {noise:.0%}, {runs} runs each"
    return Row("level shift reported in a steady history", setting, SHIFT_ALPHA, "at most", alarms / draws, draws)


def swing_false_calls(rng, draws: int, runs: int, iterations: int, rho: float) -> Row:
    """Runs of one level whose iterations follow an AR(1) (lag-1 correlation
    ``rho``, 5 % sd): called 'runs differ beyond their iterations'."""
    z = rng.standard_normal((draws, runs, iterations))
    x = np.empty_like(z)
    x[..., 0] = z[..., 0]
    for t in range(1, iterations):
        x[..., t] = rho * x[..., t - 1] + math.sqrt(1 - rho**2) * z[..., t]
    rate = float(swing_found(0.05 * x).mean())
    setting = f"{runs} runs of {iterations} iterations, lag-1 correlation {rho:g}"
    return Row("runs called different beyond their iterations", setting, SWING_ALPHA, "at most", rate, draws)


def states_false_calls(rng, draws: int, runs: int, shape: str) -> Row:
    """Run levels of one unimodal spread (10 %, plus 1 % noise): split into two states."""
    levels = {
        "uniform": lambda: (rng.random((draws, runs)) - 0.5) * math.sqrt(12),
        "exponential": lambda: rng.exponential(1.0, (draws, runs)) - 1,
        "normal": lambda: rng.standard_normal((draws, runs)),
    }[shape]()
    logs = 0.10 * levels + rng.normal(0.0, 0.01, (draws, runs))
    rate = float(split_found(logs, MIN_EFFECT).mean())
    setting = f"{runs} runs, levels {shape} (10 % sd) + 1 % noise"
    return Row("one spread called two states", setting, STATES_ALPHA, "at most", rate, draws)


def auto_passes(rng, draws: int, max_passes: int, sd: float, effect: float) -> Row:
    """``passes: auto`` on one arm against the baseline, 2 slots: a pass of
    both at a time, a look from pass 3 on at the look's level
    (:func:`omni.stats.sequential.look_confidence`), stopped by
    :func:`omni.stats.sequential.decide`. A/A (``effect`` 0): called better or
    worse at the stop, stated at most the metric's error. An effect:
    settled ``worse`` by the passes :func:`omni.stats.sequential.passes_to_stop`
    names, stated at least 80 %."""
    goal = "equivalence" if effect == 0 else "difference"
    need = passes_to_stop(effect or MIN_EFFECT, sd, LEVEL, max_passes, goal=goal)
    hits = 0
    for _ in range(draws):
        (b, bs), (o, os_) = _pair(rng, 2, (max_passes, max_passes), (sd, sd), math.log1p(-effect))
        for n in range(FIRST_LOOK, max_passes + 1):
            level = look_confidence(LEVEL, n, max_passes)
            c = compare(b[:n], o[:n], better="higher", min_effect=MIN_EFFECT, confidence=level,
                        blocks=(bs[:n], os_[:n]))  # fmt: skip
            if decide({("o", METRIC): c}, n, max_passes).stop:
                break
        if effect == 0:
            hits += c.verdict in ("better", "worse")
        else:
            hits += c.verdict == "worse" and n <= need
    if effect == 0:
        setting = f"A/A, noise {sd:.0%}, max_passes {max_passes}, 2 slots"
        return Row("passes: auto, A/A called different at its stop", setting, 1 - LEVEL, "at most", hits / draws, draws)
    setting = f"{effect:.0%} slower, noise {sd:.0%}, max_passes {max_passes}: by pass {need}"
    return Row("passes: auto settles it by the passes it names", setting, 0.8, "at least", hits / draws, draws)


def sweep_power(rng, draws: int, sweep: Sweep) -> Row:
    """A sweep whose last arm is slower: called worse, by omni beside the
    pooled t and the oracle on the same draws (:mod:`omni.stats.sweep_simulation`)."""
    rates = power(rng, draws, sweep, sweep.arms - 1, LEVEL)
    refs = tuple((k, v) for k, v in rates.items() if k != "omni")
    rule = f"power: {-sweep.effects[-1]:.0%} slower called worse"
    return Row(rule, sweep.describe(), None, "power", rates["omni"], draws, refs)


def sweep_false_calls(rng, draws: int, sweep: Sweep) -> Row:
    """An A/A sweep: any of its arms called different from the baseline,
    beside the pooled t on the same draws; stated: the arms' count x the metric's error."""
    rates = false_calls(rng, draws, sweep, LEVEL)
    stated = (sweep.arms - 1) * (1 - LEVEL)
    refs = (("pooled t", rates["pooled t"]),)
    return Row("A/A sweep: any arm called different", sweep.describe(), stated, "at most", rates["omni"], draws, refs)


def _normal_quantile(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


def _four(passes: int, slots: int, noise: tuple[float, float, float], effect: float = 0.0, **calibration) -> Sweep:
    """Baseline and control at noise[0], two other arms at noise[1] and
    noise[2], the last ``effect`` slower."""
    sds = (noise[0], noise[0], noise[1], noise[2])
    return Sweep(passes, slots, sds, (0.0, 0.0, 0.0, -effect), True, **calibration)


def _two(passes: int, noise: tuple[float, float], effect: float = 0.0, **calibration) -> Sweep:
    return Sweep(passes, 2, noise, (0.0, -effect), False, **calibration)


CALIBRATED = {"calibrated": 12}  # 3 calibration sweeps of 2 arms of 3 runs
# A/A sweeps: the 4-arm ones as a default spec runs them (control on)
SWEEPS_AA = [
    _four(3, 2, (0.02, 0.02, 0.02)),
    _four(3, 2, (0.02, 0.02, 0.10)),
    _four(3, 2, (0.10, 0.02, 0.02)),
    _four(3, 4, (0.02, 0.02, 0.02)),
    _four(4, 2, (0.02, 0.10, 0.10)),
    _four(3, 2, (0.02, 0.02, 0.02), **CALIBRATED),
    _four(3, 2, (0.02, 0.02, 0.10), **CALIBRATED),
    _four(3, 2, (0.02, 0.02, 0.02), **CALIBRATED, noisier=(2, 2, 2, 2)),
    _four(3, 2, (0.02, 0.02, 0.02), **CALIBRATED, noisier=(1, 1, 1, 2)),
    _four(3, 2, (0.02, 0.02, 0.02), **CALIBRATED, noisier=(1.5, 1.5, 1, 1)),
    _two(3, (0.02, 0.02), **CALIBRATED, noisier=(1, 2)),
    _two(3, (0.02, 0.10), **CALIBRATED),
    _four(3, 1, (0.02, 0.02, 0.10)),  # a host of one slot: the arms' means, no slot to fit
    _four(3, 1, (0.02, 0.02, 0.10), **CALIBRATED),
]
# power: the last arm slower, at the passes users run
SWEEPS_POWER = [
    _two(3, (0.02, 0.02), 0.10),
    _four(3, 2, (0.02, 0.02, 0.02), 0.10),
    _two(4, (0.02, 0.02), 0.10),
    _four(4, 2, (0.02, 0.02, 0.02), 0.10),
    _four(4, 2, (0.02, 0.02, 0.02), 0.05),
    _four(3, 4, (0.02, 0.02, 0.02), 0.10),
    _four(4, 4, (0.02, 0.02, 0.02), 0.10),
    _four(4, 2, (0.02, 0.05, 0.05), 0.10),
    _two(5, (0.05, 0.05), 0.10),
    _four(5, 2, (0.05, 0.05, 0.05), 0.10),
    _four(6, 2, (0.05, 0.05, 0.05), 0.10),
    _two(3, (0.02, 0.02), 0.10, **CALIBRATED),
    _four(3, 2, (0.02, 0.02, 0.02), 0.10, **CALIBRATED),
    _four(3, 2, (0.02, 0.02, 0.02), 0.05, **CALIBRATED),
    _four(3, 2, (0.02, 0.02, 0.02), 0.10, **CALIBRATED, noisier=(2, 2, 2, 2)),
    _two(5, (0.05, 0.05), 0.10, **CALIBRATED),
    _four(5, 2, (0.05, 0.05, 0.05), 0.10, **CALIBRATED),
    _four(3, 1, (0.02, 0.02, 0.02), 0.10),
    _four(3, 1, (0.02, 0.02, 0.02), 0.10, **CALIBRATED),
    Sweep(3, 1, (0.02, 0.02), (0.0, -0.10), False, **CALIBRATED),
]

# (name, row maker) for every configuration of the table; quick: the subset test-fast runs
Maker = Callable[[np.random.Generator, int], Row]


def table(quick: bool = False) -> Iterator[tuple[str, Maker]]:
    """Every simulated configuration, as (name, maker(rng, draws))."""
    pairs = [
        (1, (5, 5), (0.02, 0.02)),
        (2, (6, 3), (0.02, 0.10)),
        (2, (6, 4), (0.02, 0.10)),
        (2, (8, 4), (0.03, 0.15)),
        (2, (5, 5), (0.02, 0.10)),
        (2, (4, 4), (0.01, 0.10)),
        (2, (4, 2), (0.01, 0.10)),
        (2, (3, 6), (0.10, 0.02)),
        (2, (3, 3), (0.05, 0.05)),
        (4, (8, 5), (0.02, 0.10)),
        (4, (30, 30), (0.05, 0.05)),
        (1, (2, 2), (0.05, 0.05)),
    ]
    if quick:
        pairs = [pairs[1], pairs[6]]
    for slots, runs, sds in pairs:
        yield f"aa-{slots}-{runs[0]}v{runs[1]}-{sds[0]}v{sds[1]}", _bind(aa_false_calls, slots, runs, sds)
    if quick:
        yield "cross-3-0.02-0.02", _bind(cross_sweep_aa, 3, 0.02, 0.02)
        return
    for k, sweep in enumerate(SWEEPS_AA):
        yield f"aa-sweep-{k}", _bind(sweep_false_calls, sweep)
    for k, sweep in enumerate(SWEEPS_POWER):
        yield f"power-{k}", _bind(sweep_power, sweep)
    for arms in (4, 8):
        yield f"aa-arms-{arms}", _bind(aa_any_of_k_arms, arms, 5, 0.05)
    for sd in (0.02, 0.05, 0.10):
        yield f"settle-aa-{sd}", _bind(settled_at_planned, sd, 0.0)
        yield f"settle-effect-{sd}", _bind(settled_at_planned, sd, MIN_EFFECT)
    for sd, calibrated in ((0.02, False), (0.02, True), (0.05, False), (0.05, True)):
        yield f"settle-sweep-{sd}-{calibrated}", _bind(settled_in_sweep, sd, calibrated)
    for sweeps, noise, drift in ((3, 0.02, 0.01), (3, 0.02, 0.02), (3, 0.01, 0.03), (5, 0.02, 0.02), (2, 0.02, 0.01)):
        yield f"cross-{sweeps}-{noise}-{drift}", _bind(cross_sweep_aa, sweeps, noise, drift)
    for n in (6, 7, 10, 30):
        yield f"median-{n}", _bind(median_coverage, n, 0.3)
    for max_passes, sd, effect in ((12, 0.10, 0.0), (20, 0.02, 0.0), (20, 0.05, 0.20), (20, 0.10, 0.20)):
        yield f"auto-{max_passes}-{sd}-{effect}", _bind(auto_passes, max_passes, sd, effect)
    for runs, iterations, rho in ((3, 5, 0.0), (5, 5, 0.6), (8, 4, 0.6), (3, 10, 0.6), (8, 9, 0.3)):
        yield f"swing-{runs}-{iterations}-{rho}", _bind(swing_false_calls, runs, iterations, rho)
    for runs, shape in ((5, "uniform"), (6, "uniform"), (8, "exponential"), (12, "exponential"), (10, "normal")):
        yield f"states-{runs}-{shape}", _bind(states_false_calls, runs, shape)
    for sweeps, noise, drift in ((5, 0.02, 0.01), (10, 0.05, 0.01), (30, 0.02, 0.02)):
        yield f"shift-{sweeps}-{noise}-{drift}", _bind(shift_false_alarms, sweeps, noise, drift)
    for n, q in ((32, 0.99), (299, 0.99), (29, 0.9), (16, 0.5)):
        yield f"percentile-{n}-{q}", _bind(percentile_coverage, n, q)
    # the planner's closest configurations on a grid of 3-8 recorded runs, 1-2 % noise, 95 / 98.67 %, drift 0-0.5 %
    for recorded, noise, drift, level in (
        (8, 0.02, 0.005, LEVEL),
        (8, 0.02, 0.0, LEVEL),
        (5, 0.02, 0.005, 0.95),
        (4, 0.01, 0.005, LEVEL),
        (3, 0.01, 0.005, 0.95),
    ):
        yield (
            f"reproduce-{recorded}-{noise}-{drift}-{level}",
            _bind(settled_in_reproduction, recorded, noise, drift, level),
        )


def _bind(function, *args) -> Maker:
    return lambda rng, draws: function(rng, draws, *args)


def simulate(draws: int = 4000, seed: int = 20261204, quick: bool = False) -> list[Row]:
    """Every row of :func:`table`, each from its own seeded stream."""
    return [maker(np.random.default_rng([seed, i]), draws) for i, (_, maker) in enumerate(table(quick))]


def rows_markdown(rows: list[Row]) -> str:
    lines = [
        "| rule | configuration | stated | simulated (draws) | same draws | holds |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        stated = "—" if row.stated is None else f"{row.bound} {row.stated:.2%}"
        same = ", ".join(f"{name} {rate:.1%}" for name, rate in row.references) or "—"
        holds = "—" if row.stated is None else "yes" if row.holds else "**no**"
        lines.append(
            f"| {row.rule} | {row.setting} | {stated} | {row.rate:.2%} ± {row.se:.2%} ({row.draws}) | {same} | {holds} |"
        )
    return "\n".join(lines) + "\n"
