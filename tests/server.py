"""A running stack (PostgreSQL, a Prefect server, S3) and what talks to it: the Prefect CLI, a
deployment run, a flow run's state, a fleet host. The stack's fixtures are shared by tests/stack (its
conftest.py) and the reliability tests that need a server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from omni.fleet import stack
from omni.host.provenance import HOST_VAR
from omni.run.reaper import find_run_processes
from tests.conftest import REPO


def start_logged(argv: list[str], env: dict, log: Path, mode: str) -> subprocess.Popen:
    """``argv`` from the checkout in its own session, stdout and stderr to ``log``."""
    with log.open(mode) as sink:  # the child keeps its own descriptor
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def running_stack():
    """(Prefect API URL, S3 settings) of the stack .ci/run started, or of one
    started (and stopped) here."""
    env = stack.ensure_env_file()
    url, s3 = stack.api_url(stack.server_settings(env)), stack.s3_settings(env)
    started = not (stack.healthy(url) and stack.healthy(s3["endpoint_url"], stack.S3_HEALTH))
    if started:
        stack.up()
    yield url, s3
    if started:
        stack.down()


@pytest.fixture(scope="module")
def prefect_api(running_stack):
    return running_stack[0]


def prefect(url: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return venv_tool("prefect", url, *args, timeout=timeout)


def venv_tool(tool: str, url: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """``.venv/bin/<tool> ARGS`` against the Prefect API at ``url``, output captured."""
    env = {**os.environ, "PREFECT_API_URL": url, "COLUMNS": "200"}
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / tool), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def worker(prefect_api):
    """scripts/worker.sh: the pool, prefect.yaml's deployments, a worker serving the pool."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"omni-worker-{uuid.uuid4().hex[:8]}.log"
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    proc = start_logged([str(REPO / "scripts" / "worker.sh")], env, log, "wb")
    deadline = time.monotonic() + 120
    while prefect(prefect_api, "deployment", "inspect", "sweep/nightly").returncode != 0:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(1)
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_deployment(url: str, name: str, **params: str) -> tuple[int, str, str]:
    """``prefect deployment run NAME --param k=v --watch``: exit code, flow run id, output."""
    args = [arg for key, value in params.items() for arg in ("--param", f"{key}={value}")]
    done = prefect(url, "deployment", "run", name, *args, "--watch")
    match = re.search(r"UUID: ([0-9a-f-]{36})", done.stdout)
    assert match, done.stdout[-3000:] + done.stderr[-3000:]
    return done.returncode, match.group(1), done.stdout


def flow_run(url: str, run_id: str):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


FAST = {"PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "5"}


class Host:
    """One `omni worker --host NAME` process and everything it started."""

    def __init__(self, url: str, name: str, base: Path, sysfs: Path | None = None) -> None:
        self.url, self.name, self.base, self.sysfs = url, name, base, sysfs
        self.log = base / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        args = ["worker", "--host", self.name, "--lock-dir", str(self.base / f"locks-{self.name}"), "--heartbeat", "2"]
        args += ["--sysfs-root", str(self.sysfs)] if self.sysfs else []
        env = {**os.environ, **FAST, "PREFECT_API_URL": self.url}
        self.proc = start_logged([str(REPO / ".venv" / "bin" / "omni"), *args], env, self.log, "ab")
        deadline = time.monotonic() + 120
        while not self.alive():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(1)

    def alive(self) -> bool:
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from omni.fleet.hosts import read_hosts

        with temporary_settings({PREFECT_API_URL: self.url}), get_client(sync_client=True) as client:
            state = read_hosts(client).get(self.name)
        return state is not None and state.online

    def kill(self) -> int:
        """SIGKILL every process of this host, as if it lost power; how many there were.
        The worker set OMNI_HOST after it started, so it is found by its pid."""
        killed = set()
        for _ in range(5):  # again: a child forked between the scan and the kill
            pids = (find_run_processes(self.name, var=HOST_VAR) | {self.proc.pid}) - killed
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed |= pids
            time.sleep(0.2)
        self.proc.wait(10)
        return len(killed)
