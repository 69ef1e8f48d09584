"""Serving arms end to end, as a user runs them: ``omni sweep
arms/serve-smoke.yaml`` (vLLM's OpenAI server and llama-server, server on one
core and ``vllm bench serve`` on the other, two concurrencies, two passes),
then the faults a serving run must survive, on llama-server (it starts in a
second). One sweep is shared by the tests that read it."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from omni.run.reaper import find_run_processes
from omni.spec import load_spec
from tests.conftest import REPO, omni

SMOKE = REPO / "arms" / "serve-smoke.yaml"


@pytest.fixture(scope="module")
def serve_smoke(tmp_path_factory):
    results = tmp_path_factory.mktemp("serve-smoke") / "results"
    done = omni("sweep", str(SMOKE), "--results", str(results), timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return results, done.stdout


@pytest.mark.timeout(1600)
def test_serve_smoke_writes_levels_and_requests_pandas_reads(serve_smoke):
    results, _ = serve_smoke
    runs = pd.read_parquet(results / "runs")
    assert len(runs) == 4 and set(runs["status"]) == {"ok"}, runs[["arm", "status", "error"]].to_string()
    assert all(list(c) == [1] for c in runs["client_cpus"]) and all(list(c) == [0] for c in runs["cpus"])
    assert runs["binding_ok"].all() and (runs["load_levels"] == 2).all()
    assert runs["load_s"].gt(0).all() and runs["rss_anon_steady_mb"].gt(0).all()
    levels = pd.read_parquet(results / "levels")
    assert len(levels) == 8 and set(levels["level"]) == {"c=1", "c=8"}
    assert levels["output_tok_s"].gt(0).all()
    # llama-server closes some reused connections above its slots ("Can not write request body":
    # docs/serving.md): such a level is flagged and not judged; every other level is clean
    failed = levels[levels["failed"] > 0]
    assert set(failed["arm"]) <= {"llamacpp-serve"} and set(failed["level"]) <= {"c=8"}, failed
    assert all("failed_requests" in f for f in failed["flags"])
    clean = levels[levels["failed"] == 0]
    assert clean["flags"].map(len).eq(0).all(), clean[["arm", "level", "flags"]]
    # both servers counted the prompt tokens the client sent (the factory's tokenizers agree)
    assert (clean["server_prompt_tokens"] == clean["client_prompt_tokens"]).all()
    # 8 in flight on a server of 4 sequences: half of them wait for a sequence, TTFT grows
    by = levels.groupby(["arm", "level"])["ttft_p50_ms"].median()
    for arm in ("vllm-serve", "llamacpp-serve"):
        assert by[(arm, "c=8")] > by[(arm, "c=1")]
    assert set(levels.groupby("run_id")["order"].apply(sorted).map(tuple)) == {(0, 1)}
    # the KV in use under load, scraped: vLLM sets its running and KV gauges from one snapshot, so a
    # scrape that saw a request running saw its KV; a short level may fall between scrapes, a run's
    # 1-in-flight level (several seconds) does not
    vllm = levels[levels["arm"] == "vllm-serve"]
    scraped = [json.loads(m) for m in vllm["server_metrics"]]
    for metrics in scraped:
        running, kv = metrics["vllm:num_requests_running"], metrics["vllm:kv_cache_usage_perc"]
        assert kv["n"] == running["n"] >= 2 and (running["max"] == 0 or kv["max"] > 0), metrics
    seen = {
        (run, level): m["vllm:kv_cache_usage_perc"]["max"]
        for run, level, m in zip(vllm["run_id"], vllm["level"], scraped)
    }
    assert all(seen[(run, "c=1")] > 0 for run in set(vllm["run_id"])), seen
    # the steady window: 16 measured a level, the client sent 2 x c more (c=1: 18, c=8: 32), failures all counted
    assert (levels["window_requests"] >= 16).all() and (
        levels["requests"] == levels["level"].map({"c=1": 18, "c=8": 32})
    ).all()
    assert (levels["window_s"] > 0).all() and not levels["extended"].any()  # min_duration_s: 0
    requests = pd.read_parquet(results / "requests")
    assert len(requests) == 4 * (18 + 32) and requests["ok"].sum() >= len(requests) - failed["failed"].sum()
    assert requests["in_window"].sum() == levels["window_requests"].sum()
    assert requests.loc[~requests["ok"], "in_window"].all()
    done = requests[requests["ok"]]
    assert (done["input_tokens"] == 128).all()
    bad = requests.loc[~requests["ok"], "error"]
    assert bad.str.contains("Can not write request body|Cannot write to closing transport").all(), bad.tolist()
    # --ignore-eos: every answer max_tokens long (llama-server's recounted from its own counter)
    clean_runs = set(clean["run_id"]) - set(failed["run_id"])
    assert (done.loc[done["run_id"].isin(clean_runs), "output_tokens"] == 64).all()
    assert (done["tpot_ms"] > 0).all() and (done["ttft_ms"] > 0).all()


@pytest.mark.timeout(1600)
def test_serve_smoke_prints_level_verdicts_capacity_and_draws_the_curve(serve_smoke):
    results, out = serve_smoke
    assert "Serving levels" in out and "| c=8 | `llamacpp-serve` |" in out, out[-3000:]
    assert "Capacity under the SLO" in out and "`vllm-serve` concurrency" in out
    assert "SLO: TTFT 100 ms and TPOT 100 ms at p50" in out
    runs = pd.read_parquet(results / "runs")
    llama = runs[runs["arm"] == "llamacpp-serve"]
    assert llama["engine_commit"].notna().all() and llama["engine_version"].str.startswith("llama-server").all()
    (html,) = list(results.glob("summaries/*.html")) or list(results.rglob("*.html"))
    page = html.read_text()
    assert 'id="serving"' in page and 'id="curve-vllm-serve' in page and 'id="curve-llamacpp-serve' in page


def llama_spec(tmp_path: Path, name: str, load: dict, slots=None) -> Path:
    spec = yaml.safe_load(SMOKE.read_text())
    arm = next(a for a in spec["arms"] if a["name"] == "llamacpp-serve")
    spec.update(name=name, passes=1, arms=[{**arm, "load": load}])
    spec.pop("baseline")
    if slots:
        spec["slots"] = slots
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    load_spec(path)  # a valid spec
    return path


@pytest.mark.timeout(600)
def test_a_rate_the_server_cannot_hold_is_saturated_and_not_judged(tmp_path):
    spec = llama_spec(tmp_path, "saturate", {"rate": [400], "requests": 48, "warmup": 1, "min_duration_s": 0})
    results = tmp_path / "results"
    done = omni("sweep", str(spec), "--results", str(results), timeout=500)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (level,) = pd.read_parquet(results / "levels").to_dict("records")
    assert "saturated" in list(level["flags"]), level  # (and failed_requests, if llama-server closed a connection)
    assert level["achieved_rate"] < 0.9 * level["sent_rate"] and level["asked_rate"] == 400
    assert not level["slo_met"]
    assert "1 run(s) saturated" in done.stdout


@pytest.mark.timeout(900)
def test_a_search_finds_llama_servers_capacity_and_keeps_a_run_beyond_its_range(tmp_path):
    """Two searched arms on llama-server, 2 passes: one under the tight SLO
    up to 16 in flight (its capacity bracketed between levels the search
    chose), one whose SLO every level meets up to 2 in flight (each run
    "above 2", kept in the arm's median as that bound)."""
    spec = yaml.safe_load(llama_spec(tmp_path, "search", {"concurrency": [1]}).read_text())
    (arm,) = spec["arms"]
    load = {"requests": 16, "warmup": 1, "min_duration_s": 0, "slo": {"ttft_ms": 100, "tpot_ms": 100, "percentile": 50}}
    tight = {**arm, "name": "tight", "load": {**load, "search": {"levels": 5, "max_concurrency": 16}}}
    loose_slo = {"ttft_ms": 60000, "tpot_ms": 60000, "percentile": 50}
    loose = {**arm, "name": "loose", "load": {**load, "slo": loose_slo, "search": {"max_concurrency": 2}}}
    spec.update(passes=2, arms=[tight, loose])
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(spec))))  # no YAML anchors for the shared params
    results = tmp_path / "results"
    done = omni("sweep", str(path), "--results", str(results), timeout=850)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = pd.read_parquet(results / "runs").set_index("run_id")
    assert set(runs["status"]) == {"ok"}, runs[["arm", "status", "error"]]
    levels = pd.read_parquet(results / "levels")
    assert levels["searched"].all()
    for run_id, mine in levels.groupby("run_id"):
        path_taken = mine.sort_values("order")["load_value"].tolist()
        arm = runs.loc[run_id, "arm"]
        if arm == "loose":
            assert path_taken == [1.0, 2.0]
            assert runs.loc[run_id, "capacity_concurrency_bound_at"] == 2.0
            assert json.loads(runs.loc[run_id, "capacity_bounds"]) == {"concurrency": "above"}
        else:
            assert path_taken[0] == 1.0 and len(path_taken) <= 5 and len(set(path_taken)) == len(path_taken)
            capacity = runs.loc[run_id, "capacity_concurrency"]
            bound = json.loads(runs.loc[run_id, "capacity_bounds"]).get("concurrency")
            met = mine.loc[mine["slo_verdict"] == "met", "load_value"]
            assert (bound is None and met.max() <= capacity <= 16) or bound in ("above", "below"), mine
    assert "`loose` concurrency: > 2 in flight" in done.stdout and "2 beyond the levels" in done.stdout


@pytest.mark.timeout(600)
def test_a_request_mix_on_llama_servers_chat_endpoint_with_its_prompt_cache(tmp_path):
    """arms/serve-mix.yaml's llama-server arm with its prompt cache on: a
    file of prompts sharing a 256-token system prompt, sent to the chat
    endpoint. Both sides count the same prompt tokens (the cached ones
    included), the cache served some, and no level is flagged."""
    mix = yaml.safe_load((REPO / "arms" / "serve-mix.yaml").read_text())
    arm = next(a for a in mix["arms"] if a["name"] == "llamacpp-chat-cached")
    arm["load"] = {**arm["load"], "prompts": str(REPO / "arms" / "serve-mix.jsonl"), "concurrency": [2]}
    arm["load"]["min_duration_s"] = 0
    spec = {**mix, "name": "mix", "passes": 1, "arms": [arm]}
    spec.pop("baseline")
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(spec))
    results = tmp_path / "results"
    done = omni("sweep", str(path), "--results", str(results), timeout=550)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = pd.read_parquet(results / "runs").to_dict("records")
    assert run["status"] == "ok", run["error"]
    assert "--cache-prompt" in run["command"] and "chat" in run["arm_json"]
    (level,) = pd.read_parquet(results / "levels").to_dict("records")
    assert list(level["flags"]) == [], level
    assert level["server_prompt_tokens"] == level["client_prompt_tokens"]
    metrics = json.loads(level["server_metrics"])
    assert metrics["llamacpp:prompt_tokens_cached_total"]["change"] > 0, metrics
    requests = pd.read_parquet(results / "requests")
    assert requests["ok"].all() and requests["input_tokens"].nunique() > 1  # lengths from the file, not one


def test_a_client_on_the_server_core_is_refused_before_anything_runs(tmp_path):
    spec = tmp_path / "same-core.yaml"
    data = yaml.safe_load(SMOKE.read_text())
    data["slots"] = {"cpus": "0", "client_cpus": "0"}
    spec.write_text(yaml.safe_dump(data))
    done = omni("sweep", str(spec), "--results", str(tmp_path / "results"))
    assert done.returncode == 2
    assert "would share CPU(s) 0 with the server it measures" in done.stderr + done.stdout
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.parquet"))


@pytest.mark.timeout(600)
def test_a_server_killed_mid_level_leaves_no_process_and_a_failed_run_naming_it(tmp_path):
    spec = llama_spec(tmp_path, "kill", {"concurrency": [1], "requests": 400, "warmup": 1})
    results = tmp_path / "results"
    killed = []

    def kill_server_mid_level():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            for log in results.glob("logs/sweep=*/*/client-c=1.log"):
                if "Starting main benchmark run" in log.read_text():
                    (run_dir,) = [log.parent]
                    pids = find_run_processes(run_dir.name)
                    servers = [p for p in pids if "llama-server" in _cmdline(p)]
                    for pid in servers:
                        os.kill(pid, signal.SIGKILL)
                        killed.append((run_dir.name, pid))
            time.sleep(0.2)

    killer = threading.Thread(target=kill_server_mid_level, daemon=True)
    killer.start()
    done = omni("sweep", str(spec), "--results", str(results), timeout=500)
    killer.join(timeout=5)
    assert killed, done.stdout[-2000:]
    (row,) = pd.read_parquet(results / "runs").to_dict("records")
    assert row["status"] == "failed" and "the server" in row["error"] and "SIGKILL" in row["error"], row["error"]
    assert "died during level c=1" in row["error"]
    assert find_run_processes(killed[0][0]) == set()  # neither the client nor anything else is left


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
