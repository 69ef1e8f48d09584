"""Faults of the results themselves: retraction (then again), corrupt and
foreign files beside the rows, files of older schema versions mixed with new
ones. Nothing omni stores is ever rewritten or deleted, and no reader stops at
a file it cannot use.
"""

from __future__ import annotations

import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet  # noqa: F401 - pa.parquet
import pytest

from omni.errors import OmniError
from omni.report.summary import summarize_sweep
from omni.store import columns, reading, writing
from omni.store.retract import load_retractions, retract
from tests.conftest import FIXTURES, omni
from tests.rows import file_digests, full_row, store_sweep


def test_retracting_a_run_changes_the_summary_and_no_file(tmp_path):
    ids = store_sweep(tmp_path, "sw1", {"a": [100, 101, 99, 100, 100], "b": [100, 100, 60, 101, 99]})
    before = summarize_sweep(tmp_path, "sw1")
    assert before.cells[("b", "decode_tok_s")].n == 5 and before.excluded == 0
    runs = file_digests(tmp_path / "runs")
    path = retract(tmp_path, ids[7], "thermal throttling on that pass", superseded_by=ids[8])
    assert file_digests(tmp_path / "runs") == runs, "a run file changed"
    after = summarize_sweep(tmp_path, "sw1")
    assert after.cells[("b", "decode_tok_s")].n == 4 and after.excluded == 1
    assert after.cells[("b", "decode_tok_s")].min == 99
    assert summarize_sweep(tmp_path, "sw1", include_retracted=True).cells[("b", "decode_tok_s")].n == 5
    table = load_retractions(tmp_path)
    assert table.iloc[0][["target_kind", "target", "superseded_by"]].tolist() == ["run", ids[7], ids[8]]
    assert path.parent.name == "retractions"
    assert retract(tmp_path, ids[7], "again") is None, "retracting twice records nothing"
    retract(tmp_path, "sw1", "wrong model digest")  # a whole sweep, appended beside the first
    assert len(load_retractions(tmp_path)) == 2 and file_digests(tmp_path / "runs") == runs
    assert retract(tmp_path, ids[0], "covered by the sweep's") is None and len(load_retractions(tmp_path)) == 2
    with pytest.raises(OmniError, match="all 10 run"):
        summarize_sweep(tmp_path, "sw1")


def test_corrupt_and_foreign_files_are_skipped_with_a_warning_naming_them(tmp_path):
    """A truncated run file, a zero-byte one and stray files (a .DS_Store, a
    note): summary, compare and regressions skip what is no Parquet and say
    which file, never crash; an I/O error would still be raised."""
    ids = store_sweep(tmp_path, "sw1", {"a": [100, 101, 99], "b": [90, 91, 92]})
    store_sweep(tmp_path, "sw2", {"a": [100, 102, 99], "b": [91, 90, 92]}, day=1)
    part = tmp_path / "runs" / "sweep=sw1"
    (part / "truncated0000000.parquet").write_bytes((part / f"{ids[0]}.parquet").read_bytes()[:300])
    (part / "zero00000000000.parquet").write_bytes(b"")
    for stray in (part / ".DS_Store", tmp_path / "runs" / ".DS_Store", tmp_path / "runs" / "notes.txt"):
        stray.write_bytes(b"not parquet")
    summary = omni("summary", "sw1", "--results", str(tmp_path))
    assert summary.returncode == 0 and "Traceback" not in summary.stderr, summary.stderr[-2000:]
    assert "- `a`: 3 ok of 3 run(s)" in summary.stdout
    for name in ("truncated0000000.parquet", "zero00000000000.parquet"):
        # one warning line for the rule, every file named in it
        (line,) = [ln for ln in summary.stdout.splitlines() if ln.startswith("- unreadable file skipped")]
        assert str(part / name) in line, summary.stdout[-2000:]
        assert f"skipped {part / name}: not a readable Parquet file" in summary.stderr
    for args in (("compare", "sw1", "sw2"), ("regressions", "s")):
        done = omni(*args, "--results", str(tmp_path))
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, (args, done.stderr[-2000:])
        assert f"skipped {part / 'truncated0000000.parquet'}" in done.stderr, args


def test_mixed_schema_versions_read_alike_with_the_readmes_call_and_a_type_change_is_refused(tmp_path):
    """Files of schema v2, v3 and the current one under results/runs: a plain
    pd.read_parquet takes the first file's columns and silently drops newer
    ones; with schema=columns.schema() (the README's call) every column is there
    and every value equals load_runs' per-file upgrade (schema_version aside,
    which says what each file was written with). A column whose type changed
    is refused, naming the file and the column."""
    import numpy as np

    writing.write_run(tmp_path, {**full_row("new1", "s2"), "hostname": "m1", "numa_steady_missing": 0})
    old = tmp_path / "runs" / "sweep=s1"
    old.mkdir(parents=True)
    for version in ("run_v2", "run_v3"):
        shutil.copy(FIXTURES / f"{version}.parquet", old / f"{version}.parquet")
    plain = pd.read_parquet(tmp_path / "runs")
    assert "hostname" not in plain.columns and len(plain) == 3  # the trap the README warns of
    typed = pd.read_parquet(tmp_path / "runs", schema=columns.schema()).set_index("run_id").sort_index()
    ours = reading.load_runs(tmp_path).set_index("run_id").sort_index()
    assert list(typed.columns) == list(ours.columns)

    def same(value):
        if isinstance(value, np.ndarray):
            return list(value)
        return None if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)) else value

    differ = [c for c in ours.columns if [same(v) for v in typed[c]] != [same(v) for v in ours[c]]]
    assert differ == ["schema_version"] and sorted(typed["schema_version"]) == [2, 3, columns.SCHEMA_VERSION]
    changed = tmp_path / "runs" / "sweep=s3"
    changed.mkdir()
    pa.parquet.write_table(
        pa.table(
            {
                "run_id": ["x1"],
                "schema_version": pa.array([columns.SCHEMA_VERSION], pa.int16()),
                "decode_tok_s": ["fast"],
            }
        ),
        changed / "x1.parquet",
    )
    with pytest.raises(OmniError, match=r"x1\.parquet: column 'decode_tok_s': cannot read string as double"):
        reading.load_runs(tmp_path, sweep_id="s3")
