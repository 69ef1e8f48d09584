"""Results on the stack's S3 (SeaweedFS, started by .ci/run's `omni stack up`
or by the fixture): the same store, retractions, compaction and CLI as on a
directory, read back by omni, pandas and DuckDB. No mock: a real server."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid

import pandas as pd
import pytest

from omni.errors import OmniError
from omni.store import compaction, layout, reading, writing
from omni.store.objstore import S3Path, results_root, storage_options
from tests.conftest import REPO
from tests.rows import full_row, store_full_rows


@pytest.fixture
def s3_results(running_stack):  # noqa: F811
    """A fresh prefix in the stack's bucket, removed afterwards (test data only)."""
    _url, s3 = running_stack
    root = results_root(f"s3://{s3['bucket']}/test-{uuid.uuid4().hex[:10]}")
    yield root
    import s3fs

    fs = s3fs.S3FileSystem(**root.settings.storage_options(), skip_instance_cache=True)
    if fs.exists(root.fs_path):
        fs.rm(root.fs_path, recursive=True)


def test_the_store_on_s3_never_rewrites_and_compacts_like_a_directory(s3_results):
    first = store_full_rows(s3_results, "s1", 3)
    other = store_full_rows(s3_results, "s2", 2)
    path = layout.run_path(s3_results, "s1", first[0])
    assert isinstance(path, S3Path) and path.is_file()
    with pytest.raises(OmniError, match="never rewritten"):
        writing.write_run(s3_results, full_row(first[0], "s1"))
    assert layout.stored_run_ids(s3_results, "s1") == set(first)
    assert compaction.compact_sweep(s3_results, "s1") == s3_results / "compacted" / "sweep=s1" / "part-0000.parquet"
    late = store_full_rows(s3_results, "s1", 1, start=3)
    loaded = reading.load_runs(s3_results)
    assert sorted(loaded["run_id"]) == sorted(first + other + late) and loaded["run_id"].is_unique
    assert compaction.compact_sweep(s3_results, "s1").name == "part-0001.parquet"
    assert len(reading.load_runs(s3_results, "s1")) == 4 and len(reading.load_runs(s3_results, columns=["run_id"])) == 6
    # what the README shows: pandas and DuckDB on the run files, each row once
    frame = pd.read_parquet(f"{s3_results}/runs", storage_options=storage_options(s3_results))
    assert sorted(frame["run_id"]) == sorted(first + other + late)
    import duckdb
    import s3fs

    con = duckdb.connect()
    con.register_filesystem(s3fs.S3FileSystem(**storage_options(s3_results)))
    count = con.execute(f"SELECT count(DISTINCT run_id), count(*) FROM read_parquet('{s3_results}/runs/*/*.parquet')")
    assert count.fetchall() == [(6, 6)]


def test_retractions_and_side_tables_live_on_s3_too(s3_results):
    from omni.store.retract import load_retractions, retract, retracted_runs

    ids = store_full_rows(s3_results, "s1", 2)
    writing.write_iterations(s3_results, full_row(ids[0], "s1"), [{"iteration": 0, "decode_tok_s": 1.0}])
    assert reading.load_iterations(s3_results, "s1")["run_id"].tolist() == [ids[0]]
    path = retract(s3_results, ids[1], "the slot was shared")
    assert isinstance(path, S3Path) and retracted_runs(s3_results) == {ids[1]: "the slot was shared"}
    file_target = f"runs/sweep=s1/{ids[0]}.parquet"
    retract(s3_results, file_target, "its file, by its place in the results", superseded_by=ids[1])
    assert set(load_retractions(s3_results)["target"]) == {ids[1], file_target}


def test_racing_writers_of_one_run_on_s3_leave_exactly_one_file(s3_results):
    outcomes: list[str] = []

    def write(value: float) -> None:
        try:
            writing.write_run(s3_results, {**full_row("r1", "s1"), "decode_tok_s": value})
            outcomes.append(f"stored {value}")
        except OmniError:
            outcomes.append("refused")

    threads = [threading.Thread(target=write, args=(float(i),)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = [o for o in outcomes if o.startswith("stored")]
    assert len(stored) == 1 and outcomes.count("refused") == 5
    assert f"stored {reading.load_runs(s3_results).loc[0, 'decode_tok_s']}" == stored[0]


def omni(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "omni"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
def test_omni_sweeps_and_summarizes_on_s3(s3_results, tmp_path):
    local = {"OMNI_LOCAL_DIR": str(tmp_path / "local")}
    # one pass: two runs (each writes its files to S3) prove the same as nine
    done = omni(
        "sweep",
        "arms/smoke-synthetic.yaml",
        "--passes",
        "1",
        "--results",
        str(s3_results),
        "--json",
        "--force",
        env=local,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    sweep_id = outcome["sweep_id"]
    assert outcome["rows"] == f"{s3_results}/runs/sweep={sweep_id}"
    frame = pd.read_parquet(outcome["rows"], storage_options=storage_options(s3_results))
    assert len(frame) == len(outcome["runs"]) and frame["run_id"].is_unique
    # the sweep compacted itself when it ended; its engine logs stayed on local disk
    assert [p.name for p in layout.compacted_parts(s3_results, sweep_id)] == ["part-0000.parquet"]
    assert (tmp_path / "local" / s3_results.bucket / s3_results.key / "logs" / f"sweep={sweep_id}").is_dir()
    summary = omni("summary", sweep_id, "--results", str(s3_results), env=local)
    assert summary.returncode == 0, summary.stderr[-3000:]
    assert (s3_results / "summaries" / f"{sweep_id}.json").is_file()
    assert json.loads((s3_results / "summaries" / f"{sweep_id}.json").read_text())["sweep_id"] == sweep_id
    # a published summary or part on S3 alone is a reproducible target (planned here, not rerun)
    part = f"{s3_results}/compacted/sweep={sweep_id}/part-0000.parquet"
    for target in (f"{s3_results}/summaries/{sweep_id}.json", part):
        plan = omni("reproduce", target, "--results", str(tmp_path / "rerun"), "--dry-run", env=local)
        assert plan.returncode == 0 and f"sweep {sweep_id}, 2 row(s)" in plan.stdout, plan.stdout + plan.stderr[-2000:]
        assert "rerun: small, large" in plan.stdout, plan.stdout
    assert not (tmp_path / "rerun").exists()
    again = omni("compact", "--results", str(s3_results))
    assert again.returncode == 0 and "0 file(s) written" in again.stdout, again.stderr
    resumed = omni("sweep", "--resume", sweep_id, "--results", str(s3_results), "--json", "--force", env=local)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["runs"] == []  # all stored: nothing to run


def test_a_missing_bucket_or_a_wrong_secret_is_one_clear_error(running_stack):  # noqa: F811
    _url, s3 = running_stack
    missing = results_root(f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/x")
    with pytest.raises(OmniError, match="bucket 'no-such-bucket.*' does not exist"):
        missing.require_bucket()  # what omni sweep checks first
    done = omni("sweep", "arms/smoke-synthetic.yaml", "--results", str(missing), "--dry-run")
    assert done.returncode == 2 and "does not exist" in " ".join(done.stderr.split()), done.stderr
    wrong = S3Path(
        f"s3://{s3['bucket']}/x",
        missing.settings.__class__(
            missing.settings.endpoint_url, missing.settings.access_key, "not-the-secret", missing.settings.region
        ),
    )
    with pytest.raises(OmniError, match="object store at http"):
        writing.write_run(wrong, full_row())
    with pytest.raises(OmniError, match="only a directory|give a directory or s3://"):
        results_root("gs://bucket/x")
