"""Runs x iterations: one engine process times its measurement ``iterations``
times after warm-up, and the run's row keeps their median and their spread.

An engine reports raw times per iteration, in seconds from the iteration's
start: ``token_s``, per sequence the time each of its tokens reached the
client; ``step_end_s``, when each engine step (one forward pass) returned,
whether or not it delivered a token; ``ttft_s``, when every sequence had its
first token; ``e2e_s``, the whole generation; ``step_s``, the wall time of
each step after ``ttft_s``; and ``tokens``, how many each sequence generated,
as the engine counted them (:mod:`omni.measure.audit` checks them against
max_tokens). Raw data without ``token_s`` (older engines, hand-made tests)
is read as lock step: every sequence's first token at ``ttft_s``, one more
at the end of each step. Pure: dicts in, dicts out.

Per request (sequence), as ``vllm bench serve`` defines them
(``vllm/benchmarks/serve.py`` ``calculate_metrics``):

- TTFT: its first token's time;
- e2e: its last token's time;
- TPOT: (e2e - TTFT) / (tokens - 1), the first token excluded; none for one
  token;
- ITL: the gaps between its consecutive token deliveries (tokens that arrive
  together are one delivery, as one streamed chunk is there).

Per iteration, the batch figures derived from them:

- ``ttft_ms``: the batch's TTFT, when every sequence has its first token (the
  slowest request's TTFT; in lock step, the prefill);
- ``prefill_tok_s``: prompt tokens of the batch over that TTFT;
- ``decode_tok_s``: every token after each request's first, over the span
  from the earliest first token to the last token: in lock step,
  batch x (max_tokens - 1) / (e2e - TTFT); otherwise the output rate while
  any request was decoding, steps that also prefilled included;
- ``tpot_ms``: the median request's TPOT;
- ``itl_p*_ms``: percentiles of every request's gaps.

Lock step: every engine step delivered a token to every sequence not yet
done. A step that served fewer (a prefill chunked over several steps, as
vLLM's scheduler does past ``max_num_batched_tokens``: some sequences decode
while others wait for their first token) is *partial*; an iteration with one
is not lock step, and :func:`omni.run.row.fill_metrics` warns
(``not_lock_step``). Its per-request figures are exact either way.

The row keeps, per iterated metric, the median over iterations and
``<metric>_iter_sd_log``, the sd of the log iteration values (about the
relative sd): the within-run spread the verdicts use as a floor;
``<metric>_iter_ac1_log``, their lag-1 autocorrelation (v14): whether one
slow iteration is followed by another, which :mod:`omni.stats.swing` allows for; and the
per-request percentiles pooled over every request of every timed iteration,
with how many values each is over (``*_samples``) and the 95 % upper bound
of each p99 (``*_p99_upper95_ms``, :mod:`omni.stats.quantiles`; null below 299
values). Percentiles use numpy's "linear" rule.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from omni.stats.quantiles import percentile_bound

ITERATED = ("ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_s", "tpot_ms")
ITL_PERCENTILES = (50, 90, 99)
ITL_COLUMNS = tuple(f"itl_p{q}_ms" for q in ITL_PERCENTILES)
# per-request percentiles pooled over every timed iteration (column, values pooled: req_<name>_ms, q)
REQUEST_PERCENTILES = (
    ("ttft_p50_ms", "ttft", 50),
    ("ttft_p99_ms", "ttft", 99),
    ("tpot_p99_ms", "tpot", 99),
)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation between order statistics
    (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Timeline:
    """One iteration's token times per sequence and its engine steps' ends (s
    from the iteration's start). ``observed``: the engine reported every
    token's time; False: rebuilt as lock step from ``ttft_s`` and ``step_s``."""

    token_s: tuple[tuple[float, ...], ...]
    step_end_s: tuple[float, ...]
    observed: bool


def timeline(raw: Mapping, batch: int, max_tokens: int) -> Timeline:
    """The iteration's :class:`Timeline` from an engine's raw times (without
    token times: ``tokens`` per sequence, else ``max_tokens``, in lock step)."""
    if raw.get("token_s") is not None:
        tokens = tuple(tuple(sorted(float(t) for t in seq)) for seq in raw["token_s"])
        ends = sorted(float(t) for t in raw.get("step_end_s") or ())
        last = max((seq[-1] for seq in tokens if seq), default=None)
        if not ends:  # no step ends reported: each distinct token time closes a step
            ends = sorted({t for seq in tokens for t in seq})
        elif last is not None and last > ends[-1]:
            ends.append(last)
        return Timeline(tokens, tuple(ends), True)
    first = float(raw["ttft_s"])
    ends = [first]
    for step in raw.get("step_s") or ():
        ends.append(ends[-1] + float(step))
    counts = raw.get("tokens") or [max_tokens] * batch
    return Timeline(tuple(tuple(ends[: min(int(n), len(ends))]) for n in counts), tuple(ends), False)


@dataclass(frozen=True)
class RequestTiming:
    """Per request (one sequence of the batch) and per engine step, from a
    :class:`Timeline`; times in seconds.

    Per request in prompt order, None for a sequence that got no token;
    ``itl_s`` pools every request's gaps; ``step_tokens``: tokens delivered by
    each engine step; ``partial_steps``: steps that delivered a token to
    fewer than all sequences not yet done (None: the timeline was rebuilt,
    so lock step was assumed, not seen).
    """

    ttft_s: tuple[float | None, ...]
    e2e_s: tuple[float | None, ...]
    tpot_s: tuple[float | None, ...]
    itl_s: tuple[float, ...]
    step_tokens: tuple[int, ...]
    partial_steps: int | None


def request_timing(line: Timeline) -> RequestTiming:
    """TTFT, e2e, TPOT and ITL per request, as ``vllm bench serve`` defines
    them, and what each engine step delivered."""
    seqs = [seq for seq in line.token_s if seq]
    tpot = tuple((seq[-1] - seq[0]) / (len(seq) - 1) if len(seq) > 1 else None for seq in line.token_s)
    # tokens of one delivery share its time: no gap between them
    gaps = tuple(b - a for seq in seqs for a, b in zip(seq, seq[1:]) if b > a)
    step_tokens, partial, previous = [], 0, -math.inf
    for end in line.step_end_s:
        served = [bisect.bisect_right(seq, end) - bisect.bisect_right(seq, previous) for seq in seqs]
        waiting = sum(seq[-1] > previous for seq in seqs)  # not done when the step began
        step_tokens.append(sum(served))
        partial += sum(n > 0 for n in served) < waiting
        previous = end
    return RequestTiming(
        ttft_s=tuple(seq[0] if seq else None for seq in line.token_s),
        e2e_s=tuple(seq[-1] if seq else None for seq in line.token_s),
        tpot_s=tpot,
        itl_s=gaps,
        step_tokens=tuple(step_tokens),
        partial_steps=partial if line.observed else None,
    )


def _ms(values: Sequence[float | None]) -> list[float | None]:
    return [v * 1000 if v is not None else None for v in values]


def iteration_metrics(batch: int, prompt_len: int, max_tokens: int, raw: Mapping) -> dict:
    """One iteration's metrics from its raw times (the module's definitions)."""
    ttft_s, e2e_s = float(raw["ttft_s"]), float(raw["e2e_s"])
    line = timeline(raw, batch, max_tokens)
    req = request_timing(line)
    after_first = sum(len(seq) - 1 for seq in line.token_s if seq)
    seqs = [seq for seq in line.token_s if seq]
    span = max((seq[-1] for seq in seqs), default=0.0) - min((seq[0] for seq in seqs), default=0.0)
    tpots = [t for t in req.tpot_s if t is not None]
    steps_ms = [float(s) * 1000 for s in raw.get("step_s") or ()]
    tokens = raw.get("tokens")  # generated per sequence, as the engine counted them
    itl_ms = [g * 1000 for g in req.itl_s]
    return {
        "ttft_ms": ttft_s * 1000,
        "prefill_tok_s": batch * prompt_len / ttft_s if ttft_s > 0 else None,
        "decode_tok_s": after_first / span if after_first and span > 0 else None,
        "e2e_s": e2e_s,
        "tpot_ms": statistics.median(tpots) * 1000 if tpots else None,
        "steps": len(steps_ms),
        "step_ms": steps_ms,
        "tokens": [int(n) for n in tokens] if tokens is not None else None,
        **{col: percentile(itl_ms, q) for col, q in zip(ITL_COLUMNS, ITL_PERCENTILES)},
        "itl_ms": itl_ms,
        "req_ttft_ms": _ms(req.ttft_s),
        "req_tpot_ms": _ms(req.tpot_s),
        "req_e2e_ms": _ms(req.e2e_s),
        "token_ms": [_ms(seq) for seq in line.token_s] if line.observed else None,
        "step_tokens": list(req.step_tokens) if line.observed else None,
        "partial_steps": req.partial_steps,
        "lock_step": req.partial_steps == 0 if req.partial_steps is not None else None,
    }


def sd_log(values: Sequence[float]) -> float | None:
    """sd of the logs of positive values (ddof 1): about their relative sd."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else None


def ac1_log(values: Sequence[float]) -> float | None:
    """Lag-1 autocorrelation of the logs of positive values, in their order:
    sum (x_t - mean)(x_t+1 - mean) / sum (x_t - mean)^2 (Box & Jenkins' r1).
    Whether a slow iteration is followed by a slow one: :mod:`omni.stats.swing`
    pools it over an arm's runs. None below 3 values or with no spread."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    if len(logs) < 3:
        return None
    mean = statistics.fmean(logs)
    deviations = [x - mean for x in logs]
    squares = sum(d * d for d in deviations)
    if squares <= 0:
        return None
    return sum(a * b for a, b in zip(deviations, deviations[1:])) / squares


def run_metrics(batch: int, prompt_len: int, max_tokens: int, raws: Sequence[Mapping]) -> tuple[dict, list[dict]]:
    """(the row's metrics, one dict per iteration) from an engine's raw iterations.

    ``lock_step``/``partial_steps``: every timed iteration in lock step / their
    partial steps summed; None when no iteration reported its token times."""
    per = [iteration_metrics(batch, prompt_len, max_tokens, raw) | {"iteration": i} for i, raw in enumerate(raws)]
    row: dict = {"iterations": len(per)}
    for metric in ITERATED:
        values = [p[metric] for p in per if p[metric] is not None]
        row[metric] = statistics.median(values) if values else None
        row[f"{metric}_iter_sd_log"] = sd_log(values)
        row[f"{metric}_iter_ac1_log"] = ac1_log(values)
    pooled = {
        "itl": [g for p in per for g in p["itl_ms"]],
        **{m: [v for p in per for v in p[f"req_{m}_ms"] if v is not None] for m in ("ttft", "tpot")},
    }
    row.update({col: percentile(pooled["itl"], q) for col, q in zip(ITL_COLUMNS, ITL_PERCENTILES)})
    for col, name, q in REQUEST_PERCENTILES:
        row[col] = percentile(pooled[name], q)
    for m, values in pooled.items():
        row[f"{m}_samples"] = len(values)
        row[f"{m}_p99_upper95_ms"] = percentile_bound(values, 0.99).upper
    seen = [p["partial_steps"] for p in per if p["partial_steps"] is not None]
    row["partial_steps"] = sum(seen) if seen else None
    row["lock_step"] = not any(seen) if seen else None
    return row, per


def partial_step_counts(per_iteration: Sequence[Mapping]) -> tuple[int, int, int]:
    """(partial steps, engine steps, iterations with a partial step) over the
    iterations that reported their token times: what ``not_lock_step`` names."""
    seen = [p for p in per_iteration if p.get("partial_steps") is not None]
    return (
        sum(p["partial_steps"] for p in seen),
        sum(len(p.get("step_tokens") or ()) for p in seen),
        sum(p["partial_steps"] > 0 for p in seen),
    )
