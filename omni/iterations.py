"""Runs x iterations: one engine process times its measurement ``iterations``
times after warm-up, and the run's row keeps their median and their spread.

An engine reports raw times per iteration (``ttft_s``, ``e2e_s`` and
``step_s``, the wall time of each decode step after the first token); the
rates are derived here, the same way for every engine
(:func:`omni.engines.common.rates`). Pure: dicts in, dicts out.

Definitions, per iteration, for a batch decoded in lock step:

- ``tpot_ms``: time per output token after the first, per sequence:
  (e2e - ttft) / (max_tokens - 1).
- ``tokens``: how many tokens each sequence generated, as the engine
  counted them (:mod:`omni.audit` checks them against max_tokens).
- ITL: each decode step's wall time; every sequence of the batch receives one
  token per step, so a step's time is each sequence's inter-token latency.
  Percentiles (p50, p90, p99) are taken over every step of every timed
  iteration of the run, numpy's "linear" rule.

The row keeps, per iterated metric, the median over iterations and
``<metric>_iter_sd_log``, the sd of the log iteration values (about the
relative sd): the within-run spread the verdicts use as a floor.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from omni.engines.common import rates

ITERATED = ("ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_s", "tpot_ms")
ITL_PERCENTILES = (50, 90, 99)
ITL_COLUMNS = tuple(f"itl_p{q}_ms" for q in ITL_PERCENTILES)


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


def iteration_metrics(batch: int, prompt_len: int, max_tokens: int, raw: Mapping) -> dict:
    """One iteration's metrics from its raw times."""
    ttft_s, e2e_s = float(raw["ttft_s"]), float(raw["e2e_s"])
    metrics = rates(batch, prompt_len, max_tokens, ttft_s, e2e_s)
    metrics["tpot_ms"] = (e2e_s - ttft_s) * 1000 / (max_tokens - 1) if max_tokens > 1 and e2e_s > ttft_s else None
    steps_ms = [float(s) * 1000 for s in raw.get("step_s") or ()]
    metrics["steps"], metrics["step_ms"] = len(steps_ms), steps_ms
    tokens = raw.get("tokens")  # generated per sequence, as the engine counted them
    metrics["tokens"] = [int(n) for n in tokens] if tokens is not None else None
    metrics.update({col: percentile(steps_ms, q) for col, q in zip(ITL_COLUMNS, ITL_PERCENTILES)})
    return metrics


def sd_log(values: Sequence[float]) -> float | None:
    """sd of the logs of positive values (ddof 1): about their relative sd."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else None


def run_metrics(batch: int, prompt_len: int, max_tokens: int, raws: Sequence[Mapping]) -> tuple[dict, list[dict]]:
    """(the row's metrics, one dict per iteration) from an engine's raw iterations."""
    per = [iteration_metrics(batch, prompt_len, max_tokens, raw) | {"iteration": i} for i, raw in enumerate(raws)]
    row: dict = {"iterations": len(per)}
    for metric in ITERATED:
        values = [p[metric] for p in per if p[metric] is not None]
        row[metric] = statistics.median(values) if values else None
        row[f"{metric}_iter_sd_log"] = sd_log(values)
    steps_ms = [s for p in per for s in p["step_ms"]]
    row.update({col: percentile(steps_ms, q) for col, q in zip(ITL_COLUMNS, ITL_PERCENTILES)})
    return row, per
