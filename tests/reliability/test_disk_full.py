"""The results disk fills mid-sweep: a small tmpfs as ``--results``, filled
by another writer while a run's engine is measuring.

What must hold: no partial ``.parquet`` is visible and no temp file is left;
the run that could not be stored says "disk full" with the path; the flow
ends Failed with the earlier rows intact; once space is freed, ``--resume``
runs exactly what is missing.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from omni.run.reaper import find_run_processes
from omni.store.layout import list_temp_files
from omni.store.reading import load_runs
from tests.conftest import OMNI, omni

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs: room for a sweep's rows and logs, not for a filler file."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    assert done.returncode == 0, f"this test mounts a tmpfs (needs root): {done.stderr}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk: Path) -> Path:
    """Write zeros until the filesystem refuses: the disk is then full."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as sink:
        try:
            while True:
                sink.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def logs_started(results: Path) -> list[Path]:
    return sorted((results / "logs").glob("sweep=*/*/arm.json"))


def test_a_full_results_disk_loses_no_stored_row_leaves_no_partial_file_and_resume_completes(small_disk, tmp_path):
    spec = tmp_path / "spec.yaml"

    def arm(name: str) -> dict:
        return {
            "name": name,
            "engine": "synthetic",
            "prompt_len": 16,
            "max_tokens": 8,
            "params": {"work_per_token": 2000, "hold_s": 2},
        }

    spec.write_text(
        yaml.safe_dump(
            {
                "name": "disk-full",
                "passes": 2,
                "timeout_s": 60,
                "busy_threshold_pct": 100,
                "slots": {"cpus": "0"},
                "arms": [arm("a"), arm("b")],
            }
        )
    )
    results = small_disk / "results"
    sweep = subprocess.Popen(
        [*OMNI, "sweep", str(spec), "--results", str(results), "--force", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while len(logs_started(results)) < 2:  # the second run's engine is running; the first row is stored
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.1)
    filler = fill(small_disk)
    out, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 1, err[-3000:]  # runs failed, the machinery did not
    outcome = json.loads(out)
    stored = load_runs(results)
    assert len(stored) == 1 and stored["status"].iloc[0] == "ok", (
        stored[["arm", "status", "error"]].to_dict("records"),
        outcome["runs"],
    )  # the row stored before the disk filled
    lost = [r for r in outcome["runs"] if r["status"] == "error"]
    assert len(lost) == 3, outcome["runs"]
    for run in lost:
        assert run["error"].startswith(f"disk full writing {results}/"), run["error"]
        assert "--resume" in run["error"]
    assert not list_temp_files(results)
    for path in (results / "runs").rglob("*.parquet"):
        pq.read_table(path)  # every visible file is whole
    assert not any(find_run_processes(r["run_id"]) for r in outcome["runs"])

    filler.unlink()
    resumed = omni("sweep", "--resume", outcome["sweep_id"], "--results", str(results), "--force", "--json")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert {r["run_id"] for r in json.loads(resumed.stdout)["runs"]} == {r["run_id"] for r in lost}
    final = load_runs(results)
    assert len(final) == 4 and final["run_id"].is_unique and (final["status"] == "ok").all()
    assert not list_temp_files(results)
