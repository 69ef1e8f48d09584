"""Serving arms without a server: the spec, the client's CPUs, the load
generator's flags, what a level stores and flags, and capacity under the SLO."""

import math

import numpy as np
import pytest

from omni.cpulist import format_cpulist
from omni.errors import OmniError, SpecError
from omni.host.topology import allocate_slots, read_topology
from omni.serving.levels import (
    Level,
    arm_levels,
    client_flags,
    level_order,
    level_record,
    reconcile_output_tokens,
    request_records,
)
from omni.serving.server_metrics import kv_bytes_per_token, metrics_summary, parse_metrics, served_kv_tokens
from omni.serving.slo import Capacity, run_capacity, slo_margin, slo_verdict
from omni.spec import validate_sweep
from omni.spec.arm import LoadRequest
from omni.stats.quantiles import upper_rank
from tests.conftest import xeon_8480c_2s
from tests.traces import trace

SLO = {"ttft_ms": 2000.0, "tpot_ms": 100.0, "percentile": 99}
NO_CLIENT_LOAD = {"client_cpu_pct": 20.0, "client_thread_pct": 30.0}


def serving_spec(**slots):
    arm = {"name": "s", "engine": "vllm", "model": "tiny-llama", "load": {"concurrency": [4, 1]}}
    return {"name": "serve", "slots": slots, "arms": [arm]}


def test_a_serving_arm_gets_levels_ascending_and_a_stated_slo():
    sweep = validate_sweep(serving_spec(cores=1, client_cores=1))
    load = sweep.arms[0].load
    assert load.concurrency == [1, 4] and load.rate == []
    assert (load.slo.ttft_ms, load.slo.tpot_ms, load.slo.percentile) == (2000.0, 100.0, 99)
    assert load.requests == 299  # the default request count bounds the default percentile at 95 %
    assert [lv.key for lv in arm_levels(load.model_dump())] == ["c=1", "c=4"]


@pytest.mark.parametrize(
    "slots, arm_extra, message",
    [
        ({"cores": 1}, {}, "needs CPUs for its load generator"),
        ({"cpus": "0-1", "client_cpus": "1"}, {}, r"would share CPU\(s\) 1 with the server"),
        ({"cpus": "0", "client_cores": 1}, {}, "name the load generator's too"),
        ({"cores": 1, "client_cores": 1}, {"engine": "synthetic", "model": None}, "has no server"),
        ({"cores": 1, "client_cores": 1}, {"profile": {"steps": 4}}, "not profiled"),
        ({"cores": 1, "client_cores": 1}, {"load": {"concurrency": []}}, "name at least one level"),
        ({"cores": 1, "client_cores": 1}, {"load": {"rate": [0]}}, "> 0"),
    ],
)
def test_bad_serving_specs_are_refused_before_anything_runs(slots, arm_extra, message):
    spec = serving_spec(**slots)
    spec["arms"][0].update(arm_extra)
    with pytest.raises(SpecError, match=message):
        validate_sweep(spec)


def test_client_cores_are_whole_cores_of_the_slot_node_apart_from_the_server(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    slots = allocate_slots(topo, cores=4, client_cores=2)
    first = slots[0]
    assert format_cpulist(first.cpus) == "0-3" and first.siblings == (112, 113, 114, 115)
    assert format_cpulist(first.client) == "4-5,116-117" and first.client_mems == (0,)
    assert slots[1].node == 1 and format_cpulist(slots[1].client) == "60-61,172-173"
    assert set(first.owned) >= set(first.client)  # busy-checked and locked with the slot
    for a in slots:
        for b in slots:
            assert a is b or not set(a.owned) & set(b.owned)


def test_an_explicit_client_on_a_sibling_of_the_server_is_refused(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    with pytest.raises(OmniError, match="shares physical cores with the server"):
        allocate_slots(topo, cpus=[[0, 1]], client_cpus=[[112]])
    ok = allocate_slots(topo, cpus=[[0, 1]], client_cpus=[[2]])[0]
    assert ok.client == (2, 114)


def test_levels_run_in_a_seeded_order_per_run():
    levels = [Level("concurrency", c) for c in (1, 2, 4, 8)]
    assert level_order(levels, 7, "run-a") == level_order(levels, 7, "run-a")
    orders = {tuple(lv.key for lv in level_order(levels, 7, f"run-{i}")) for i in range(12)}
    assert len(orders) > 3  # not one fixed order: a level's place in a server's life varies
    assert sorted(level_order(levels, 7, "run-a"), key=lambda lv: lv.value) == levels


def test_client_flags_closed_and_open_loop():
    load = {"range_ratio": 0.1, "requests": 16, "warmup": 2, "seed": 3, "burstiness": 1.0, "slo": SLO}
    common = {"prompt_len": 128, "max_tokens": 64, "model": "m", "tokenizer": "/t", "base_url": "http://h:1"}
    closed = client_flags(Level("concurrency", 4), load, **common)
    assert closed[closed.index("--max-concurrency") + 1] == "4"
    assert closed[closed.index("--request-rate") + 1] == "inf"
    assert "--ignore-eos" in closed and "--save-detailed" in closed
    assert closed[closed.index("--goodput") + 1 : closed.index("--goodput") + 3] == ["ttft:2000", "tpot:100"]
    opened = client_flags(Level("rate", 0.5), load, **common)
    assert opened[opened.index("--request-rate") + 1] == "0.5" and "--max-concurrency" not in opened


def detailed(n=8, ttft=0.05, per_token=0.01, out=16, gap=0.5, errors=(), duration=None):
    """A --save-detailed result: requests sent every ``gap`` s, each ``ttft``
    (one for all, or one per request) then ``out - 1`` tokens ``per_token`` apart."""
    ttfts = list(ttft) if isinstance(ttft, (list, tuple)) else [ttft] * n
    latencies = [t + per_token * (out - 1) for t in ttfts]
    starts = [100.0 + gap * i for i in range(n)]
    return {
        "duration": duration if duration is not None else gap * (n - 1) + max(latencies),
        "errors": ["boom" if i in errors else "" for i in range(n)],
        "ttfts": [0.0 if i in errors else ttfts[i] for i in range(n)],
        "latencies": [0.0 if i in errors else latencies[i] for i in range(n)],
        "output_lens": [0 if i in errors else out for i in range(n)],
        "input_lens": [128] * n,
        "itls": [[] if i in errors else [per_token] * (out - 1) for i in range(n)],
        "start_times": starts,
        "queue_times": [0.0] * n,
        "max_concurrent_requests": 1,
    }


def fifo(n, gap, service, out=16):
    """Open loop: a request every ``gap`` s to a server that serves one at a
    time, ``service`` s each, in order: its latency is its wait and its service."""
    starts, ends = [gap * i for i in range(n)], []
    for s in starts:
        ends.append(max(s, ends[-1] if ends else 0.0) + service)
    return trace(starts, [e - s for s, e in zip(starts, ends)], out=out)


def test_a_level_computes_its_figures_from_its_requests():
    level = Level("concurrency", 1)
    reqs = request_records(level, detailed())
    assert len(reqs) == 8 and all(r["ok"] for r in reqs)
    assert reqs[0]["tpot_ms"] == pytest.approx(10.0) and reqs[0]["ttft_ms"] == pytest.approx(50.0)
    assert reqs[3]["start_s"] == pytest.approx(1.5)
    record = level_record(level, 0, detailed(), reqs, SLO, NO_CLIENT_LOAD)
    # every p99 within the limits, but 6 requests bound no p99: not established, never met on the point alone
    assert record["flags"] == [] and record["slo_verdict"] == "not_established" and record["slo_met"] is None
    assert record["tpot_p99_ms"] == pytest.approx(10.0) and record["itl_p50_ms"] == pytest.approx(10.0)
    # one in flight: the window (first completion at 0.2 s to the last start at 3.5 s) leaves out the first and last
    assert (record["window_s"], record["window_requests"], record["excluded_requests"]) == (pytest.approx(3.3), 6, 2)
    assert [r["in_window"] for r in reqs] == [False] + [True] * 6 + [False]
    assert (record["ttft_samples"], record["tpot_samples"], record["itl_samples"]) == (6, 6, 6 * 15)
    assert record["tpot_p99_upper95_ms"] is None and record["tpot_p50_upper95_ms"] == pytest.approx(10.0)
    assert record["output_tok_s"] == pytest.approx(6 * 16 / 3.3) and record["requests"] == 8
    assert record["goodput_req_s"] == pytest.approx(record["request_s"])
    strict = {**SLO, "tpot_ms": 5.0}
    assert level_record(level, 0, detailed(), reqs, strict, NO_CLIENT_LOAD)["goodput_req_s"] == 0.0


def test_failed_requests_and_a_busy_client_leave_a_level_unjudged():
    level = Level("concurrency", 2)
    data = detailed(errors=(3,))
    reqs = request_records(level, data)
    assert reqs[3]["ok"] is False and reqs[3]["error"] == "boom" and reqs[3]["ttft_ms"] is None
    record = level_record(level, 0, data, reqs, SLO, NO_CLIENT_LOAD)
    assert record["failed"] == 1 and record["flags"] == ["failed_requests"] and record["slo_met"] is None
    busy = level_record(level, 0, detailed(), request_records(level, detailed()), SLO, {"client_thread_pct": 97.0})
    assert busy["flags"] == ["client_bound"] and busy["slo_met"] is None


def test_a_level_whose_client_cpu_was_not_seen_is_flagged_not_taken_as_idle():
    """Missing start/end marks of the load generator (its output changed, or it
    died early) leave its CPU unknown: the level is not judged, as a busy one."""
    level = Level("concurrency", 2)
    unseen = level_record(
        level,
        0,
        detailed(),
        request_records(level, detailed()),
        SLO,
        {"client_cpu_pct": None, "client_thread_pct": None},
    )
    assert unseen["flags"] == ["client_unmeasured"] and unseen["slo_verdict"] is None
    one = level_record(level, 0, detailed(), request_records(level, detailed()), SLO, {"client_thread_pct": 12.0})
    assert one["flags"] == []


def test_a_rate_the_server_cannot_hold_is_saturated_and_fails_its_slo():
    level = Level("rate", 2.0)
    held = detailed(gap=0.5)
    assert level_record(level, 0, held, request_records(level, held), SLO, NO_CLIENT_LOAD)["flags"] == []
    # sent at 2 req/s to a server that finishes one every 0.8 s, one at a time: the queue grows
    queued = fifo(n=20, gap=0.5, service=0.8)
    record = level_record(level, 0, queued, request_records(level, queued), SLO, NO_CLIENT_LOAD)
    assert record["sent_rate"] == pytest.approx(2.0)
    assert record["achieved_rate"] == pytest.approx(1 / 0.8, rel=0.1)
    assert record["achieved_rate"] < 0.9 * record["sent_rate"]
    assert record["flags"] == ["saturated"] and record["slo_met"] is False


def test_a_level_meets_its_slo_only_on_the_upper_bound_its_requests_give():
    """299 requests bound the p99 at 95 % by their maximum: the level meets
    the SLO when the slowest request is within it. The p99 of the same 299
    within the limit with the slowest over it is not established; a p99 over
    the limit is not met, whatever the count."""
    level = Level("concurrency", 1)
    ttfts = [0.05] * 150 + [0.09] + [0.05] * 150  # one slow first token: the point p99 ~51 ms, the bound 90 ms
    data = detailed(n=301, ttft=ttfts, gap=0.25)  # one in flight: 299 in the window, the first and last out
    reqs = request_records(level, data)
    record = level_record(level, 0, data, reqs, {**SLO, "ttft_ms": 100.0}, NO_CLIENT_LOAD)
    assert record["ttft_p99_ms"] < 60 and record["ttft_p99_upper95_ms"] == pytest.approx(90.0)
    assert record["slo_verdict"] == "met" and record["slo_met"] is True
    tight = level_record(level, 0, data, reqs, {**SLO, "ttft_ms": 80.0}, NO_CLIENT_LOAD)
    assert tight["slo_verdict"] == "not_established" and tight["slo_met"] is None
    over = level_record(level, 0, data, reqs, {**SLO, "ttft_ms": 40.0}, NO_CLIENT_LOAD)
    assert over["slo_verdict"] == "not_met" and over["slo_met"] is False
    few = level_record(level, 0, detailed(n=34), request_records(level, detailed(n=34)), SLO, NO_CLIENT_LOAD)
    assert few["window_requests"] == 32
    assert few["slo_verdict"] == "not_established" and slo_margin(few, SLO, upper=True) is None
    # the row says why: 32 requests bound at most p91.06, 299 p99.003
    assert few["slo_reach"] == pytest.approx(91.06, abs=0.005)
    assert record["slo_reach"] == pytest.approx(99.003, abs=5e-4)
    assert slo_verdict({**few, "ttft_p99_ms": 3000.0}, SLO) == "not_met"  # over the limit needs no bound


def levels_at(kind, margins, bounds=None):
    """Level records whose p99 TPOT is ``margin`` x the SLO's, and its 95 %
    upper bound ``bound`` x (the margin itself when not given; None: too few
    requests to bound it)."""
    records = []
    for i, (value, margin) in enumerate(margins):
        bound = margin if bounds is None else bounds[i]
        record = {
            "load_kind": kind,
            "load_value": value,
            "ttft_p99_ms": 10.0,
            "tpot_p99_ms": margin * SLO["tpot_ms"],
            "ttft_p99_upper95_ms": 10.0 if bound is not None else None,
            "tpot_p99_upper95_ms": bound * SLO["tpot_ms"] if bound is not None else None,
            "tpot_samples": 299 if bound is not None else 32,
            "flags": [],
        }
        record["slo_verdict"] = slo_verdict(record, SLO)
        records.append(record)
    return records


def test_capacity_interpolates_the_log_margin_between_the_levels_around_the_slo():
    records = levels_at("concurrency", [(1, 0.25), (2, 0.5), (4, 2.0), (8, 4.0)])
    capacity = run_capacity(records, "concurrency", SLO)
    # log margin goes from log 0.5 at 2 to log 2 at 4: it crosses 0 half way
    assert capacity.value == pytest.approx(3.0) and capacity.bound is None
    assert slo_margin(records[2], SLO) == pytest.approx(2.0)
    assert run_capacity(levels_at("concurrency", [(1, 0.5), (2, 0.9)]), "concurrency", SLO).bound == "above"
    assert run_capacity(levels_at("concurrency", [(1, 1.5), (2, 3.0)]), "concurrency", SLO).bound == "below"
    unjudged = levels_at("rate", [(1, 0.5), (2, 0.8), (4, 2.0)])
    unjudged[1].update(flags=["client_bound"], slo_verdict=None)
    assert run_capacity(unjudged, "rate", SLO).bound == "unknown"
    assert run_capacity(records, "rate", SLO) is None


def test_a_saturated_level_bounds_capacity_at_the_last_level_held():
    records = levels_at("rate", [(1, 0.5), (2, 0.6)])
    records[1]["flags"] = ["saturated"]
    records[1]["slo_verdict"] = slo_verdict(records[1], SLO)
    assert records[1]["slo_verdict"] == "not_met" and run_capacity(records, "rate", SLO).value == 1


def test_capacity_is_where_the_upper_bound_crosses_the_slo_and_not_established_without_one():
    # the point estimates meet the SLO at both levels; the bound crosses it between them
    records = levels_at("concurrency", [(1, 0.5), (2, 0.9)], bounds=[0.8, 1.6])
    assert [r["slo_verdict"] for r in records] == ["met", "not_established"]
    # log bound from log 0.8 at 1 to log 1.6 at 2: it reaches 0 a third of the way
    assert run_capacity(records, "concurrency", SLO).value == pytest.approx(1 + math.log(1.25) / math.log(2))
    # too few requests a level to bound the p99: no capacity is claimed from the point estimates ...
    few = levels_at("concurrency", [(1, 0.25), (2, 0.5), (4, 2.0)], bounds=[None, None, None])
    assert [r["slo_verdict"] for r in few] == ["not_established", "not_established", "not_met"]
    assert run_capacity(few, "concurrency", SLO) == Capacity("concurrency", None, "not_established")
    # ... but a lowest level over the limit is below the levels tried at any count
    assert run_capacity(levels_at("rate", [(1, 2.0)], bounds=[None]), "rate", SLO).bound == "below"


PROMETHEUS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 100.0
"""


def test_server_metrics_keep_the_serving_gauges_and_summarize_a_level():
    first = parse_metrics(PROMETHEUS)
    assert first == {
        "vllm:num_requests_running": 3.0,
        "vllm:kv_cache_usage_perc": 0.25,
        "vllm:num_preemptions_total": 2.0,
    }
    later = {**first, "vllm:num_requests_running": 1.0, "vllm:num_preemptions_total": 5.0}
    summary = metrics_summary([(0.0, first), (1.0, later)])
    assert summary["vllm:num_requests_running"] == {"mean": 2.0, "max": 3.0, "change": -2.0, "n": 2}
    assert summary["vllm:num_preemptions_total"]["change"] == 3.0
    assert not math.isnan(summary["vllm:kv_cache_usage_perc"]["mean"])


def test_a_server_kv_pool_is_read_from_its_own_log_lines():
    vllm = "(EngineCore pid=1) INFO [kv_cache_utils.py:2327] CPU KV cache size: 1,152 tokens, Maximum concurrency"
    llama = "0.00.203.279 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 256, kv_unified = 'false'"
    assert served_kv_tokens([vllm]) == 1152 and served_kv_tokens([llama]) == 1024
    assert served_kv_tokens(["no such line"]) is None
    tiny = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256, "num_hidden_layers": 4}
    assert kv_bytes_per_token(tiny) == 2048  # 4 layers x 2 KV heads x 64 x K and V x 2 bytes
    one_b = {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 16}
    assert kv_bytes_per_token(one_b) == 32768


def test_output_tokens_the_client_miscounted_are_recounted_from_the_server_or_flagged():
    level = Level("concurrency", 1)
    data = detailed(n=4, out=16)
    data["output_lens"] = [16, 15, 16, 14]  # re-tokenized text: two requests came out short
    data["itls"] = [[0.01] * 16 for _ in range(4)]  # 15 gaps and the closing chunk's
    server = {"llamacpp:tokens_predicted_total": {"change": (4 + 2) * 16}}  # every request 16, the warm-up's too
    reqs = request_records(level, data)
    assert reconcile_output_tokens(reqs, server, 2, 16, 0.0) == "recounted"
    assert [r["output_tokens"] for r in reqs] == [16] * 4 and all(len(r["itl_ms"]) == 15 for r in reqs)
    assert reqs[1]["tpot_ms"] == pytest.approx(10.0)
    record = level_record(level, 0, data, reqs, SLO, NO_CLIENT_LOAD, server, 2, "recounted")
    assert record["flags"] == [] and record["output_tokens_check"] == "recounted"
    reqs = request_records(level, data)
    assert reconcile_output_tokens(reqs, server, 2, 16, 0.2) == "mismatch"  # lengths drawn: no count to trust
    flagged = level_record(level, 0, data, reqs, SLO, NO_CLIENT_LOAD, server, 2, "mismatch")
    assert flagged["flags"] == ["output_tokens_mismatch"]
    agree = {"vllm:generation_tokens_total": {"change": 6 * 16}}
    assert reconcile_output_tokens(request_records(level, detailed(n=4, out=16)), agree, 2, 16, 0.0) is None


@pytest.mark.parametrize("percentile", [50, 90, 99])
def test_a_level_left_without_requests_gets_as_many_as_bound_its_slos_percentile(percentile):
    """Fewer would leave every default level "not established"; more is not needed."""
    arm = {"name": "s", "engine": "vllm", "model": "tiny-llama"}
    arm["load"] = {"concurrency": [1], "slo": {"percentile": percentile}}
    n = validate_sweep({"name": "serve", "slots": {"cores": 1, "client_cores": 1}, "arms": [arm]}).arms[0].load.requests
    q = percentile / 100
    assert upper_rank(n, q) is not None and upper_rank(n - 1, q) is None
    arm["load"]["requests"] = 16  # a count given stays, and what it cannot bound is said per level
    assert (
        validate_sweep({"name": "serve", "slots": {"cores": 1, "client_cores": 1}, "arms": [arm]}).arms[0].load.requests
        == 16
    )


def test_every_pass_draws_its_own_traffic_and_the_arms_of_a_pass_share_it(tmp_path):
    """The load generator's seed follows the pass, not the arm's fixed
    load.seed alone: passes replay different prompts and arrivals, and two
    arms of one pass the same ones."""
    from types import SimpleNamespace

    from omni.serving.levels import workload_seed
    from omni.serving.run import client_argv

    arms = [
        {"name": name, "engine": "vllm", "model": "tiny-llama", "load": {"rate": [1], "requests": 8, "seed": 5}}
        for name in ("a", "b")
    ]
    sweep = validate_sweep({"name": "serve", "slots": {"cores": 1, "client_cores": 1}, "arms": arms})
    res = SimpleNamespace(client_python="python", tokenizer_path="/t")

    def seed(arm, pass_index):
        argv = client_argv(
            SimpleNamespace(arm=arm, pass_index=pass_index), res, Level("rate", 1.0), "http://h:1", tmp_path / "r.json"
        )
        return int(argv[argv.index("--seed") + 1])

    a, b = (arm for arm in sweep.arms if arm.name in ("a", "b"))
    per_pass = [seed(a, p) for p in range(50)]
    assert len(set(per_pass)) == 50 and per_pass == [workload_seed(5, p) for p in range(50)]
    assert [seed(b, p) for p in range(50)] == per_pass
    assert all(0 <= s < 2**31 for s in per_pass) and workload_seed(6, 0) != workload_seed(5, 0)


def test_a_llama_server_level_gives_each_request_a_connection_of_its_own(tmp_path, monkeypatch):
    """llama-server closes every streamed response's connection: the load
    generator must not reuse one (bench_serve's --close-connections); vLLM's
    server keeps them alive, and its client reuses them as vllm bench serve does."""
    import asyncio
    from types import SimpleNamespace

    import aiohttp

    from omni.engines import bench_serve
    from omni.serving.run import client_argv

    res = SimpleNamespace(client_python="python", tokenizer_path="/t")
    for engine, closes in (("llamacpp", True), ("vllm", False)):
        arm = SimpleNamespace(
            engine=engine,
            name="s",
            prompt_len=8,
            max_tokens=4,
            batch_size=1,
            load=LoadRequest(concurrency=[1], requests=4),
        )
        argv = client_argv(
            SimpleNamespace(arm=arm, pass_index=0), res, Level("concurrency", 1), "http://h:1", tmp_path / "r"
        )
        assert (bench_serve.CLOSE_FLAG in argv) is closes

    monkeypatch.setattr(aiohttp, "TCPConnector", aiohttp.TCPConnector)  # restored after the test

    async def made_as_vllm_makes_it():
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, force_close=False)
        await connector.close()
        return connector.force_close

    assert asyncio.run(made_as_vllm_makes_it()) is False
    bench_serve.close_every_connection()
    assert asyncio.run(made_as_vllm_makes_it()) is True


@pytest.mark.parametrize("n, burstiness", [(5, 1.0), (29, 1.0), (299, 1.0), (50, 0.5), (50, 3.0)])
def test_a_client_that_sends_on_time_is_flagged_for_its_rate_at_most_as_often_as_stated(n, burstiness):
    """vllm bench serve's arrivals (gamma gaps of shape ``burstiness``) drawn
    20,000 times: the sent rate alone leaves the band at most RATE_DRAW_ALPHA
    of the time (the band is exact; seeded, so the test cannot flake); a
    client that lags by a third is flagged whenever the requests are enough
    to tell (299: every time)."""
    from omni.serving.levels import RATE_DRAW_ALPHA, rate_sent

    rng = np.random.default_rng(n * 10 + int(burstiness * 10))
    asked, draws = 2.0, 20_000
    gaps = rng.gamma(burstiness, 1 / (asked * burstiness), size=(draws, n - 1))
    sent = (n - 1) / gaps.sum(axis=1)
    flagged = sum(not rate_sent(s, asked, n, burstiness) for s in sent)
    assert flagged <= 2 * RATE_DRAW_ALPHA * draws  # expected <= 20; 40 is > 4 sd above
    if n == 299:
        assert all(not rate_sent(s * 2 / 3, asked, n, burstiness) for s in sent[:1000])
