"""The deployment stack: docker-compose.yml, prefect.yaml and the CI stack
agree; a real Prefect server on PostgreSQL runs deployments started from the
Prefect CLI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import tomllib
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from flows.serve import build_deployments
from omni import stack
from omni.errors import OmniError
from omni.spec import load_spec
from tests.conftest import REPO

PREFECT_YAML = yaml.safe_load((REPO / "prefect.yaml").read_text())
EXAMPLE_ENV = stack.read_env_file(stack.ENV_EXAMPLE)


def pinned(package: str) -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d.split("==")[1] for d in deps if d.startswith(f"{package}=="))


def test_compose_and_the_ci_stack_agree():
    services = stack.compose()["services"]
    assert services["prefect-server"]["image"] == f"prefecthq/prefect:{pinned('prefect')}-python3.11"
    settings = stack.server_settings(EXAMPLE_ENV)
    assert stack.database_url(settings) == "postgresql+asyncpg://prefect:***@127.0.0.1:5432/prefect"
    inside = stack.service_env("prefect-server", EXAMPLE_ENV)
    assert inside["PREFECT_SERVER_DATABASE_HOST"] == "postgres" and "postgres" in services
    assert stack.api_url(settings) == "http://127.0.0.1:4200/api"  # loopback unless .env says otherwise
    # credentials come from the env file, never from the compose file
    for service in ("postgres", "prefect-server"):
        for key, value in services[service]["environment"].items():
            if "PASSWORD" in key or "USER" in key:
                assert str(value).startswith("${POSTGRES_"), (service, key)
    worker = services["worker"]
    pools = {d["work_pool"]["name"] for d in PREFECT_YAML["deployments"]}
    assert pools == {worker["environment"]["OMNI_POOL"]} == {stack.POOL}
    assert "SYS_NICE" in worker["cap_add"] and "seccomp=unconfined" in worker["security_opt"]
    workdir = re.search(r"^WORKDIR (\S+)$", (REPO / "Dockerfile").read_text(), re.M).group(1)
    assert f"results:{workdir}/results" in worker["volumes"]
    assert {d["parameters"]["results"] for d in PREFECT_YAML["deployments"]} == {"results"}  # under workdir


def test_deployments_are_manual_and_a_nightly_cron_on_a_spec_that_validates():
    by_name = {d["name"]: d for d in PREFECT_YAML["deployments"]}
    assert set(by_name) == {"manual", "nightly"}
    assert all(d["entrypoint"] == "flows/sweep.py:sweep" for d in by_name.values())
    assert by_name["nightly"]["schedules"][0]["cron"] == "0 2 * * *"
    load_spec(REPO / by_name["nightly"]["parameters"]["spec"])
    served = {d.name: d for d in build_deployments()}
    assert set(served) == set(by_name)
    assert served["nightly"].parameters == by_name["nightly"]["parameters"]
    assert served["nightly"].schedules[0].schedule.cron == "0 2 * * *"


@pytest.mark.parametrize(
    "text, env, expected",
    [
        ("${A}", {"A": "1"}, "1"),
        ("${A:-x}", {}, "x"),
        ("${A:-x}", {"A": "y"}, "y"),
        ("pg_isready -U $${POSTGRES_USER}", {}, "pg_isready -U ${POSTGRES_USER}"),
    ],
)
def test_interpolation_follows_compose(text, env, expected):
    assert stack.interpolate(text, env) == expected


def test_a_missing_credential_names_the_variable_and_the_file():
    with pytest.raises(OmniError, match="needs POSTGRES_USER: set POSTGRES_USER in .env"):
        stack.service_env("postgres", {})


# --- a real server -----------------------------------------------------------


@pytest.fixture(scope="module")
def prefect_api():
    """The stack .ci/run started, or one started (and stopped) here."""
    settings = stack.server_settings(stack.ensure_env_file())
    url = stack.api_url(settings)
    started = not stack.healthy(url)
    if started:
        url = stack.up()
    yield url
    if started:
        stack.down()


def prefect(url: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": url, "COLUMNS": "200"}
    return subprocess.run([str(REPO / ".venv" / "bin" / "prefect"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def worker(prefect_api):
    """scripts/worker.sh: the pool, prefect.yaml's deployments, a worker serving the pool."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"omni-worker-{uuid.uuid4().hex[:8]}.log"
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    with log.open("wb") as sink:  # the child keeps its own descriptor
        proc = subprocess.Popen([str(REPO / "scripts" / "worker.sh")], cwd=REPO, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
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


@pytest.mark.server
@pytest.mark.timeout(900)
def test_deployment_runs_from_the_prefect_cli_land_their_rows(prefect_api, worker, tmp_path):
    results = tmp_path / "results"
    code, run_id, out = run_deployment(prefect_api, "sweep/manual", spec="arms/smoke-synthetic.yaml",
                                       results=str(results), force="true")  # fmt: skip
    assert code == 0 and "Completed" in out, out[-3000:]
    frame = pd.read_parquet(results / "runs")
    assert len(frame) == 9 and (frame["status"] == "ok").all()  # 2 arms and the A/A control, 3 passes
    assert set(frame["prefect_flow_run_id"]) == {run_id}
    assert flow_run(prefect_api, run_id).state.type.value == "COMPLETED"

    failing = tmp_path / "failing.yaml"
    failing.write_text(yaml.safe_dump({"name": "failing", "passes": 1, "timeout_s": 60, "arms": [
        {"name": "good", "engine": "synthetic", "params": {"mem_mb": 8}},
        {"name": "bad", "engine": "synthetic", "params": {"crash": True}},
    ]}))  # fmt: skip
    code, run_id, out = run_deployment(prefect_api, "sweep/manual", spec=str(failing), results=str(results),
                                       force="true")  # fmt: skip
    state = flow_run(prefect_api, run_id).state
    assert code != 0 and state.type.value == "FAILED"
    assert "1 of 2 run(s) did not end ok" in state.message and "bad pass 0" in state.message
    rows = pd.read_parquet(results / "runs")
    kept = rows[rows["prefect_flow_run_id"] == run_id].set_index("arm")["status"].to_dict()
    assert kept == {"good": "ok", "bad": "failed"}


@pytest.mark.server
@pytest.mark.engines
@pytest.mark.timeout(900)
def test_the_nightly_deployment_runs_once_on_the_real_engines(prefect_api, worker, tmp_path):
    results = tmp_path / "results"
    code, run_id, out = run_deployment(prefect_api, "sweep/nightly", passes="1", results=str(results), force="true")
    assert code == 0, out[-3000:]
    frame = pd.read_parquet(results / "runs")
    assert sorted(frame["arm"]) == ["llamacpp-bf16", "vllm-eager"] and (frame["status"] == "ok").all()
    assert (frame["sweep_name"] == "nightly").all() and set(frame["prefect_flow_run_id"]) == {run_id}
