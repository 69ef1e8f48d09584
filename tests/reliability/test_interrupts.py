"""Faults of the orchestrator and its exit codes, injected for real: SIGKILL,
Ctrl-C and SIGTERM of ``omni sweep`` mid-sweep, two resumes of one sweep at
once, a failing run, an unreachable Prefect API, a full disk's message.

Exit codes (``omni sweep``): 0 every run ok (or skipped: another process ran
it), 1 runs did not end ok (their rows kept), 2 a user error (bad spec,
options), 3 the machinery failed (Prefect API, disk), 130 Ctrl-C, death by
SIGTERM after cleaning up (a shell's ``$?`` 143).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from omni.procfs import read_all
from omni.store import list_temp_files, load_runs
from tests.conftest import REPO
from tests.test_cli import OMNI, omni

# each test starts two sweeps (Prefect's ephemeral server each): about 60 s here, three times that on a
# loaded host (seen beside a vLLM test), past the default 180 s
pytestmark = pytest.mark.timeout(480)


def engine_processes(marker: str, kind: bytes = b"omni.engines") -> list[int]:
    """Processes whose command line mentions ``marker`` and ``kind``."""
    return [pid for pid, cmdline in read_all("cmdline") if marker.encode() in cmdline and kind in cmdline]


def slow_sweep(tmp_path: Path, arms: int) -> tuple[Path, Path]:
    """A spec of ``arms`` synthetic arms, 3 passes, each run 1.5 s loading two
    processes of 32 MiB: long enough to be interrupted mid-run. (spec, results)"""
    config = [{"name": f"a{i}", "engine": "synthetic", "params": {"procs": 2, "mem_mb": 32, "load_s": 1.5}}
              for i in range(arms)]  # fmt: skip
    spec = tmp_path / "slow.yaml"
    spec.write_text(yaml.safe_dump({"name": "slow", "passes": 3, "timeout_s": 60, "control": False, "arms": config}))
    return spec, tmp_path / "results"


@pytest.mark.slow
def test_sigkill_mid_sweep_leaves_nothing_behind_and_resume_runs_exactly_the_missing_runs(tmp_path):
    spec, results = slow_sweep(tmp_path, 3)
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
    spec, results = slow_sweep(tmp_path, 2)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    # SIGINT as at a terminal: a shell without job control starts background jobs with SIGINT ignored,
    # and a Python started so never raises KeyboardInterrupt (the sweep would run to its end)
    proc = subprocess.Popen([*OMNI, "sweep", str(spec), "--results", str(results), "--force", "--quiet"], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 180
    while not list((results / "runs").glob("*/*.parquet")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
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
