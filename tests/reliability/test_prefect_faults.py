"""Prefect faults on the real stack: a cancel of a
running flow run of ``sweep/manual``, then a ``kill -9`` of the worker running
another one.

The worker is this module's own ``omni worker --host`` (its own queue and lock
directory), so killing it breaks no other test's worker. The arm is synthetic
and sits in its load phase for 90 s: a run is mid-flight when the fault
lands, and nothing but the fault can end it soon.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from omni.fleet.hosts import queue_name
from omni.host.provenance import HOST_VAR
from omni.measure.procfs import read_all
from omni.run.reaper import RUN_ID_VAR, find_run_processes
from omni.run.schedule import LOCK_DIR_VAR, claim_run
from omni.store.layout import list_temp_files
from omni.store.reading import load_runs
from tests.conftest import REPO
from tests.server import FAST, Host, flow_run, prefect, prefect_api, running_stack  # noqa: F401 - fixtures

pytestmark = [pytest.mark.stack, pytest.mark.timeout(300)]
HOST = f"pf-{uuid.uuid4().hex[:6]}"
CPU = 1  # the slot's one CPU (--cores), so its lock file is known
# an engine of two processes that "loads" for 90 s: only the fault can end its run within SETTLE_S
HELD = {"name": "held", "engine": "synthetic", "params": {"procs": 2, "mem_mb": 16, "load_s": 90}}
SETTLE_S = 60  # the fault's outcome is recorded within this (measured: 10 s at most); a run left alone takes longer


@pytest.fixture(scope="module")
def host(prefect_api, tmp_path_factory):  # noqa: F811 - fixture
    """This module's worker, and prefect.yaml's deployments registered from this checkout."""
    saved = {k: os.environ.get(k) for k in FAST}
    os.environ.update(FAST)
    base = tmp_path_factory.mktemp("prefect-faults")
    worker = Host(prefect_api, HOST, base)
    worker.start()  # creates pool omni and queue host-HOST; registers the deployments if none are
    if not deployed_here(prefect_api):
        done = prefect(prefect_api, "--no-prompt", "deploy", "--all")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    yield worker
    for pid in find_run_processes(HOST, var=HOST_VAR) | {worker.proc.pid}:  # whatever a failed test left
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    worker.proc.wait(10)
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


@contextmanager
def client_for(url: str):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        yield client


def deployed_here(url: str) -> bool:
    """sweep/manual exists and runs this checkout's flows (its pull step's directory)."""
    from prefect.exceptions import ObjectNotFound

    with client_for(url) as client:
        try:
            deployment = client.read_deployment_by_name("sweep/manual")
        except ObjectNotFound:
            return False
    steps = [step.get("prefect.deployments.steps.set_working_directory") for step in deployment.pull_steps or []]
    return any(step and step.get("directory") == str(REPO) for step in steps)


def start_sweep(url: str, host: Host, spec: Path, results: Path) -> str:
    """A ``sweep/manual`` flow run on this module's worker (started again if a
    test killed it), on CPU ``CPU``; its id."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if host.proc.poll() is not None:
        host.start()

    with temporary_settings({PREFECT_API_URL: url}):
        run = run_deployment(
            "sweep/manual",
            timeout=0,
            work_queue_name=queue_name(HOST),
            parameters={"spec": str(spec), "results": str(results), "cores": [str(CPU)], "force": True},
        )
    return str(run.id)


def engines() -> dict[int, str]:
    """This host's engine processes (they carry OMNI_HOST and a run id): pid -> run id."""
    host, run = f"{HOST_VAR}={HOST}".encode(), f"{RUN_ID_VAR}=".encode()
    found = {}
    for pid, environ in read_all("environ"):
        entries = environ.split(b"\0")
        tagged = [e[len(run) :].decode() for e in entries if e.startswith(run)]
        if host in entries and tagged:
            found[pid] = tagged[0]
    return found


def wait_mid_run(url: str, flow_run_id: str) -> str:
    """Until the flow run is Running and its engine (main process and child) is up; the run id."""
    deadline = time.monotonic() + 150
    while True:
        state = flow_run(url, flow_run_id).state
        assert not state.is_final(), f"ended {state.type.value} before the fault: {state.message}"
        found = engines()
        if state.is_running() and len(found) >= 2:
            (run_id,) = set(found.values())
            return run_id
        assert time.monotonic() < deadline, f"no engine within 150 s; state {state.type.value}"
        time.sleep(0.5)


def wait_final(url: str, flow_run_id: str) -> tuple[object, int, float]:
    """The flow run's final state, how many engine processes were alive the moment
    it was seen, and how long after the call the engines were last seen (for the report)."""
    start = time.monotonic()
    deadline, last_seen = start + SETTLE_S, 0.0
    while True:
        state = flow_run(url, flow_run_id).state
        alive = len(engines())
        last_seen = time.monotonic() - start if alive else last_seen
        if state.is_final():
            return state, alive, last_seen
        assert time.monotonic() < deadline, f"still {state.type.value} {SETTLE_S} s after the fault"
        time.sleep(0.25)


def flow_run_log(url: str, flow_run_id: str) -> str:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with client_for(url) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return "\n".join(f"{log.name}: {log.message}" for log in logs)


def cpu_lock_free(directory: Path, cpu: int) -> bool:
    """Whether the slot's CPU lock (omni.run.schedule.hold_cpus) can be taken now, without waiting."""
    fd = os.open(directory / f"cpu{cpu}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def left_behind(host: Host, results: Path, run_id: str) -> dict:
    """What a fault must not leave: engines, held locks, a held run claim, temp files, a row."""
    locks = host.base / f"locks-{host.name}"
    with claim_run(run_id, locks) as claimed:
        pass
    rows = load_runs(results) if (results / "runs").exists() else None
    return {
        "engines": len(engines()),
        "cpu_lock_held": not cpu_lock_free(locks, CPU),
        "run_claim_held": not claimed,
        "temp_files": list_temp_files(results) if (results / "runs").exists() else [],
        "row": rows is not None and run_id in set(rows["run_id"]),
    }


NOTHING_LEFT = {"engines": 0, "cpu_lock_held": False, "run_claim_held": False, "temp_files": [], "row": False}


def follow_up_run(host: Host, tmp_path: Path, monkeypatch) -> dict:
    """A local sweep (no Prefect) on the same CPU and lock directory: its one row."""
    from omni.sweep.execute import run_sweep_items
    from omni.sweep.prepare import prepare_sweep
    from omni.sweep.request import SweepRequest

    monkeypatch.setenv(LOCK_DIR_VAR, str(host.base / f"locks-{host.name}"))
    spec = write_spec(tmp_path / "after.yaml", {"name": "quick", "engine": "synthetic", "max_tokens": 4})
    prepared = prepare_sweep(SweepRequest(spec=spec, results=tmp_path / "after", force=True, cores=(str(CPU),)))
    (row,) = run_sweep_items(prepared)
    return row


def write_spec(path: Path, arm: dict) -> Path:
    path.write_text(yaml.safe_dump({"name": path.stem, "passes": 1, "timeout_s": 120, "control": False, "arms": [arm]}))
    return path


def test_a_cancel_reaps_the_engines_and_ends_cancelled(prefect_api, host, tmp_path, monkeypatch):  # noqa: F811
    results = tmp_path / "results"
    flow_run_id = start_sweep(prefect_api, host, write_spec(tmp_path / "cancelled.yaml", HELD), results)
    run_id = wait_mid_run(prefect_api, flow_run_id)
    from prefect.states import Cancelling

    with client_for(prefect_api) as client:  # what `prefect flow-run cancel ID` does
        client.set_flow_run_state(flow_run_id, Cancelling())
    state, alive_at_end, engines_for = wait_final(prefect_api, flow_run_id)
    left = left_behind(host, results, run_id)
    print(
        f"cancel: state {state.type.value} ({state.message}); engines alive when it was final: {alive_at_end}, "
        f"last seen {engines_for:.1f} s after the cancel; left behind: {left}"
    )
    assert state.type.value == "CANCELLED", state.message
    assert alive_at_end == 0 and left == NOTHING_LEFT
    # the flow-run process handled the worker's SIGTERM itself (Prefect's engine logs this),
    # rather than being SIGKILLed at the end of the worker's grace with its engines still running
    said = flow_run_log(prefect_api, flow_run_id)
    assert "prefect.flow_runs: Flow run was cancelled." in said, said[-3000:]
    assert follow_up_run(host, tmp_path, monkeypatch)["status"] == "ok"


def test_a_kill_9_of_the_worker_crashes_its_flow_run_and_leaves_no_ghost(
    prefect_api,
    host,
    tmp_path,
    monkeypatch,  # noqa: F811 - fixture
):
    results = tmp_path / "results"
    flow_run_id = start_sweep(prefect_api, host, write_spec(tmp_path / "orphaned.yaml", HELD), results)
    run_id = wait_mid_run(prefect_api, flow_run_id)
    os.kill(host.proc.pid, signal.SIGKILL)  # the worker only: its flow run's process lives on, orphaned
    host.proc.wait(10)
    state, alive_at_end, engines_for = wait_final(prefect_api, flow_run_id)
    left = left_behind(host, results, run_id)
    print(
        f"kill -9: state {state.type.value} ({state.message}); engines alive when it was final: {alive_at_end}, "
        f"last seen {engines_for:.1f} s after the kill; left behind: {left}"
    )
    assert state.type.value == "CRASHED", state.message
    assert alive_at_end == 0 and left == NOTHING_LEFT  # no row: the run was cut short, --resume runs it
    said = flow_run_log(prefect_api, flow_run_id)
    assert f"the worker that started this flow run (pid {host.proc.pid}) is gone" in said, said[-3000:]
    assert follow_up_run(host, tmp_path, monkeypatch)["status"] == "ok"
