"""Passes that stop when the answer is known (``passes: auto``): a sequential
rule whose chance of a false call is bounded whatever the number of looks.

A sweep with ``passes: auto`` runs one pass of every arm at a time and, from
the third pass on, judges the arms against the baseline after each one; it
stops when every primary verdict is conclusive. Judging at the sweep's fixed
levels after every pass would inflate false calls: an A/A arm that wanders
past 1 at any of 18 looks is called different far more often than 5 % of
the time. So each look gets a slice of the metric's error, not all of it.

Alpha spending (Lan and DeMets 1983, Biometrika 70:659; the power family
alpha t^rho of Kim and DeMets 1987, Biometrics 43:857): the metric's error
alpha_m (its Bonferroni share of the arm's 5 %, omni.stats.adjust_for_multiplicity)
is spent over the planned looks at passes 3, 4, ... max_passes, look k at n_k
passes spending alpha_m ((n_k/N)^rho - (n_{k-1}/N)^rho), the first look
alpha_m (3/N)^rho. The slices sum to alpha_m, and by the union bound
(Bonferroni over looks) the chance that any look's interval misses the true
ratio, the only way an A/A arm is called better or worse or a real effect of
min_effect is called equivalent, is at most alpha_m, whatever the dependence
between the looks. Over metrics the split is Bonferroni too, so an A/A arm is
called different on any metric at any look at most 5 % of the time. The
bound ignores the looks' strong correlation, so the rule is conservative;
its price is width, paid in passes.

Why rho = 2, by simulated passes (a default spec's primary level, 20
planned passes, 4000 sweeps): rho = 1 spends evenly and is quickest on a
clear effect (a 20 % slowdown at 5 % noise: 4.7 passes on average, against
5.3 at rho 2 and 5.8 at rho 3) but keeps the least for the last looks, so it
finds a 20 % slowdown at 15 % noise within 20 passes least often (85 %,
against 90 % and 91 %); rho = 3 (near O'Brien-Fleming) makes every clear
answer wait (A/A at 2 % noise: equivalent after 9.7 passes on average,
against 9.0 and 9.3). rho = 2 is within half a pass of the quickest and
within 1.5 points of the most powerful.

Pure: floats and verdicts in, frozen dataclasses out (STYLE.md 4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from omni.stats import Adjustment, Comparison, passes_needed

FIRST_LOOK = 3  # passes before the first look: fewer give no noise estimate worth a verdict
DEFAULT_MAX_PASSES = 20
RHO = 2.0  # the spending function's power (see the module doc)
CONCLUSIVE = ("better", "worse", "equivalent")


def spent(fraction: float, alpha: float, rho: float = RHO) -> float:
    """The error spent by information ``fraction`` (passes / max passes): alpha t^rho."""
    return alpha * min(max(fraction, 0.0), 1.0) ** rho


def look_alpha(alpha: float, passes: int, max_passes: int, rho: float = RHO) -> float:
    """The slice of ``alpha`` the look after ``passes`` passes spends (0 before :data:`FIRST_LOOK`)."""
    if max_passes < FIRST_LOOK:
        raise ValueError(f"max_passes must be >= {FIRST_LOOK}")
    if passes > max_passes:
        raise ValueError(f"no look after pass {passes}: the rule plans {max_passes} passes")
    if passes < FIRST_LOOK:
        return 0.0
    before = spent((passes - 1) / max_passes, alpha, rho) if passes > FIRST_LOOK else 0.0
    return spent(passes / max_passes, alpha, rho) - before


def look_confidence(metric_confidence: float, passes: int, max_passes: int, rho: float = RHO) -> float:
    """The interval level of the look after ``passes`` passes of ``max_passes``
    for a metric whose fixed-sample level is ``metric_confidence`` (its
    multiplicity-adjusted level): 1 - its slice of 1 - metric_confidence."""
    return 1.0 - look_alpha(1.0 - metric_confidence, passes, max_passes, rho)


def passes_to_stop(
    effect: float, cv: float, metric_confidence: float, max_passes: int, power: float = 0.8, rho: float = RHO
) -> int:
    """The passes per arm by which the rule resolves ``effect`` with ``power``:
    the first look n at which a single test at the error spent so far,
    1 - alpha_m (n/N)^rho, has that power at n passes
    (:func:`omni.stats.passes_needed`). The looks are strongly correlated, so
    the rule's power by look n is close to that one test's: simulated, the
    rule reaches 80 % within one pass of this figure (tests/unit/test_sequential.py).
    Not reached by ``max_passes``: the fixed-sample figure at the metric's
    whole error, and more than ``max_passes`` (more than the rule will run)."""
    alpha = 1.0 - metric_confidence
    for n in range(FIRST_LOOK, max_passes + 1):
        if n >= passes_needed(effect, cv, 1.0 - spent(n / max_passes, alpha, rho), power):
            return n
    return max(max_passes + 1, passes_needed(effect, cv, metric_confidence, power))


def look_levels(adjustment: Adjustment, passes: int, max_passes: int, stopped: str | None = None) -> Adjustment:
    """``adjustment`` with each metric's level that of the look after
    ``passes`` passes (before the first look: the first look's); ``stopped``:
    the rule's stop, in words, when the sweep has stopped."""
    passes = min(max(passes, FIRST_LOOK), max_passes)
    levels = {m: look_confidence(c, passes, max_passes) for m, c in adjustment.confidence.items()}
    return replace(
        adjustment, confidence=levels, fixed=adjustment.confidence, look=(passes, max_passes), stopped=stopped
    )


def planner(adjustment: Adjustment) -> Callable[[str, float, float], int]:
    """(metric, effect, cv) -> the passes per arm that resolve ``effect``: the
    fixed-sample :func:`omni.stats.passes_needed` at the metric's level, or
    for a sequential sweep's levels (:func:`look_levels`) :func:`passes_to_stop`."""
    if adjustment.look is None or adjustment.fixed is None:
        return lambda metric, effect, cv: passes_needed(effect, cv, adjustment.confidence[metric])
    fixed, most = adjustment.fixed, adjustment.look[1]
    return lambda metric, effect, cv: passes_to_stop(effect, cv, fixed[metric], most)


@dataclass(frozen=True)
class Decision:
    """Whether an ``auto`` sweep stops after a look, and why, in words."""

    stop: bool
    reason: str  # "conclusive", "max_passes", "budget", or "continue"
    passes: int
    lines: tuple[str, ...]  # one per primary verdict: "b decode_tok_s worse x0.800 [0.77, 0.83]"
    pending: tuple[str, ...]  # "arm metric" still inconclusive

    def describe(self) -> str:
        if self.reason == "conclusive":
            return f"after pass {self.passes}: every primary verdict is conclusive; stopping"
        if self.reason in ("max_passes", "budget"):
            why = "max_passes" if self.reason == "max_passes" else "the time budget"
            return f"after pass {self.passes}: {why} spent with {len(self.pending)} inconclusive; stopping"
        return f"after pass {self.passes}: continuing: {len(self.pending)} inconclusive ({', '.join(self.pending)})"


def verdict_line(arm: str, metric: str, comparison: Comparison | None, refused: str | None = None) -> str:
    if comparison is None:
        return f"{arm} {metric}: {refused or 'no verdict'}"
    if comparison.ratio is None or comparison.ci_low is None:
        return f"{arm} {metric} {comparison.verdict}"
    return (
        f"{arm} {metric} {comparison.verdict} x{comparison.ratio:.3f} "
        f"[{comparison.ci_low:.3f}, {comparison.ci_high:.3f}] at {100 * comparison.confidence:.4g} %"
    )


def decide(
    comparisons: Mapping[tuple[str, str], Comparison | None],
    passes: int,
    max_passes: int,
    out_of_time: bool = False,
    refused: Mapping[tuple[str, str], str] | None = None,
) -> Decision:
    """Stop or continue after the look at ``passes`` passes.

    ``comparisons``: (arm, primary metric) -> its comparison at the look's
    level, None where there is none (refused: like for like impossible, a
    void arm; ``refused`` says why). Those cannot become conclusive by more
    passes and do not hold the sweep. It stops when every other one is
    better, worse or equivalent (below min_effect or not), else when
    ``max_passes`` is reached or the time budget is ``out_of_time``.
    """
    refused = refused or {}
    lines = tuple(verdict_line(a, m, c, refused.get((a, m))) for (a, m), c in comparisons.items())
    pending = tuple(f"{a} {m}" for (a, m), c in comparisons.items() if c is not None and c.verdict not in CONCLUSIVE)
    if not pending and passes >= FIRST_LOOK:
        reason = "conclusive"
    elif passes >= max_passes:
        reason = "max_passes"
    elif out_of_time:
        reason = "budget"
    else:
        reason = "continue"
    return Decision(reason != "continue", reason, passes, lines, pending)
