"""The same work submitted twice at once from two front doors: a deployment
run of ``sweep/manual`` on the stack's server and ``omni sweep`` in Prefect's
ephemeral mode, both resuming one sweep on this host.

What must hold: no run executes twice (each run is claimed per run id, with
the slot's CPU locks, before it starts); the loser records it skipped, not as
an error; both end Completed and exit 0. Two ``omni sweep --resume`` of one
sweep at once: tests/reliability/test_interrupts.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from omni.store.reading import load_runs
from omni.sweep.prepare import prepare_sweep, write_manifest
from omni.sweep.request import SweepRequest
from tests.conftest import REPO
from tests.server import flow_run, prefect, prefect_api, running_stack, worker  # noqa: F401 - fixtures

pytestmark = [pytest.mark.stack, pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_deployment_run_racing_a_cli_run_runs_each_run_once_and_both_complete(prefect_api, worker, tmp_path):
    arms = [{"name": f"a{i}", "engine": "synthetic", "params": {"mem_mb": 8, "load_s": 1.0}} for i in range(2)]
    spec = tmp_path / "race.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "race", "passes": 2, "timeout_s": 60, "control": False, "busy_threshold_pct": 100, "arms": arms}
        )
    )
    results = tmp_path / "results"
    started = prepare_sweep(SweepRequest(spec=spec, results=results))  # planned, nothing stored: as if killed at once
    write_manifest(started)
    planned = sorted(item.run_id for item in started.items)
    local = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # the CLI on its ephemeral server
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omni.cli.main",
            "sweep",
            "--resume",
            started.sweep_id,
            "--results",
            str(results),
            "--force",
            "--json",
        ],
        cwd=REPO,
        env=local,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deployed = prefect(
        prefect_api,
        "deployment",
        "run",
        "sweep/manual",
        "--param",
        f"spec={spec}",
        "--param",
        f"resume={started.sweep_id}",
        "--param",
        f"results={results}",
        "--param",
        "force=true",
        "--watch",
    )
    out, err = cli.communicate(timeout=400)
    assert cli.returncode == 0, err[-3000:]
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    (run_id,) = re.findall(r"UUID: ([0-9a-f-]{36})", deployed.stdout)
    state = flow_run(prefect_api, run_id).state
    assert state.type.value == "COMPLETED", state.message
    cli_runs = json.loads(out)["runs"]
    cli_ok = sorted(r["run_id"] for r in cli_runs if r["status"] == "ok")
    cli_skipped = [r for r in cli_runs if r["status"] == "skipped"]
    assert len(cli_ok) + len(cli_skipped) == len(planned) and all(
        r["error"].startswith("skipped: another process") for r in cli_skipped
    )
    # the deployment's own account: "N run(s) ok, M skipped (another process ran them)"
    ok, skipped = re.match(r"(\d+) run\(s\) ok(?:, (\d+) skipped)?", state.message).groups()
    assert int(ok) + len(cli_ok) == len(planned), (state.message, cli_runs)  # each run executed once
    # it accounts for the runs left when it planned: those the CLI had stored by then are neither run nor skipped
    assert int(ok) + int(skipped or 0) <= len(planned), state.message
    rows = load_runs(results)
    assert sorted(rows["run_id"]) == planned and (rows["status"] == "ok").all()
    by_door = rows.groupby("prefect_flow_run_id").size().to_dict()
    assert by_door.get(run_id, 0) == int(ok) and sum(by_door.values()) == len(planned)
    print(f"deployment ran {ok}, CLI ran {len(cli_ok)}, {len(planned)} runs, 0 twice")
