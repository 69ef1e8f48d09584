"""``omni`` as a user runs it: a real process, Prefect's ephemeral mode."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from omni.procfs import read_all
from omni.store import list_temp_files, load_runs
from tests.conftest import REPO

OMNI = [sys.executable, "-m", "omni.cli"]


def omni(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "COLUMNS": "200"}
    return subprocess.run([*OMNI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


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
    assert "node 0: cpus 0-55,112-167 (56 cores, 2 threads/core), memory 1.0 GiB" in done.stdout
    assert "node 1: cpus 56-111,168-223 (56 cores, 2 threads/core)" in done.stdout
    here = omni("topology", "--window", "0.1")
    assert here.returncode == 0 and "node 0: cpus" in here.stdout and "load mean" in here.stdout


def test_validate_prints_expanded_arms():
    done = omni("validate", "arms/smoke-synthetic.yaml")
    assert done.returncode == 0, done.stderr
    assert "small" in done.stdout and "large" in done.stdout


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
    "unknown-patch": ("name: x\narms:\n  - {name: a, engine: vllm, model: m, patches: [speedup]}\n", "explicit_kv_cache_memory"),
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


def engine_processes(marker: str, kind: bytes = b"omni.engines") -> list[int]:
    """Processes whose command line mentions ``marker`` and ``kind``."""
    return [pid for pid, cmdline in read_all("cmdline") if marker.encode() in cmdline and kind in cmdline]


@pytest.mark.slow
def test_sigkill_mid_sweep_leaves_nothing_behind_and_resume_runs_exactly_the_missing_runs(tmp_path):
    arms = [{"name": f"a{i}", "engine": "synthetic", "params": {"procs": 2, "mem_mb": 32, "load_s": 1.5}}
            for i in range(3)]  # fmt: skip
    spec = tmp_path / "slow.yaml"
    spec.write_text(yaml.safe_dump({"name": "slow", "passes": 3, "timeout_s": 60, "control": False, "arms": arms}))
    results = tmp_path / "results"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    servers_before = set(engine_processes("", b"prefect.server"))
    proc = subprocess.Popen(
        [*OMNI, "sweep", str(spec), "--results", str(results), "--force"], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((results / "runs").glob("*/*.parquet"))) < 2:
        time.sleep(0.1)
    assert proc.poll() is None, "sweep ended before we could kill it"
    while not engine_processes(str(results)) and time.monotonic() < deadline:
        time.sleep(0.05)  # kill it while an engine is running
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop = time.monotonic() + 15
    while engine_processes(str(results)) and time.monotonic() < stop:
        time.sleep(0.1)
    assert engine_processes(str(results)) == []
    while set(engine_processes("", b"prefect.server")) - servers_before and time.monotonic() < stop:
        time.sleep(0.1)
    assert set(engine_processes("", b"prefect.server")) - servers_before == set(), "Prefect server left behind"
    assert list_temp_files(results) == []
    frame = load_runs(results)
    assert 2 <= len(frame) < 9 and (frame["status"] == "ok").all()
    assert len(pd.read_parquet(results / "runs")) == len(frame)

    (sweep_dir,) = (results / "sweeps").iterdir()
    planned = set(json.loads((sweep_dir / "manifest.json").read_text())["run_ids"])
    before = set(frame["run_id"])
    spec.write_text(spec.read_text().replace("passes: 3", "passes: 4"))  # the sweep's own copy is used
    done = omni("sweep", "--resume", sweep_dir.name, "--results", str(results), "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    after = load_runs(results)
    assert len(planned) == 9 and set(after["run_id"]) == planned and len(after) == 9
    resumed = after[~after["run_id"].isin(before)]
    assert set(resumed["run_id"]) == planned - before
    assert resumed["prefect_flow_run_id"].nunique() == 1
    assert not set(resumed["prefect_flow_run_id"]) & set(frame["prefect_flow_run_id"])
    again = omni("sweep", "--resume", sweep_dir.name, "--results", str(results))
    assert again.returncode == 0 and "nothing to resume" in again.stdout
    changed = omni("sweep", str(spec), "--resume", sweep_dir.name, "--results", str(results))
    assert changed.returncode == 2 and "has changed since sweep" in changed.stderr


PREPARE_COUNTER = """\
import sys
import omni.sweep
import flows.sweep
from omni import cli

calls = []
real = omni.sweep.prepare_sweep

def counted(*args, **kwargs):
    calls.append(kwargs.get("sweep_id"))
    return real(*args, **kwargs)

omni.sweep.prepare_sweep = flows.sweep.prepare_sweep = counted
sys.argv = ["omni", *sys.argv[1:]]
try:
    cli.main()
except SystemExit as exit:
    print("EXIT", exit.code)
print("PREPARED", len(calls))
"""


@pytest.mark.slow
def test_omni_sweep_prepares_once(tmp_path):
    """The CLI prepares (a bad spec is one line before Prefect starts) and the
    flow, in the same process, runs what it was handed: one preparation."""
    results = tmp_path / "results"
    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump({"name": "one", "passes": 1, "arms": [{"name": "a", "engine": "synthetic"}]}))
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    done = subprocess.run([sys.executable, "-c", PREPARE_COUNTER, "sweep", str(spec), "--results", str(results), "--force"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)  # fmt: skip
    assert "PREPARED 1" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    assert len(load_runs(results)) == 1


def test_an_unreachable_prefect_api_is_one_line_and_exit_3(tmp_path):
    env = {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api"}  # nothing listens on port 9
    argv = [*OMNI, "sweep", "arms/smoke-synthetic.yaml", "--results", str(tmp_path / "r"), "--force"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=240)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "error: cannot reach the Prefect API (http://127.0.0.1:9/api)" in done.stderr
    assert "omni stack up" in done.stderr and "Traceback" not in done.stderr + done.stdout
    debug = subprocess.run([*OMNI, "--debug", *argv[len(OMNI):]], capture_output=True, text=True, cwd=REPO, env=env,
                           timeout=240)  # fmt: skip
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_a_full_disk_is_named_with_its_path():
    import errno

    from omni.cli import infrastructure_problem

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/mnt/results/runs/x.parquet")
        except OSError as inner:
            raise RuntimeError("task failed") from inner
    except RuntimeError as outer:
        problem = infrastructure_problem(outer)
    assert problem.startswith("disk full writing /mnt/results/runs/x.parquet") and "--resume" in problem
    assert infrastructure_problem(ValueError("a bug")) is None


@pytest.mark.slow
def test_a_terminal_shows_each_slots_run_live_then_the_table_and_verdicts_once(tmp_path):
    """A recording (script(1), a real terminal) of omni sweep arms/smoke-synthetic.yaml."""
    typescript = tmp_path / "typescript"
    command = f"{sys.executable} -m omni.cli sweep arms/smoke-synthetic.yaml --results {tmp_path / 'r'} --force"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "COLUMNS": "200"}
    done = subprocess.run(["script", "-q", "-e", "-c", command, str(typescript)], cwd=REPO, env=env,
                          capture_output=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    text = typescript.read_text(errors="replace")
    live = re.findall(r"slot 0 \(cpus [0-9,-]+\): (small|large|small\.control) pass (\d), ([a-z ]+), \d+ s", text)
    assert len({arm for arm, _, _ in live}) >= 2, text[-3000:]  # runs of about 2 s, redrawn twice a second
    assert len({phase for _, _, phase in live}) >= 2 and {phase for _, _, phase in live} <= {
        "waiting for its cores", "starting the engine", "loading", "measuring", "holding for memory",
        "tearing down", "reaping", "storing"}
    assert re.search(r"\d/9 runs done, about \d+ s left", text)
    assert text.count("n/runs") == 1, "the per-arm table, once"
    assert text.count("against the baseline `small`") == 1 and "| large |" in text


def test_quiet_and_json_are_for_scripts(tmp_path):
    spec = tmp_path / "one.yaml"
    spec.write_text(yaml.safe_dump({"name": "one", "passes": 1, "arms": [{"name": "a", "engine": "synthetic"}]}))
    quiet = omni("sweep", str(spec), "--results", str(tmp_path / "q"), "--force", "--quiet")
    assert quiet.returncode == 0 and quiet.stdout.strip().startswith("rows in") and "median" not in quiet.stdout
    shown = omni("sweep", str(spec), "--results", str(tmp_path / "j"), "--force", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    record = json.loads(shown.stdout)
    assert record["failed"] == 0 and [r["status"] for r in record["runs"]] == ["ok"] and record["runs"][0]["arm"] == "a"
    assert Path(record["rows"]).is_dir()


def test_a_sweep_with_a_failed_run_exits_1_naming_it_and_keeps_the_good_row(tmp_path):
    """Exit codes: 0 every run ok, 1 a run failed (its row stored), 2 user error.
    Click returns a typer.Exit's code without standalone mode: omni once exited
    0 here."""
    spec = tmp_path / "failing.yaml"
    spec.write_text(yaml.safe_dump({"name": "failing", "passes": 1, "timeout_s": 60, "arms": [
        {"name": "good", "engine": "synthetic", "params": {"mem_mb": 8}},
        {"name": "bad", "engine": "synthetic", "params": {"crash": True}}]}))  # fmt: skip
    results = tmp_path / "results"
    done = omni("sweep", str(spec), "--results", str(results), "--force", "--quiet")
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    assert re.search(r"run \w+ \(bad\) failed: .*synthetic engine crashed", done.stderr), done.stderr[-2000:]
    rows = load_runs(results).set_index("arm")["status"].to_dict()
    assert rows == {"good": "ok", "bad": "failed"}


@pytest.mark.slow
def test_two_resumes_of_one_sweep_at_once_run_each_run_once_and_both_exit_0(tmp_path):
    """Each run is claimed on this host before it starts: the second resume
    skips what the first holds or has stored (an outcome, no row), and only a
    run that failed would make it exit 1."""
    from omni.sweep import prepare_sweep, write_manifest

    arms = [{"name": f"a{i}", "engine": "synthetic", "params": {"mem_mb": 8, "load_s": 0.5}} for i in range(2)]
    spec = tmp_path / "twice.yaml"
    spec.write_text(yaml.safe_dump({"name": "twice", "passes": 2, "timeout_s": 60, "control": False, "arms": arms}))
    results = tmp_path / "results"
    started = prepare_sweep(spec, results=results)  # a sweep that stored nothing yet, as if killed at once
    write_manifest(started)
    planned = sorted(item.run_id for item in started.items)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    both = [subprocess.Popen([*OMNI, "sweep", "--resume", started.sweep_id, "--results", str(results), "--force",
                              "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]  # fmt: skip
    outcomes = []
    for proc in both:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-3000:]
        outcomes += json.loads(out)["runs"]
    ran = sorted(o["run_id"] for o in outcomes if o["status"] == "ok")
    skipped = [o for o in outcomes if o["status"] == "skipped"]
    assert ran == planned, "every run executed exactly once"
    assert len(skipped) == len(planned) and all(o["error"].startswith("skipped: another process") for o in skipped)
    rows = load_runs(results)
    assert sorted(rows["run_id"]) == planned and (rows["status"] == "ok").all()


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sigint_or_sigterm_mid_sweep_exits_interrupted_reaps_everything_and_resume_completes(tmp_path, sig, code):
    arms = [{"name": f"a{i}", "engine": "synthetic", "params": {"procs": 2, "mem_mb": 32, "load_s": 1.5}}
            for i in range(2)]  # fmt: skip
    spec = tmp_path / "slow.yaml"
    spec.write_text(yaml.safe_dump({"name": "slow", "passes": 3, "timeout_s": 60, "control": False, "arms": arms}))
    results = tmp_path / "results"
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    proc = subprocess.Popen([*OMNI, "sweep", str(spec), "--results", str(results), "--force", "--quiet"], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 180
    while not list((results / "runs").glob("*/*.parquet")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    # interrupted: exit 128 + the signal, or death by it after cleaning up (a shell's $? is 128 + N either way)
    assert proc.returncode in (code, -sig), err[-3000:]
    stop = time.monotonic() + 15
    while engine_processes(str(results)) and time.monotonic() < stop:
        time.sleep(0.1)
    assert engine_processes(str(results)) == [] and list_temp_files(results) == []
    kept = load_runs(results)
    assert 1 <= len(kept) < 6 and (kept["status"] == "ok").all()
    (sweep_dir,) = (results / "sweeps").iterdir()
    done = omni("sweep", "--resume", sweep_dir.name, "--results", str(results), "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    after = load_runs(results)
    assert len(after) == 6 and after["run_id"].is_unique and set(kept["run_id"]) <= set(after["run_id"])
