"""A serving level's steady window and its load generator, without a server:
which requests a level's figures are over, how many the client sends for
them, a level run again for its minimum duration, the client's own prompt
count, and the client's CPUs sampled from outside."""

import heapq
import json
import os
import subprocess
import sys
import time
import types
from types import SimpleNamespace

import numpy as np
import pytest

from omni.engines import bench_serve
from omni.measure.client_cpus import ClientSampler, client_cpus_summary
from omni.measure.interference import InterferenceSample
from omni.serving.levels import (
    Level,
    extended_requests,
    level_flags,
    level_record,
    request_records,
    requests_to_send,
)
from omni.serving.run import client_argv, prompt_lens_path, read_prompt_lens
from omni.serving.window import steady_window
from omni.spec import load_spec, validate_sweep
from tests.conftest import REPO
from tests.traces import trace

SLO = {"ttft_ms": 2000.0, "tpot_ms": 100.0, "percentile": 50}
QUIET_CLIENT = {"client_cpu_pct": 20.0, "client_thread_pct": 30.0, "client_foreign_cpu_peak_pct": 1.0}
SEND_GAP_S = 0.001  # the client sends the next request this long after a completion frees its slot


def closed_loop(n, c, latency, errors=()):
    """``vllm bench serve --max-concurrency c``: the first c requests start at
    once, each later one as soon as a request in flight completes; request i
    takes ``latency(i)`` s."""
    free, starts, latencies = [0.0] * c, [], []
    for i in range(n):
        start = heapq.heappop(free) + (SEND_GAP_S if i >= c else 0.0)
        starts.append(start)
        latencies.append(latency(i))
        heapq.heappush(free, start + latencies[-1])
    return trace(starts, latencies, errors=errors)


def open_loop(n, rate, service_s, slots, rng):
    """Poisson arrivals at ``rate`` to a server of ``slots`` sequences, each
    ``service_s`` once it has one, first come first served."""
    starts = np.cumsum(rng.exponential(1 / rate, n)).tolist()
    free, latencies = [0.0] * slots, []
    for s in starts:
        begin = max(s, heapq.heappop(free))
        heapq.heappush(free, begin + service_s)
        latencies.append(begin + service_s - s)
    return trace(starts, latencies)


def record_of(level, data, **kwargs):
    reqs = request_records(level, data)
    return level_record(level, 0, data, reqs, SLO, QUIET_CLIENT, **kwargs), reqs


def test_the_window_leaves_out_exactly_the_first_wave_and_the_tail_of_a_closed_loop():
    """4 in flight, 1 s a request: the 4 sent at once before anything
    completed and the 4 in flight when the last was sent are out; the client
    sent 4 + 4 more than the 20 the level measures, and 20 remain."""
    c, measured = 4, 20
    load = {"requests": measured, "slo": SLO}
    n = requests_to_send(Level("concurrency", c), load, batch_size=4)
    assert n == measured + 2 * c
    level = Level("concurrency", c)
    record, reqs = record_of(level, closed_loop(n, c, lambda i: 1.0))
    assert [r["in_window"] for r in reqs] == [False] * c + [True] * measured + [False] * c
    assert (record["requests"], record["window_requests"], record["excluded_requests"]) == (28, 20, 8)
    assert record["ttft_samples"] == measured and record["flags"] == []
    window = steady_window(reqs)
    assert window.start_s == pytest.approx(1.0)  # the first completion
    assert window.end_s == pytest.approx(6 * (1 + SEND_GAP_S))  # the last wave's start
    # the completions inside the window over its length: 4 a second, as the server ran
    assert record["request_s"] == pytest.approx(c / (1 + SEND_GAP_S), rel=0.01)
    assert record["output_tok_s"] == pytest.approx(16 * record["request_s"])


@pytest.mark.parametrize("seed", range(5))
def test_with_drawn_latencies_the_window_leaves_out_the_first_wave_and_at_most_c_more(seed):
    rng = np.random.default_rng(seed)
    c, measured = 6, 30
    lat = rng.uniform(0.5, 2.0, 100)
    n = requests_to_send(Level("concurrency", c), {"requests": measured, "slo": SLO}, batch_size=4)
    record, reqs = record_of(Level("concurrency", c), closed_loop(n, c, lambda i: float(lat[i])))
    last = max(r["start_s"] for r in reqs)
    in_flight_at_last = {r["request"] for r in reqs if r["start_s"] + r["e2e_ms"] / 1e3 > last}
    out = {r["request"] for r in reqs if not r["in_window"]}
    assert out == set(range(c)) | in_flight_at_last and len(in_flight_at_last) <= c
    assert record["window_requests"] >= measured


def test_a_failed_request_counts_wherever_it_happened():
    """A failure in the first wave is still the level's: counted, flagged,
    never dropped with the wave it was in."""
    level = Level("concurrency", 2)
    record, reqs = record_of(level, closed_loop(12, 2, lambda i: 1.0, errors=(1,)))
    assert reqs[1]["in_window"] and not reqs[0]["in_window"]
    assert record["failed"] == 1 and record["window_requests"] == 12 - 2 - 2 + 1
    assert record["flags"] == ["failed_requests"] and record["slo_verdict"] is None


def test_an_open_loop_level_keeps_its_requests_mostly_after_one_more_run():
    """The rule: 2 x batch_size on top, and rate x min_duration_s measured
    at least; a window that still holds fewer than asked runs once more,
    scaled by the share the first window kept, 25 % over. 200 seeded draws
    of a server of 4 sequences, 1 s each (4 requests/s at most), 29 asked
    (a p90): at half its capacity 88 % of levels keep them in their first
    run and 98.5 % by the second; at 90 % (a queue that grows through the
    level, so longer ends) 30 % and 78 %, and the rest are judged on what
    they have (docs/serving.md). Seeded: the figures are the same every run."""
    load = {"requests": 29, "min_duration_s": 0.0, "slo": SLO}
    n = requests_to_send(Level("rate", 2.0), load, batch_size=4)
    assert n == 29 + 2 * 4
    assert requests_to_send(Level("rate", 2.0), {**load, "min_duration_s": 30.0}, batch_size=4) == 60 + 8
    rng = np.random.default_rng(3)
    reached = {}
    for rate in (2.0, 3.6):
        level, first_ok, second_ok = Level("rate", rate), 0, 0
        for _ in range(200):
            first, _ = record_of(level, open_loop(n, rate, 1.0, 4, rng))
            more = extended_requests(first, load)
            if first["window_requests"] >= 29:
                assert more is None
                first_ok += 1
                continue
            again = requests_to_send(level, load, batch_size=4, measured=more)
            second_ok += record_of(level, open_loop(again, rate, 1.0, 4, rng))[0]["window_requests"] >= 29
        reached[rate] = (first_ok / 200, (first_ok + second_ok) / 200)
    assert reached == {2.0: (0.88, 0.985), 3.6: (0.3, 0.78)}


def test_a_level_shorter_than_its_minimum_duration_is_flagged_and_its_second_run_is_long_enough():
    c, load = 4, {"requests": 16, "min_duration_s": 10.0, "slo": SLO}
    level = Level("concurrency", c)
    short, _ = record_of(level, closed_loop(16 + 2 * c, c, lambda i: 1.0), min_duration_s=10.0)
    assert short["window_s"] == pytest.approx(4.0, rel=0.01)
    assert short["flags"] == ["short_window"] and short["slo_verdict"] is None
    more = extended_requests(short, load)
    assert more == 50  # 4 a second x 10 s x 1.25
    n = requests_to_send(level, load, batch_size=4, measured=more)
    longer, _ = record_of(level, closed_loop(n, c, lambda i: 1.0), min_duration_s=10.0)
    assert longer["window_s"] >= 10.0 and longer["flags"] == [] and longer["window_requests"] >= more
    # nothing to extend: a level long enough, one flagged for more than its length, a spec without a minimum
    assert extended_requests(longer, load) is None
    assert extended_requests({**short, "flags": ["failed_requests", "short_window"]}, load) is None
    assert extended_requests(short, {**load, "min_duration_s": 0.0}) is None
    # no window at all: the level's successes over its whole duration set the count
    empty = {**short, "request_s": None, "requests": 24, "failed": 0, "duration_s": 6.0}
    assert extended_requests(empty, load) == 50


def test_the_prompt_tokens_are_checked_against_the_clients_own_count():
    level = Level("concurrency", 1)
    data = closed_loop(8, 1, lambda i: 0.5)
    lens = [128, 120, 130, 128, 128, 128, 128, 128]
    server = {"vllm:prompt_tokens_total": {"change": float(sum(lens) + 2 * 128)}}  # and the warm-up's 2
    agree, _ = record_of(level, data, server_metrics=server, warmup=2, prompt_lens=lens)
    assert agree["client_prompt_tokens"] == sum(lens) + 256 and agree["flags"] == []
    off = {"vllm:prompt_tokens_total": {"change": 1.05 * (sum(lens) + 256)}}
    assert record_of(level, data, server_metrics=off, warmup=2, prompt_lens=lens)[0]["flags"] == [
        "prompt_tokens_mismatch"
    ]
    # a client that wrote no count of its own: said, not read as 0
    unknown, _ = record_of(level, data, server_metrics=server, warmup=2, prompt_lens=None)
    assert unknown["client_prompt_tokens"] is None and unknown["flags"] == ["prompt_tokens_unchecked"]


def test_a_client_seen_off_its_cpus_or_beside_a_neighbour_is_flagged():
    base = {"failed": 0, "load_kind": "concurrency", "window_s": 5.0, **QUIET_CLIENT}
    assert level_flags(base) == []
    assert level_flags({**base, "client_cpus_outside": [3]}) == ["client_outside_cpus"]
    # a neighbour on CPUs the client leaves idle is stored, not flagged: it cost the client a wake-up at most
    assert (
        level_flags(
            {**base, "client_cpu_pct": 20.0, "client_foreign_cpu_peak_pct": 60.0, "client_foreign_cpu_pct": 30.0}
        )
        == []
    )
    # the client's work and the neighbour's together filled its CPUs: the client waited for its CPU
    assert level_flags({**base, "client_cpu_pct": 60.0, "client_foreign_cpu_pct": 35.0}) == ["client_interference"]


def sample(t, busy, tree):
    return InterferenceSample(t, "level", busy, tree, 0.0)


def test_the_foreign_share_of_the_clients_cpus_is_the_interference_accounting():
    """CPU 1 is the client's: busy 0.3 s in the first half second, 0.2 of it
    the client's own (20 % foreign), then 0.3 s all its own; its thread was
    also seen on CPU 0."""
    samples = [sample(0.0, {1: 0.0}, {}), sample(0.5, {1: 0.3}, {1: 0.2}), sample(1.0, {1: 0.6}, {1: 0.5})]
    found = client_cpus_summary(samples, {0, 1}, (1,))
    assert found.foreign_peak_pct == pytest.approx(20.0) and found.foreign_mean_pct == pytest.approx(10.0)
    assert found.outside == (0,) and found.samples == 3
    assert client_cpus_summary(samples[:1], {1}, (1,)).outside is None  # one sample says nothing


def test_the_client_sampler_sees_where_a_live_process_runs():
    """A busy child pinned to one CPU, sampled every 0.1 s for half a second:
    its CPU is seen, and named outside when the client's CPUs are another."""
    cpu = min(os.sched_getaffinity(0))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nt = time.time()\nwhile time.time() - t < 3: pass",
        ]
    )
    try:
        time.sleep(0.2)
        own, other = ClientSampler(child.pid, (cpu,), 0.1), ClientSampler(child.pid, (cpu + 1,), 0.1)
        own.start()
        other.start()
        time.sleep(0.6)
        own.finish()
        other.finish()
    finally:
        child.kill()
        child.wait()
    seen, elsewhere = own.summary(), other.summary()
    assert seen.outside == () and seen.samples >= 4 and seen.foreign_mean_pct is not None
    assert elsewhere.outside == (cpu,)


def test_the_load_generator_writes_the_prompt_lengths_it_sampled(tmp_path, monkeypatch):
    """vllm bench serve puts the server's streamed prompt_tokens in its
    result's input_lens; omni's wrapper keeps the dataset's own lengths."""
    serve = types.ModuleType("vllm.benchmarks.serve")
    serve.get_samples = lambda args, tokenizer: [SimpleNamespace(prompt_len=n) for n in (128, 131, 127)]
    benchmarks = types.ModuleType("vllm.benchmarks")
    benchmarks.serve = serve
    vllm = types.ModuleType("vllm")
    vllm.benchmarks = benchmarks
    for name, module in (("vllm", vllm), ("vllm.benchmarks", benchmarks), ("vllm.benchmarks.serve", serve)):
        monkeypatch.setitem(sys.modules, name, module)
    path = tmp_path / "level-c=1.prompt_lens.json"
    bench_serve.record_prompt_lens(str(path))
    assert [r.prompt_len for r in serve.get_samples(None, None)] == [128, 131, 127]
    assert json.loads(path.read_text()) == [128, 131, 127] and read_prompt_lens(path) == [128, 131, 127]
    assert read_prompt_lens(tmp_path / "missing.json") is None
    (tmp_path / "torn.json").write_text("[128, 13")
    assert read_prompt_lens(tmp_path / "torn.json") is None
    flag = bench_serve.PROMPT_LENS_FLAG
    assert bench_serve.take_option(["--a", flag, "/p", "--b"], flag) == (["--a", "--b"], "/p")
    assert bench_serve.take_option([f"{flag}=/p", "--b"], flag) == (["--b"], "/p")
    assert bench_serve.take_option(["--b"], flag) == (["--b"], None)


def test_the_client_is_asked_for_the_window_and_its_prompt_lengths(tmp_path):
    arm = {"name": "s", "engine": "vllm", "model": "tiny-llama", "batch_size": 4}
    arm["load"] = {"concurrency": [8], "rate": [2], "requests": 16, "slo": SLO}
    (arm,) = validate_sweep({"name": "serve", "slots": {"cores": 1, "client_cores": 1}, "arms": [arm]}).arms
    assert arm.load.min_duration_s == 10.0
    res = SimpleNamespace(client_python="python", tokenizer_path="/t")
    item = SimpleNamespace(arm=arm, pass_index=0)
    result = tmp_path / "level-c=8.json"
    argv = client_argv(item, res, Level("concurrency", 8), "http://h:1", result)
    assert argv[argv.index("--num-prompts") + 1] == str(16 + 2 * 8)
    assert argv[argv.index(bench_serve.PROMPT_LENS_FLAG) + 1] == str(tmp_path / "level-c=8.prompt_lens.json")
    assert prompt_lens_path(result).name == "level-c=8.prompt_lens.json"
    again = client_argv(item, res, Level("concurrency", 8), "http://h:1", result, requests=50)
    assert again[again.index("--num-prompts") + 1] == str(50 + 2 * 8)
    rate = client_argv(item, res, Level("rate", 2.0), "http://h:1", tmp_path / "level-r=2.json")
    assert rate[rate.index("--num-prompts") + 1] == str(20 + 2 * 4)  # 2/s x 10 s, and the edges


def test_the_smoke_spec_keeps_its_levels_short():
    spec = load_spec(REPO / "arms" / "serve-smoke.yaml")
    assert {arm.load.min_duration_s for arm in spec.sweep.arms} == {0.0}


def test_a_rate_sent_before_anything_completed_is_saturated_and_not_run_again():
    """400 requests/s to a server of 4 sequences, 1 s each: all 56 are sent
    before the first completes, the window is empty, and the level's whole
    arrivals and completions say it did not hold the rate; a second run
    with more requests would only grow its queue."""
    load = {"requests": 48, "min_duration_s": 0.0, "slo": SLO}
    level = Level("rate", 400.0)
    record, _ = record_of(level, open_loop(56, 400.0, 1.0, 4, np.random.default_rng(5)))
    assert record["window_s"] is None and "saturated" in record["flags"] and "short_window" in record["flags"]
    assert record["achieved_rate"] < 0.1 * record["sent_rate"]
    assert extended_requests(record, load) is None
    assert record["slo_verdict"] == "not_met"  # saturated however short: the queue only grew
