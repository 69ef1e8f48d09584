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

Every figure is over the level's steady window (:mod:`omni.serving.window`): from
its first completion to its last request's start. Before it the server
fills from empty (a closed loop's first wave starts at once and prefills
together); after it the offered load has stopped and the last requests
drain beside fewer neighbours. The client sends enough more that
``load.requests`` remain inside it (:func:`requests_to_send`).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from omni.serving.server_metrics import GENERATION_COUNTERS, server_prompt_tokens
from omni.serving.slo import slo_reach, slo_verdict
from omni.serving.window import steady_window
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
# a level run again for its min_duration_s asks for this much more than the
# window it had suggests: its rate varies between attempts
EXTEND_MARGIN = 1.25
# a level whose window kept less than this share of its requests is not run again for more:
# its ends are most of it (a queue that grows through it), and more requests would grow them too
MIN_KEPT_SHARE = 0.25
SATURATED_ONLY = {"saturated", "short_window"}
MAX_REQUESTS = 100_000  # per level, as LoadRequest.requests allows


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


# where a request goes (load.endpoint): vllm bench serve's backend and path,
# both streamed, both spoken by vLLM's server and llama-server
ENDPOINTS = {
    "completions": ("openai", "/v1/completions"),  # the prompt as text
    "chat": ("openai-chat", "/v1/chat/completions"),  # the prompt as one user message, templated by the server
}


def client_flags(
    level: Level, load: Mapping, *, prompt_len: int, max_tokens: int, model: str, tokenizer: str, base_url: str
) -> list[str]:
    """``vllm bench serve``'s flags for one level; the result goes where
    ``--result-dir``/``--result-filename`` (added by the caller) say.
    ``load``: the arm's load block, its prompts file's path resolved and
    ``prompts_output_tokens`` (every line gives its answer's length)."""
    slo = load["slo"]
    backend, path = ENDPOINTS[load.get("endpoint", "completions")]
    flags = [
        "--backend",
        backend,
        "--base-url",
        base_url,
        "--endpoint",
        path,
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        *dataset_flags(load, prompt_len, max_tokens),
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


def dataset_flags(load: Mapping, prompt_len: int, max_tokens: int) -> list[str]:
    """The requests' prompts and answer lengths.

    A prompts file is the custom dataset: its lines shuffled by the seed,
    each prompt sent as written (``--skip-chat-template``: on the chat
    endpoint the server templates it), each answer its line's
    ``output_tokens`` (``--custom-output-len -1``) or ``max_tokens``.
    Otherwise random prompts of ``prompt_len`` tokens, whose first
    ``prefix_len`` are drawn once per client and begin every prompt
    (``--random-prefix-len``: the same for every request of a level, and
    for every level of a run, whose clients share a seed); the rest,
    ``--random-input-len``, is drawn per request, +-``range_ratio``, after it."""
    if load.get("prompts"):
        output = -1 if load.get("prompts_output_tokens") else max_tokens
        return [
            "--dataset-name",
            "custom",
            "--dataset-path",
            load["prompts"],
            "--custom-output-len",
            str(output),
            "--skip-chat-template",
        ]
    prefix = load.get("prefix_len", 0)
    flags = [
        "--dataset-name",
        "random",
        "--random-input-len",
        str(prompt_len - prefix),
        "--random-output-len",
        str(max_tokens),
        "--random-range-ratio",
        str(load["range_ratio"]),
    ]
    return flags + (["--random-prefix-len", str(prefix)] if prefix else [])


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def request_records(level: Level, detailed: Mapping) -> list[dict]:
    """One record per request sent after the warm-up, from
    ``--save-detailed``'s lists (seconds there, milliseconds here); which of
    them a level's figures count is its steady window's (:func:`level_record`)."""
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
    requests: list[dict],
    server_metrics: Mapping,
    warmup: int,
    max_tokens: int,
    range_ratio: float,
    *,
    endpoint: str = "completions",
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
    its gap is dropped from the request's ITL. On the chat endpoint the
    first chunk is no token either: both servers send the assistant's role
    first and the first token's text a moment later, in the same step; the
    client takes TTFT at the role, and the gap to the text is dropped too."""
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
    for r in ok:  # tokens - 1 gaps, and one more each: the role chunk's (chat), the closing chunk's
        if endpoint == "chat" and r["itl_ms"]:
            r["itl_ms"] = r["itl_ms"][1:]
        if r["itl_ms"] and len(r["itl_ms"]) == r["output_tokens"]:
            r["itl_ms"] = r["itl_ms"][:-1]
    return check


def _at(detailed: Mapping, key: str, i: int):
    values = detailed.get(key) or []
    return values[i] if i < len(values) else None


# the server's prompt tokens over a level may differ from the client's count by this share
PROMPT_TOKENS_SLACK = 0.01
# what the run layer's watch of the load generator gives a level record
# (omni.serving.run.ClientWatch.cpu): its CPU use from its start and end marks,
# and from samples between them, what else ran on its CPUs and where it ran
CLIENT_FIGURES = (
    "client_cpu_pct",
    "client_thread_pct",
    "client_foreign_cpu_pct",
    "client_foreign_cpu_peak_pct",
    "client_cpus_outside",
)


def client_prompt_tokens(prompt_lens: Sequence[int] | None, warmup: int) -> int | None:
    """The prompt tokens the client sent over a level by its own count: the
    lengths it sampled (every request, in order) and ``warmup`` times the
    first (its warm-up request). None when the client did not write them: a
    count the server's cannot be checked against, not 0."""
    if prompt_lens is None:
        return None
    return sum(prompt_lens) + warmup * (prompt_lens[0] if prompt_lens else 0)


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
    prompt_lens: Sequence[int] | None = None,
    min_duration_s: float = 0.0,
) -> dict:
    """The level's figures from the requests of its steady window
    (:func:`~omni.serving.window.steady_window`; each request is marked
    ``in_window``), and why it is not judged if it is not.

    Latencies are over the window's requests; throughput is the
    completions inside the window over its length (a rate of events, where
    the requests wholly inside it would fall short by about one request per
    slot); goodput is that rate times the share of the window's requests
    within the SLO. ``server_metrics`` (:func:`metrics_summary` of the
    level's scrapes): the prompt tokens the server counted over the whole
    level are checked against the client's own count, ``prompt_lens``
    (the prompts it sampled, in order: :mod:`omni.engines.bench_serve`),
    and its warm-up's (``vllm bench serve`` warms up with its first
    request, ``warmup`` times). A window shorter than ``min_duration_s``
    is ``short_window``."""
    window = steady_window(requests)
    for r in requests:
        r["in_window"] = window.holds(r)
    measured = [r for r in requests if r["in_window"]]
    ok = [r for r in measured if r["ok"]]
    span = window.duration_s
    done = [r for r in requests if window.completed(r)]
    record: dict = {
        "level": level.key,
        "load_kind": level.kind,
        "load_value": level.value,
        "order": order,
        "requests": len(requests),
        "failed": sum(not r["ok"] for r in requests),
        "duration_s": float(detailed.get("duration") or 0.0),
        "window_s": span,
        "window_requests": len(measured),
        "excluded_requests": len(requests) - len(measured),
        "request_s": len(done) / span if span else None,
        "output_tok_s": sum(r["output_tokens"] for r in done) / span if span else None,
        "max_in_flight": detailed.get("max_concurrent_requests"),
        **{key: client_cpu.get(key) for key in CLIENT_FIGURES},
        **bench_figures(requests, detailed),
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
    rate = record["request_s"]
    record["goodput_req_s"] = rate * len(good) / len(measured) if rate is not None and measured else None
    held = rate
    if window.duration_s is None:
        # nothing completed before the last request was sent: every arrival and completion of
        # the level says whether the server held the rate (a queue that only grew)
        arrivals = sorted(r["start_s"] for r in requests if r["start_s"] is not None)
        ends = [r for r in requests if r["ok"]]
        fastest = min((r["e2e_ms"] for r in ends), default=0.0) / 1e3
        whole = record["duration_s"] - fastest
        held = len(ends) / whole if ends and whole > 0 else None
    else:
        arrivals = sorted(r["start_s"] for r in requests if window.arrived(r))
    spread = arrivals[-1] - arrivals[0] if arrivals else 0.0
    sent = (len(arrivals) - 1) / spread if spread > 0 else None
    record.update(
        asked_rate=level.value if level.kind == "rate" else None,
        sent_rate=sent if level.kind == "rate" else None,
        achieved_rate=held if level.kind == "rate" else None,
    )
    record["client_prompt_tokens"] = client_prompt_tokens(prompt_lens, warmup)
    record["server_prompt_tokens"] = server_prompt_tokens(server_metrics or {})
    record["output_tokens_check"] = output_check
    record["flags"] = level_flags(record, min_duration_s)
    if level.kind == "rate" and sent is not None and not rate_sent(sent, level.value, len(arrivals), burstiness):
        record["flags"].append("rate_not_sent")
    # saturated is a verdict of its own (not met), however short its window: the queue only grew
    judged = not record["flags"] or ("saturated" in record["flags"] and set(record["flags"]) <= SATURATED_ONLY)
    record["slo_verdict"] = slo_verdict(record, slo) if judged else None
    record["slo_met"] = {"met": True, "not_met": False}.get(record["slo_verdict"])
    record["slo_reach"] = slo_reach(record)  # beside not_established, whether too few requests are why
    return record


def bench_figures(requests: list[dict], detailed: Mapping) -> dict:
    """The level's throughput by ``vllm bench serve``'s own definition, beside
    omni's window: every request's output tokens (and completions) over the
    benchmark's whole duration, first wave and drain tail included
    (``calculate_metrics``: ``output_throughput``, ``request_throughput``).
    The two differ by definition, not by error: the peer's counts the ramp
    up and the drain, where fewer requests are in flight."""
    duration = float(detailed.get("duration") or 0.0)
    ok = [r for r in requests if r["ok"]]
    if duration <= 0:
        return {"bench_output_tok_s": None, "bench_request_s": None}
    return {
        "bench_output_tok_s": sum(r["output_tokens"] for r in ok) / duration,
        "bench_request_s": len(ok) / duration,
    }


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


def requests_to_send(level: Level, load: Mapping, batch_size: int, measured: int | None = None) -> int:
    """The requests the client sends after its warm-up so that ``measured``
    (``load.requests`` unless given) fall in the steady window.

    Closed loop, c in flight: the window leaves out the first wave, c
    requests, and those in flight at the last start, at most c: ``measured``
    + 2c leaves ``measured`` or more. Open loop at rate r: it leaves out the
    arrivals before the first completion and those in flight at the last
    arrival, r x a request's time in the server each (Little's law), which
    is not known before the level runs: 2 x ``batch_size`` more are sent
    (the server's sequences, full at each end), and a level whose window
    then holds fewer than ``measured`` runs once more with the count it
    lacked (:func:`extended_requests`). A rate level also measures r x
    ``min_duration_s`` requests at least, so its window lasts that long."""
    measured = load["requests"] if measured is None else measured
    if level.kind == "concurrency":
        return min(MAX_REQUESTS, measured + 2 * int(level.value))
    measured = max(measured, math.ceil(level.value * load.get("min_duration_s", 0.0)))
    return min(MAX_REQUESTS, measured + 2 * batch_size)


def extended_requests(record: Mapping, load: Mapping) -> int | None:
    """The requests to measure when a level is run once more; None when it
    needs no second run: its window was long enough and held
    ``load.requests``, or something besides that keeps it from being judged
    (a second run would hide a failure, not mend it).

    Too short for ``min_duration_s``: a window lasts about its measured
    requests over the level's completion rate, so the second run measures
    that rate times ``min_duration_s``, :data:`EXTEND_MARGIN` more for a
    rate that varies, and never fewer than ``load.requests``. The rate is
    the window's completions per second, or with no window the level's
    successes over its whole duration. Too few requests in the window (an
    open loop's ends took more than :func:`requests_to_send` allowed): the
    second run sends as many more as the share the first one's window kept
    asks for, :data:`EXTEND_MARGIN` over. A level still short after it is
    judged on the requests it has: the bound of its percentile says what
    they reach (``slo_reach``)."""
    flags = record["flags"]
    if flags and flags != ["short_window"]:
        return None
    few = record.get("window_requests") is not None and record["window_requests"] < load["requests"]
    short = flags == ["short_window"] and load.get("min_duration_s", 0.0) > 0
    if not short and not few:
        return None
    wanted = 0
    if few:  # the share of the sent requests the window kept, held for the second run
        kept = record["window_requests"] / max(record["requests"], 1)
        if kept < MIN_KEPT_SHARE:
            return None  # a window of almost nothing: more requests would not steady it
        wanted = math.ceil(load["requests"] / kept * EXTEND_MARGIN)
    if short:
        rate = record.get("request_s")
        if not rate and record.get("duration_s"):
            rate = (record["requests"] - record["failed"]) / record["duration_s"]
        if rate:
            wanted = max(wanted, load["requests"], math.ceil(rate * load["min_duration_s"] * EXTEND_MARGIN))
    return min(MAX_REQUESTS, wanted) if wanted else None


def meets(request: Mapping, slo: Mapping) -> bool:
    """One request within the SLO's TTFT and TPOT (vLLM's goodput rule)."""
    tpot = request["tpot_ms"] or 0.0
    return request["ttft_ms"] <= slo["ttft_ms"] and tpot <= slo["tpot_ms"]


def level_flags(record: Mapping, min_duration_s: float = 0.0) -> list[str]:
    """Why a level's latencies are not judged: a request failed, the load
    generator may have slowed them (:func:`client_flags_of`), the server
    counted other prompt tokens than the client sent (its tokenizer splits
    the text otherwise: the lengths are not the arm's) or the client's own
    count is missing, output tokens disagree, the steady window is empty or
    shorter than ``min_duration_s``, or (open loop) the server did not hold
    the rate; (open loop, :func:`level_record`) the client sent another rate
    than asked."""
    flags = []
    if record["failed"]:
        flags.append("failed_requests")
    flags += client_flags_of(record)
    counted, sent_tokens = record.get("server_prompt_tokens"), record.get("client_prompt_tokens")
    if counted is not None and sent_tokens is None:
        flags.append("prompt_tokens_unchecked")  # the client wrote no count of its own: the server's has no match
    elif counted is not None and sent_tokens and abs(counted - sent_tokens) > PROMPT_TOKENS_SLACK * sent_tokens:
        flags.append("prompt_tokens_mismatch")
    if record.get("output_tokens_check") == "mismatch":
        flags.append("output_tokens_mismatch")
    window = record.get("window_s")
    if window is None or window < min_duration_s:
        flags.append("short_window")
    sent, held = record.get("sent_rate"), record.get("achieved_rate")
    if record["load_kind"] == "rate" and sent and held is not None and held < HELD_SHARE * sent:
        flags.append("saturated")
    return flags


def client_flags_of(record: Mapping) -> list[str]:
    """Why the load generator may have timed itself, not the server: its
    CPU over the level unknown (its start and end lines not seen: unknown is
    not idle), its CPUs or busiest thread :data:`CLIENT_BUSY_PCT` busy, a
    thread of it seen on a CPU not its own, or its CPUs :data:`CLIENT_BUSY_PCT`
    busy with its own work and a neighbour's together (``client_interference``:
    the client then waited for its CPU). A neighbour on CPUs the client
    leaves idle costs it a wake-up at most, as the server's own neighbour
    rule is a warning: stored (``client_foreign_cpu_pct``, its peak), not
    flagged."""
    flags = []
    client = [record.get(k) for k in ("client_cpu_pct", "client_thread_pct")]
    if all(pct is None for pct in client):
        flags.append("client_unmeasured")
    elif max(pct or 0.0 for pct in client) >= CLIENT_BUSY_PCT:
        flags.append("client_bound")
    if record.get("client_cpus_outside"):
        flags.append("client_outside_cpus")
    own, foreign = record.get("client_cpu_pct"), record.get("client_foreign_cpu_pct")
    if own is not None and foreign is not None and own < CLIENT_BUSY_PCT <= own + foreign:
        flags.append("client_interference")
    return flags
