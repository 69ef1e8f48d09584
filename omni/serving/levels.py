"""A serving arm's load levels: the load generator's command, what one level
stores, when a level is not to be judged, and the capacity under the SLO.

One server start is one run; its levels are that run's iterations, run in
an order the sweep's seed shuffles per run. A level is one run of ``vllm
bench serve`` (closed loop: ``--max-concurrency``; open loop:
``--request-rate`` with ``--burstiness``) with ``--save-detailed``: each
request's TTFT, inter-token latencies, end-to-end latency and error. omni
computes every figure from those per-request times itself, with vLLM's
definitions (``vllm/benchmarks/serve.py`` ``calculate_metrics``): TPOT is
(e2e - TTFT) / (output tokens - 1), ITL the gaps between streamed chunks.

A level's percentiles are the interpolated sample percentiles ``vllm bench
serve`` states; beside each, its count and its 95 % upper bound
(:mod:`omni.stats.quantiles`). The SLO is met only where that bound is within it:
32 requests bound only p91, so a p99 SLO needs 299 requests a level before
a level can meet it, and below that it is "not established".
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from omni.serving.server_metrics import GENERATION_COUNTERS, server_prompt_tokens
from omni.serving.slo import slo_verdict
from omni.stats.quantiles import percentile_bound

PERCENTILES = (50, 90, 99)
# a level whose load generator kept its CPUs this busy may have timed itself,
# not the server: its latencies are not judged
CLIENT_BUSY_PCT = 90.0
# an open-loop level whose requests completed at less than this share of the
# rate they were sent at did not hold the rate: the queue grew (saturated)
HELD_SHARE = 0.9
# open loop: a sent rate further from the asked one than this share, and than
# the arrival draw itself explains (RATE_DRAW_ALPHA, two-sided), is the client's lag
RATE_SLACK = 0.05
RATE_DRAW_ALPHA = 0.001


@dataclass(frozen=True)
class Level:
    kind: str  # "concurrency" (closed loop) or "rate" (open loop, requests/s)
    value: float

    @property
    def key(self) -> str:
        return f"c={self.value:g}" if self.kind == "concurrency" else f"r={self.value:g}"


def arm_levels(load: Mapping) -> list[Level]:
    """The arm's levels, concurrencies first, each ascending."""
    return [Level("concurrency", float(c)) for c in load["concurrency"]] + [
        Level("rate", float(r)) for r in load["rate"]
    ]


def workload_seed(seed: int, pass_index: int) -> int:
    """The load generator's seed for one pass, drawn from the arm's
    ``load.seed`` and the pass: every pass replays fresh traffic (prompts,
    lengths, arrival gaps), so an interval over passes holds over traffic as
    well as over the server, and the arms of one pass get the same traffic,
    so a comparison within a pass is paired."""
    digest = hashlib.sha256(f"omni-load:{seed}:{pass_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def level_order(levels: list[Level], seed: int, run_id: str) -> list[Level]:
    """The levels in the order this run takes them: shuffled by the sweep's
    seed and the run, so a level's place in a server's life (first, warm,
    last) is not the same in every pass."""
    order = list(levels)
    random.Random(f"{seed}:{run_id}").shuffle(order)
    return order


def client_flags(
    level: Level, load: Mapping, *, prompt_len: int, max_tokens: int, model: str, tokenizer: str, base_url: str
) -> list[str]:
    """``vllm bench serve``'s flags for one level; the result goes where
    ``--result-dir``/``--result-filename`` (added by the caller) say."""
    slo = load["slo"]
    flags = [
        "--backend",
        "openai",  # /v1/completions, streamed: both vLLM's server and llama-server speak it
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(prompt_len),
        "--random-output-len",
        str(max_tokens),
        "--random-range-ratio",
        str(load["range_ratio"]),
        "--num-prompts",
        str(load["requests"]),
        "--num-warmups",
        str(load["warmup"]),
        "--seed",
        str(load["seed"]),
        "--ignore-eos",
        "--temperature",
        "0",
        "--burstiness",
        str(load["burstiness"]),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        ",".join(map(str, PERCENTILES)),
        "--goodput",
        f"ttft:{slo['ttft_ms']:g}",
        f"tpot:{slo['tpot_ms']:g}",
        "--save-result",
        "--save-detailed",
        "--disable-tqdm",
    ]
    if level.kind == "concurrency":
        flags += ["--max-concurrency", str(int(level.value)), "--request-rate", "inf"]
    else:
        flags += ["--request-rate", f"{level.value:g}"]
    return flags


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def request_records(level: Level, detailed: Mapping) -> list[dict]:
    """One record per measured request, from ``--save-detailed``'s lists
    (seconds there, milliseconds here)."""
    starts = [s for s in detailed.get("start_times") or [] if s is not None]
    t0 = min(starts) if starts else 0.0
    records = []
    for i, error in enumerate(detailed.get("errors") or []):
        ttft = _at(detailed, "ttfts", i)
        latency = _at(detailed, "latencies", i)
        out = _at(detailed, "output_lens", i)
        itl = _at(detailed, "itls", i) or []
        ok = not error and ttft is not None and latency is not None and bool(out)
        records.append(
            {
                "level": level.key,
                "request": i,
                "input_tokens": _at(detailed, "input_lens", i),
                "output_tokens": out,
                "ok": ok,
                "error": (error or None) if not ok else None,
                "ttft_ms": ttft * 1e3 if ok else None,
                "tpot_ms": (latency - ttft) / (out - 1) * 1e3 if ok and out > 1 else None,
                "e2e_ms": latency * 1e3 if ok else None,
                "itl_ms": [x * 1e3 for x in itl] if ok else None,
                "start_s": _at(detailed, "start_times", i) - t0 if _at(detailed, "start_times", i) else None,
                "queue_ms": (q * 1e3 if (q := _at(detailed, "queue_times", i)) is not None else None),
            }
        )
    return records


def reconcile_output_tokens(
    requests: list[dict], server_metrics: Mapping, warmup: int, max_tokens: int, range_ratio: float
) -> str | None:
    """Check the client's output token counts against the tokens the server
    says it generated over the level; None when they agree.

    ``vllm bench serve`` takes a request's count from the usage the server
    streams, but only from a chunk without choices: llama-server sends its
    usage in the last chunk beside an empty choice, so the client re-tokenizes
    the text instead, and a byte token decoded to a part of a character
    tokenizes otherwise (the random weights of omni's models produce them).
    Where every request asked for exactly ``max_tokens`` (``range_ratio`` 0,
    ``ignore_eos``) and the server generated exactly that many for each, the
    requests get ``max_tokens`` back ("recounted"); otherwise the level is
    flagged ``output_tokens_mismatch``. The last, empty chunk is no token:
    its gap is dropped from the request's ITL."""
    counted = next((server_metrics[n]["change"] for n in GENERATION_COUNTERS if n in server_metrics), None)
    ok = [r for r in requests if r["ok"]]
    sent = sum(r["output_tokens"] for r in ok) + warmup * (ok[0]["output_tokens"] if ok else 0)
    check = None
    if counted is not None and counted != sent and len(ok) == len(requests):
        check = "mismatch"
        if range_ratio == 0 and counted == (len(ok) + warmup) * max_tokens:
            for r in ok:
                r["output_tokens"] = max_tokens
                r["tpot_ms"] = (r["e2e_ms"] - r["ttft_ms"]) / (max_tokens - 1) if max_tokens > 1 else None
            check = "recounted"
    for r in ok:  # tokens - 1 gaps, and one more: the closing chunk's
        if r["itl_ms"] and len(r["itl_ms"]) == r["output_tokens"]:
            r["itl_ms"] = r["itl_ms"][:-1]
    return check


def _at(detailed: Mapping, key: str, i: int):
    values = detailed.get(key) or []
    return values[i] if i < len(values) else None


# the server's prompt tokens over a level may differ from the client's count by this share
PROMPT_TOKENS_SLACK = 0.01


def level_record(
    level: Level,
    order: int,
    detailed: Mapping,
    requests: list[dict],
    slo: Mapping,
    client_cpu: Mapping,
    server_metrics: Mapping | None = None,
    warmup: int = 0,
    output_check: str | None = None,
    burstiness: float = 1.0,
) -> dict:
    """The level's figures from its requests, and why it is not judged if it is not.

    ``server_metrics`` (:func:`metrics_summary` of the level's scrapes): the
    prompt tokens the server counted are checked against the client's count,
    the measured requests' and the warm-up's (``vllm bench serve`` warms up
    with its first request, ``warmup`` times)."""
    ok = [r for r in requests if r["ok"]]
    duration = float(detailed.get("duration") or 0.0)
    out_tokens = sum(r["output_tokens"] for r in ok)
    record: dict = {
        "level": level.key,
        "load_kind": level.kind,
        "load_value": level.value,
        "order": order,
        "requests": len(requests),
        "failed": len(requests) - len(ok),
        "duration_s": duration,
        "request_s": len(ok) / duration if duration > 0 else None,
        "output_tok_s": out_tokens / duration if duration > 0 else None,
        "client_cpu_pct": client_cpu.get("client_cpu_pct"),
        "client_thread_pct": client_cpu.get("client_thread_pct"),
        "max_in_flight": detailed.get("max_concurrent_requests"),
    }
    series = {
        "ttft": [r["ttft_ms"] for r in ok],
        "tpot": [r["tpot_ms"] for r in ok if r["tpot_ms"] is not None],
        "itl": [x for r in ok for x in r["itl_ms"] or []],
        "e2e": [r["e2e_ms"] for r in ok],
    }
    for name, values in series.items():
        record[f"{name}_samples"] = len(values)
        for q in PERCENTILES:
            record[f"{name}_p{q}_ms"] = _pct(values, q)
            record[f"{name}_p{q}_upper95_ms"] = percentile_bound(values, q / 100).upper
    good = [r for r in ok if meets(r, slo)]
    record["goodput_req_s"] = len(good) / duration if duration > 0 else None
    starts = sorted(r["start_s"] for r in requests if r["start_s"] is not None)
    sent = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 and starts[-1] > starts[0] else None
    fastest = min(series["e2e"], default=0.0) / 1e3
    held = len(ok) / (duration - fastest) if duration > fastest else None
    record.update(
        asked_rate=level.value if level.kind == "rate" else None,
        sent_rate=sent if level.kind == "rate" else None,
        achieved_rate=held if level.kind == "rate" else None,
    )
    counted = server_prompt_tokens(server_metrics or {})
    first = requests[0]["input_tokens"] if requests and requests[0]["input_tokens"] else 0
    record["client_prompt_tokens"] = sum(r["input_tokens"] or 0 for r in requests) + warmup * first
    record["server_prompt_tokens"] = counted
    record["output_tokens_check"] = output_check
    record["flags"] = level_flags(record)
    if level.kind == "rate" and sent is not None and not rate_sent(sent, level.value, len(starts), burstiness):
        record["flags"].append("rate_not_sent")
    judged = not record["flags"] or record["flags"] == ["saturated"]
    record["slo_verdict"] = slo_verdict(record, slo) if judged else None
    record["slo_met"] = {"met": True, "not_met": False}.get(record["slo_verdict"])
    return record


def sent_rate_band(asked: float, n: int, burstiness: float = 1.0, alpha: float = RATE_DRAW_ALPHA):
    """Where the sent rate of ``n`` arrivals at ``asked`` per second falls
    with chance 1 - ``alpha`` when the client sends on time: the n - 1 gaps
    of a gamma process of shape ``burstiness`` (vllm bench serve's) span
    Gamma(k, 1) / (asked x burstiness), k = (n - 1) x burstiness, so
    sent / asked = k / Gamma(k, 1). None below 2 arrivals."""
    if n < 2:
        return None
    from scipy.stats import gamma

    k = (n - 1) * burstiness
    return asked * k / gamma.ppf(1 - alpha / 2, k), asked * k / gamma.ppf(alpha / 2, k)


def rate_sent(sent: float, asked: float, n: int, burstiness: float = 1.0) -> bool:
    """The client sent the rate asked: within :data:`RATE_SLACK` of it, or
    within what the arrival draw explains (:func:`sent_rate_band`)."""
    band = sent_rate_band(asked, n, burstiness)
    return abs(sent / asked - 1) <= RATE_SLACK or band is None or band[0] <= sent <= band[1]


def meets(request: Mapping, slo: Mapping) -> bool:
    """One request within the SLO's TTFT and TPOT (vLLM's goodput rule)."""
    tpot = request["tpot_ms"] or 0.0
    return request["ttft_ms"] <= slo["ttft_ms"] and tpot <= slo["tpot_ms"]


def level_flags(record: Mapping) -> list[str]:
    """Why a level's latencies are not judged: a request failed, the load
    generator was CPU-bound or its CPU was not measured (its start and end
    lines were not seen) or (open loop, :func:`level_record`) it sent
    another rate than asked, the server counted other prompt tokens than the
    client sent (its tokenizer splits the text otherwise: the lengths are not
    the arm's), or (open loop) the server did not hold the rate."""
    flags = []
    if record["failed"]:
        flags.append("failed_requests")
    client = [record.get(k) for k in ("client_cpu_pct", "client_thread_pct")]
    if all(pct is None for pct in client):
        flags.append("client_unmeasured")  # its marks were not seen: whether it kept up is unknown, not "yes"
    elif max(pct or 0.0 for pct in client) >= CLIENT_BUSY_PCT:
        flags.append("client_bound")
    counted, sent_tokens = record.get("server_prompt_tokens"), record.get("client_prompt_tokens")
    if counted is not None and sent_tokens and abs(counted - sent_tokens) > PROMPT_TOKENS_SLACK * sent_tokens:
        flags.append("prompt_tokens_mismatch")
    if record.get("output_tokens_check") == "mismatch":
        flags.append("output_tokens_mismatch")
    sent, held = record.get("sent_rate"), record.get("achieved_rate")
    if record["load_kind"] == "rate" and sent and held is not None and held < HELD_SHARE * sent:
        flags.append("saturated")
    return flags
