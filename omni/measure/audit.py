"""Audits of one run's own timed iterations, after MLPerf Inference's audit
tests. Pure: lists in, frozen dataclasses out.

- Tokens (as MLPerf's TEST06 checks an LLM's output lengths): every
  sequence of every timed iteration generated exactly ``max_tokens``, as the
  engine counted them. Rates are computed for ``max_tokens``; an iteration
  that stopped short would make them lie.
- Repeats (as TEST04, which times repeated samples against unique ones to
  catch a cache of results): the timed iterations reuse one set of prompts,
  and warm-up used others (:func:`omni.engines.common.warmup_prompts`), so
  iteration 0 (as results/iterations numbers them) is the first time those
  prompts are seen; after the timed iterations the engine times one fresh
  set too (:func:`omni.engines.common.fresh_prompts`). With no prefix cache
  the repeats (iterations 1..) cannot reach their first token faster than
  the faster of those two first sights beyond noise. Two first sights, not
  one: on this shared host a lone iteration 0 was once 2.8x its repeats with
  no cache at all (a neighbour's burst, or a cold start).

The arm's ``prompt_seed`` gives the third audit, across runs: the same arm on
other prompts must come out within noise of itself: a verdict between arms,
which :func:`omni.stats.controls.prompt_audit` checks (arms/audit.yaml).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAD_TO_SIGMA = 1.4826  # as omni.stats.verdicts: MAD x this = sd, for normal data

# A repeated prompt may be this much faster to its first token than its
# faster first sight before the run is flagged, at least. Measured here (2
# shared cores, 2026-12-01), no cache: ratios 0.88-1.11 over 16 synthetic
# runs, 0.94-1.10 over 12 llama.cpp runs (one more at 0.23, its repeats
# themselves all over, cv 0.72), 1.01 on vLLM; before the fresh first sight,
# a lone slow iteration 0 gave 0.35 and 0.55 with calm repeats. The
# synthetic engine's cache (90 % of a prefill skipped) gives 0.10-0.19.
REPEAT_MARGIN = 0.5
# ... or this many robust CVs of the repeats, when they are noisier
REPEAT_SPREADS = 3.0


@dataclass(frozen=True)
class TokenAudit:
    """Iterations whose sequences generated other than ``max_tokens``."""

    checked: bool  # the engine reported counts for every iteration
    mismatched: int | None  # iterations with a sequence off max_tokens; None: not checked
    first: tuple[int, int, tuple[int, ...]] | None = None  # (iteration, asked, got per sequence) of the first


def audit_tokens(max_tokens: int, per_iteration: Sequence[Mapping]) -> TokenAudit:
    """Check each iteration's ``tokens`` (per sequence) against ``max_tokens``."""
    counts = [p.get("tokens") for p in per_iteration]
    if not counts or any(c is None for c in counts):
        return TokenAudit(False, None)
    off = [(i, tuple(c)) for i, c in enumerate(counts) if any(n != max_tokens for n in c) or not c]
    if not off:
        return TokenAudit(True, 0)
    first = off[0]
    return TokenAudit(True, len(off), (per_iteration[first[0]].get("iteration", first[0]), max_tokens, first[1]))


@dataclass(frozen=True)
class RepeatAudit:
    """The later iterations' TTFT against the first's.

    ``ratio``: median TTFT of iterations 1.. over the faster first sight
    (iteration 0, or the fresh prompts when timed); ``cv``: the robust CV
    (1.4826 MAD / median) of iterations 1..; ``threshold``:
    1 - max(:data:`REPEAT_MARGIN`, :data:`REPEAT_SPREADS` x cv), below which
    a repeat counts as faster beyond noise. All None below 3 iterations.
    """

    ratio: float | None
    cv: float | None
    threshold: float | None

    @property
    def faster(self) -> bool:
        return self.ratio is not None and self.ratio < self.threshold


def audit_repeats(ttft_ms: Sequence[float | None], fresh_ms: float | None = None) -> RepeatAudit:
    """``ttft_ms``: the timed iterations' TTFT in order; ``fresh_ms``: the
    fresh prompts' (None: not timed, iteration 0 is the only first sight)."""
    values = list(ttft_ms)
    if len(values) < 3 or any(v is None or v <= 0 for v in values):
        return RepeatAudit(None, None, None)
    first = min(values[0], fresh_ms) if fresh_ms is not None and fresh_ms > 0 else values[0]
    later = values[1:]
    median = statistics.median(later)
    cv = MAD_TO_SIGMA * statistics.median(abs(v - median) for v in later) / median
    return RepeatAudit(median / first, cv, 1 - max(REPEAT_MARGIN, REPEAT_SPREADS * cv))
