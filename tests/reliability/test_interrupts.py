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

from omni.measure.procfs import read_all
from omni.store.layout import list_temp_files
from omni.store.reading import load_runs
from tests.conftest import OMNI, REPO, omni
from tests.specs import failing_spec

# a test starts up to four sweeps (Prefect's ephemeral server each): about 100 s here, three times that on a
# loaded host (seen beside a vLLM test), past the default 180 s
pytestmark = pytest.mark.timeout(600)


def engine_processes(marker: str, kind: bytes = b"omni.engines") -> list[int]:
    """Processes whose command line mentions ``marker`` and ``kind``."""
    return [pid for pid, cmdline in read_all("cmdline") if marker.encode() in cmdline and kind in cmdline]


def slow_sweep(tmp_path: Path, arms: int) -> tuple[Path, Path]:
    """A spec of ``arms`` synthetic arms, 3 passes, each run 1.5 s loading two
    processes of 32 MiB: long enough to be interrupted mid-run. (spec, results)"""
    config = [
        {"name": f"a{i}", "engine": "synthetic", "params": {"procs": 2, "mem_mb": 32, "load_s": 1.5}}
        for i in range(arms)
    ]
    spec = tmp_path / "slow.yaml"
    spec.write_text(yaml.safe_dump({"name": "slow", "passes": 3, "timeout_s": 60, "control": False, "arms": config}))
    return spec, tmp_path / "results"


def stored_runs(results: Path) -> list[Path]:
    return list((results / "runs").glob("*/*.parquet"))


def interrupt_mid_run(proc: subprocess.Popen, results: Path, after: int, sig: int) -> None:
    """Send ``sig`` to ``omni sweep`` once it has stored ``after`` rows in all
    and one of its engines is running: mid-run, not between runs."""
    deadline = time.monotonic() + 180
    while len(stored_runs(results)) < after or not engine_processes(str(results)):
        assert proc.poll() is None, f"the sweep ended before it could be interrupted (exit {proc.returncode})"
        assert time.monotonic() < deadline, f"fewer than {after} rows stored within 180 s"
        time.sleep(0.05)
    proc.send_signal(sig)


def assert_nothing_left(results: Path, servers_before: set[int]) -> pd.DataFrame:
    """No engine or ephemeral Prefect server of the sweep survives, no temp
    file is left, and every row stored reads back ok, one per run id."""
    stop = time.monotonic() + 15
    while engine_processes(str(results)) and time.monotonic() < stop:
        time.sleep(0.1)
    assert engine_processes(str(results)) == []
    while set(engine_processes("", b"prefect.server")) - servers_before and time.monotonic() < stop:
        time.sleep(0.1)
    assert set(engine_processes("", b"prefect.server")) - servers_before == set(), "Prefect server left behind"
    assert list_temp_files(results) == []
    frame = load_runs(results)
    assert (frame["status"] == "ok").all() and frame["run_id"].is_unique, frame[["run_id", "status", "error"]]
    assert len(pd.read_parquet(results / "runs")) == len(frame)
    return frame


@pytest.mark.slow
def test_sigkill_then_ctrl_c_then_sigterm_mid_sweep_leave_nothing_behind_and_resume_completes(tmp_path):
    """One sweep of 9 runs interrupted three ways in turn, each while an engine
    runs: SIGKILL of ``omni sweep`` (nothing of omni's own cleans up: the
    engines' parent watch and the run-id reaper must), Ctrl-C of the first
    resume (exit 130) and SIGTERM of the second (143 as a shell's ``$?``);
    the third resume completes. After each fault: no engine or Prefect server
    survives, no temp file, every stored row ok and stored once, and each
    resume's rows are its own flow run's. One chain, not three tests: each
    ``omni sweep`` costs about 15 s of Prefect server and imports."""
    spec, results = slow_sweep(tmp_path, 3)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    servers_before = set(engine_processes("", b"prefect.server"))

    proc = subprocess.Popen(
        [*OMNI, "sweep", str(spec), "--results", str(results), "--force"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    interrupt_mid_run(proc, results, 2, signal.SIGKILL)
    proc.wait()
    frame = assert_nothing_left(results, servers_before)
    assert 2 <= len(frame) <= 3, len(frame)
    kept_after = {"SIGKILL": len(frame)}
    (sweep_dir,) = (results / "sweeps").iterdir()
    planned = set(json.loads((sweep_dir / "manifest.json").read_text())["run_ids"])
    assert len(planned) == 9 and set(frame["run_id"]) <= planned
    spec.write_text(spec.read_text().replace("passes: 3", "passes: 4"))  # the sweep's own copy is used

    resume = [*OMNI, "sweep", "--resume", sweep_dir.name, "--results", str(results), "--force", "--quiet"]
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        # SIGINT as at a terminal: a shell without job control starts background jobs with SIGINT ignored,
        # and a Python started so never raises KeyboardInterrupt (the sweep would run to its end)
        proc = subprocess.Popen(
            resume,
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        interrupt_mid_run(proc, results, len(frame) + 1, sig)
        _, err = proc.communicate(timeout=120)
        # interrupted: exit 128 + the signal, or death by it after cleaning up (a shell's $? is 128 + N either way)
        assert proc.returncode in (code, -sig), (sig, proc.returncode, err[-3000:])
        kept = assert_nothing_left(results, servers_before)
        assert set(frame["run_id"]) < set(kept["run_id"]) <= planned and len(kept) < 9, (sig, len(kept))
        new = kept[~kept["run_id"].isin(frame["run_id"])]
        assert new["prefect_flow_run_id"].nunique() == 1, "one resume, one flow run"
        assert not set(new["prefect_flow_run_id"]) & set(frame["prefect_flow_run_id"])
        frame, kept_after[signal.Signals(sig).name] = kept, len(kept)

    done = omni("sweep", "--resume", sweep_dir.name, "--results", str(results), "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    after = assert_nothing_left(results, servers_before)
    assert set(after["run_id"]) == planned and len(after) == 9
    print(f"rows kept after {kept_after}; the last resume completed: {len(after)} rows, unique")  # README's table
    resumed = after[~after["run_id"].isin(frame["run_id"])]
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
    debug = subprocess.run(
        [*OMNI, "--debug", *argv[len(OMNI) :]], capture_output=True, text=True, cwd=REPO, env=env, timeout=240
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_a_full_disk_is_named_with_its_path():
    import errno

    from omni.cli.main import infrastructure_problem

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
    spec = failing_spec(tmp_path)
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
    from omni.sweep.prepare import prepare_sweep, write_manifest
    from omni.sweep.request import SweepRequest

    arms = [{"name": f"a{i}", "engine": "synthetic", "params": {"mem_mb": 8, "load_s": 0.5}} for i in range(2)]
    spec = tmp_path / "twice.yaml"
    spec.write_text(yaml.safe_dump({"name": "twice", "passes": 2, "timeout_s": 60, "control": False, "arms": arms}))
    results = tmp_path / "results"
    # a sweep that stored nothing yet, as if killed at once
    started = prepare_sweep(SweepRequest(spec=spec, results=results))
    write_manifest(started)
    planned = sorted(item.run_id for item in started.items)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    both = [
        subprocess.Popen(
            [*OMNI, "sweep", "--resume", started.sweep_id, "--results", str(results), "--force", "--json"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
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
