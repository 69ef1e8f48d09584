"""The results dataset: registry, validation, atomic writes, reading back."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet  # noqa: F401 - pa.parquet
import pytest

from omni.errors import OmniError
from omni.store import columns, compaction, layout, reading, row_check, upgrades, writing
from tests.rows import T0, full_row, store_full_rows

FIXTURES = Path(__file__).parents[1] / "fixtures"

METRICS = [c.name for c in columns.COLUMNS if c.group == "metrics"]


# ---------------------------------------------------------------- registry


def test_registry_names_are_unique_and_every_column_is_explained():
    names = [c.name for c in columns.COLUMNS]
    assert len(names) == len(set(names))
    assert all(c.meaning for c in columns.COLUMNS)
    assert {c.group for c in columns.COLUMNS} == {
        "identity",
        "arm",
        "placement",
        "metrics",
        "serving",
        "roofs",
        "provenance",
        "validity",
    }
    # The hive directory sweep=<id> adds a "sweep" column when pandas reads it.
    assert "sweep" not in names


def test_schema_carries_units_meanings_and_directions():
    sch = columns.schema()
    assert sch.names == [c.name for c in columns.COLUMNS]
    assert sch.field("ttft_ms").metadata[b"unit"] == b"ms"
    assert sch.field("decode_tok_s").metadata[b"better"] == b"higher"
    assert columns.COLUMNS_BY_NAME["rss_anon_tree_mb"].better == "lower"
    assert sch.field("started_at").type == pa.timestamp("us", tz="UTC")


# -------------------------------------------------------------- validation


def test_validate_fills_missing_columns_and_sets_version():
    row = row_check.validate_row({"run_id": "r", "sweep_id": "s", "status": "failed"})
    assert list(row) == [c.name for c in columns.COLUMNS]
    assert row["schema_version"] == columns.SCHEMA_VERSION
    assert row["decode_tok_s"] is None


def test_validate_dumps_json_columns_with_sorted_keys():
    row = row_check.validate_row(full_row() | {"env_vars": {"b": "1", "a": "2"}})
    assert row["env_vars"] == '{"a": "2", "b": "1"}'
    assert row["command"] == '["numactl", "--physcpubind=0-1", "python"]'
    assert row["arm_json"] == '{"name":"kv-4g"}'  # strings are kept as given


def test_unknown_column_is_rejected_with_suggestion():
    with pytest.raises(OmniError, match=r"'decode_toks'.*did you mean 'decode_tok_s'"):
        row_check.validate_row(full_row() | {"decode_toks": 1.0})


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("threads", "2", "an integer"),
        ("threads", 2.0, "an integer"),
        ("threads", True, "an integer"),
        ("pass_index", 2**31, "fits int32"),
        ("decode_tok_s", "fast", "a finite number"),
        ("decode_tok_s", float("inf"), "a finite number"),
        ("binding_ok", 1, "a bool"),
        ("cpus", "0-3", "a list"),
        ("cpus", [0, "1"], "a list of integers"),
        ("patches", ["a", 1], "a list of strings"),
        ("started_at", datetime(2026, 1, 1), "timezone-aware"),
        ("started_at", "2026-01-01", "a datetime"),
        ("engine_params", "{not json", "a JSON string"),
        ("engine_params", {"path": Path("/x")}, "JSON-serialisable"),
        ("binding_method", "taskset", "one of numactl"),
    ],
)
def test_wrong_type_is_rejected_naming_column_and_value(column, value, expected):
    with pytest.raises(OmniError, match=rf"'{column}'.*{expected}"):
        row_check.validate_row(full_row() | {column: value})


@pytest.mark.parametrize("status", ["OK", "crashed", None])
def test_bad_status_is_rejected(status):
    with pytest.raises(OmniError, match="status"):
        row_check.validate_row(full_row() | {"status": status})


def test_nan_counts_as_missing():
    assert row_check.validate_row(full_row() | {"ttft_ms": float("nan")})["ttft_ms"] is None


# ------------------------------------------------------------------ writing


def test_write_and_load_round_trip(tmp_path):
    path = writing.write_run(tmp_path, full_row())
    assert path == tmp_path / "runs" / "sweep=s1" / "r0001.parquet"
    df = reading.load_runs(tmp_path)
    assert len(df) == 1
    got = df.iloc[0]
    assert got["run_id"] == "r0001" and got["status"] == "ok"
    assert got["schema_version"] == columns.SCHEMA_VERSION
    assert got["kv_cache_bytes"] == 4 * 2**30
    assert got["decode_tok_s"] == 291.0
    assert not got["forced"] and got["binding_ok"]
    assert list(got["cpus"]) == [0, 1] and list(got["membind"]) == [0]
    assert list(got["patches"]) == ["aot_finalize", "kv_env_override"]
    assert list(got["warnings"]) == []
    assert got["started_at"] == T0
    assert got["finished_at"] == T0 + timedelta(seconds=40)
    assert pd.isna(got["prefill_tok_s"]) and pd.isna(got["slot_index"])
    assert got["cpus_allowed_seen"] is None


def test_loaded_dtypes(tmp_path):
    writing.write_run(tmp_path, full_row("r1"))
    writing.write_run(tmp_path, {"run_id": "r2", "sweep_id": "s1", "status": "failed"})
    df = reading.load_runs(tmp_path)
    assert str(df["pass_index"].dtype) == "Int32"  # ints stay ints beside nulls
    assert str(df["schema_version"].dtype) == "Int16"
    assert str(df["kv_cache_bytes"].dtype) == "Int64"
    assert str(df["binding_ok"].dtype) == "boolean"
    assert df["decode_tok_s"].dtype == "float64"
    assert str(df["started_at"].dtype) == "datetime64[us, UTC]"
    assert df["pass_index"].isna().tolist() == [False, True]


def test_empty_results_give_empty_frame_with_columns(tmp_path):
    df = reading.load_runs(tmp_path / "nothing-here")
    assert df.empty
    assert list(df.columns) == [c.name for c in columns.COLUMNS]
    assert str(df["threads"].dtype) == "Int32"


def test_failed_run_with_no_metrics_round_trips(tmp_path):
    failed = {
        "run_id": "r-fail",
        "sweep_id": "s1",
        "arm": "kv-4g",
        "status": "failed",
        "exit_code": -9,
        "error": "engine killed by SIGKILL",
        "stderr_tail": "Traceback ...\nMemoryError\n",
    } | {name: None for name in METRICS}
    writing.write_run(tmp_path, failed)
    got = reading.load_runs(tmp_path).iloc[0]
    assert got["status"] == "failed" and got["exit_code"] == -9
    assert got["stderr_tail"].endswith("MemoryError\n")
    assert all(pd.isna(got[name]) for name in METRICS)


def test_loaded_row_validates_again(tmp_path):
    # Rows read back (NaN, pd.NA, numpy arrays, Timestamps) are valid input.
    writing.write_run(tmp_path, full_row())
    row = reading.load_runs(tmp_path).iloc[0].to_dict()
    again = row_check.validate_row(row | {"run_id": "r0002"})
    assert again["cpus"] == [0, 1] and again["slot_index"] is None
    writing.write_run(tmp_path, again)
    assert len(reading.load_runs(tmp_path)) == 2


def test_pandas_reads_the_directory_directly(tmp_path):
    writing.write_run(tmp_path, full_row("r1", "s1"))
    writing.write_run(tmp_path, full_row("r2", "s1"))
    writing.write_run(tmp_path, full_row("r3", "s2"))
    df = pd.read_parquet(tmp_path / "runs")
    assert sorted(df["run_id"]) == ["r1", "r2", "r3"]
    assert sorted(df["sweep"].astype(str)) == ["s1", "s1", "s2"]
    assert sorted(df["sweep_id"]) == ["s1", "s1", "s2"]


def test_write_never_overwrites(tmp_path):
    path = writing.write_run(tmp_path, full_row())
    before = path.read_bytes()
    with pytest.raises(OmniError, match="never rewritten"):
        writing.write_run(tmp_path, full_row() | {"decode_tok_s": 1.0})
    assert path.read_bytes() == before
    assert layout.list_temp_files(tmp_path) == []


def test_concurrent_writer_of_the_same_run_wins(tmp_path, monkeypatch):
    # Another process stores the run between our existence check and our
    # rename: its file must survive, ours must not replace it.
    final = layout.run_path(tmp_path, "s1", "r0001")
    real_write = writing.pq.write_table

    def write_then_race(table, sink, **options):
        real_write(table, sink, **options)
        final.write_bytes(b"the other writer's run")

    monkeypatch.setattr(writing.pq, "write_table", write_then_race)
    with pytest.raises(OmniError, match="never rewritten"):
        writing.write_run(tmp_path, full_row())
    assert final.read_bytes() == b"the other writer's run"
    assert layout.list_temp_files(tmp_path) == []


def test_write_leaves_no_temp_file(tmp_path):
    writing.write_run(tmp_path, full_row("r1"))
    writing.write_run(tmp_path, full_row("r2"))
    assert layout.list_temp_files(tmp_path) == []
    assert sorted(p.name for p in (tmp_path / "runs" / "sweep=s1").iterdir()) == [
        "r1.parquet",
        "r2.parquet",
    ]


def test_temp_file_left_by_a_crash_is_ignored(tmp_path):
    path = writing.write_run(tmp_path, full_row("r1"))
    # A writer killed mid-write leaves a hidden, truncated file behind.
    crashed = path.with_name(".r2.parquet.4242.deadbeef.tmp")
    crashed.write_bytes(path.read_bytes()[:100])
    assert layout.list_temp_files(tmp_path) == [crashed]
    assert reading.load_runs(tmp_path)["run_id"].tolist() == ["r1"]
    assert pd.read_parquet(tmp_path / "runs")["run_id"].tolist() == ["r1"]
    assert layout.stored_run_ids(tmp_path, "s1") == {"r1"}


def test_stored_run_ids(tmp_path):
    assert layout.stored_run_ids(tmp_path, "s1") == set()
    writing.write_run(tmp_path, full_row("r1", "s1"))
    writing.write_run(tmp_path, full_row("r2", "s1"))
    writing.write_run(tmp_path, full_row("r3", "s2"))
    assert layout.stored_run_ids(tmp_path, "s1") == {"r1", "r2"}


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "a/b", "", "sweep=1"])
def test_ids_must_be_safe_file_names(tmp_path, bad):
    with pytest.raises(OmniError, match="cannot name a results file"):
        writing.write_run(tmp_path, full_row(run_id=bad))
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------- old schemas


def test_old_schema_fixture_upgrades(tmp_path):
    # run_v1_subset.parquet: written with 9 of the columns, pass_index as
    # int64, cpus as list<int64> and a naive started_at, as an early writer did.
    partition = tmp_path / "runs" / "sweep=s-2026-11-01"
    partition.mkdir(parents=True)
    shutil.copy(FIXTURES / "run_v1_subset.parquet", partition / "r-old-0001.parquet")
    writing.write_run(tmp_path, full_row("r-new", "s-2026-11-01"))
    df = reading.load_runs(tmp_path).set_index("run_id")
    old = df.loc["r-old-0001"]
    assert old["pass_index"] == 2 and str(df["pass_index"].dtype) == "Int32"
    assert old["decode_tok_s"] == 41.5
    assert list(old["cpus"]) == [0, 1, 2, 3]
    assert old["started_at"] == datetime(2026, 11, 1, 3, 4, 5, tzinfo=UTC)
    assert pd.isna(old["ttft_ms"]) and pd.isna(old["engine"])
    assert old["schema_version"] == columns.SCHEMA_VERSION


def test_v2_file_reads_with_the_memory_placement_columns_unknown(tmp_path):
    # run_v2.parquet: written by the schema-2 writer (before memory policy and
    # page placement were measured), where mems_allowed_seen was all there was
    partition = tmp_path / "runs" / "sweep=s-2026-11-20"
    partition.mkdir(parents=True)
    shutil.copy(FIXTURES / "run_v2.parquet", partition / "r-v2-0001.parquet")
    old = reading.load_runs(tmp_path).set_index("run_id").loc["r-v2-0001"]
    assert old["schema_version"] == columns.SCHEMA_VERSION
    assert old["binding_ok"] and list(old["mems_allowed_seen"]) == [0]
    for column in (
        "mempolicies_seen",
        "mem_anon_kib_by_node",
        "mem_local_fraction",
        "numa_by_proc",
        "straddle",
        "slots_override",
        "numa_maps_reads",
    ):
        assert old[column] is None or pd.isna(old[column]), column


def test_upgrade_table_conforms_to_current_schema():
    old = pa.table({"run_id": ["r"], "sweep_id": ["s"], "status": ["ok"]})
    assert upgrades.upgrade_table(old).schema == columns.schema()


def test_upgrade_refuses_newer_and_unknown():
    newer = pa.table({"schema_version": pa.array([columns.SCHEMA_VERSION + 1], pa.int16())})
    with pytest.raises(OmniError, match="upgrade omni"):
        upgrades.upgrade_table(newer)
    with pytest.raises(OmniError, match="'mystery'"):
        upgrades.upgrade_table(pa.table({"run_id": ["r"], "mystery": [1]}))


def test_v3_file_reads_with_the_iteration_columns_unknown(tmp_path):
    # run_v3.parquet: written by the schema-3 writer, one timed sample per run
    partition = tmp_path / "runs" / "sweep=s-2026-11-28"
    partition.mkdir(parents=True)
    shutil.copy(FIXTURES / "run_v3.parquet", partition / "r-v3-0001.parquet")
    writing.write_run(tmp_path, full_row("r-new", "s-2026-11-28") | {"iterations": 5, "tpot_ms": 2.5})
    frame = reading.load_runs(tmp_path).set_index("run_id")
    old = frame.loc["r-v3-0001"]
    assert old["schema_version"] == columns.SCHEMA_VERSION and old["decode_tok_s"] == 402.0
    for column in ("iterations", "tpot_ms", "itl_p99_ms", "decode_tok_s_iter_sd_log"):
        assert pd.isna(old[column]), column
    assert frame.loc["r-new", "iterations"] == 5


def test_v12_file_reads_with_the_percentile_counts_unknown_and_its_capacity_kept(tmp_path):
    # run_v12.parquet: written by the schema-12 writer (tests.rows.full_row with a
    # capacity), before the p99 columns had their counts and 95 % upper bounds
    partition = tmp_path / "runs" / "sweep=s-2026-12-10"
    partition.mkdir(parents=True)
    shutil.copy(FIXTURES / "run_v12.parquet", partition / "r-v12-0001.parquet")
    old = reading.load_runs(tmp_path).set_index("run_id").loc["r-v12-0001"]
    assert old["schema_version"] == columns.SCHEMA_VERSION and old["itl_p99_ms"] == 12.5
    for column in ("itl_samples", "ttft_samples", "tpot_samples", "itl_p99_upper95_ms", "ttft_p99_upper95_ms"):
        assert pd.isna(old[column]), column
    assert old["capacity_concurrency"] == 3.5  # judged on the point estimate then, kept as it was


def test_iterations_table_round_trips_and_needs_its_run(tmp_path):
    row = full_row("r1", "s1")
    its = [
        {"iteration": i, "ttft_ms": 10.0 + i, "decode_tok_s": 100.0, "steps": 2, "step_ms": [4.0, 5.0]}
        for i in range(3)
    ]
    writing.write_iterations(tmp_path, row, its)
    # written first, committed by the run's own row: not read before it
    assert reading.load_iterations(tmp_path, "s1").empty
    writing.write_run(tmp_path, row)
    got = reading.load_iterations(tmp_path, "s1")
    assert list(got["iteration"]) == [0, 1, 2] and set(got["run_id"]) == {"r1"} and set(got["arm"]) == {"kv-4g"}
    assert list(got.iloc[0]["step_ms"]) == [4.0, 5.0]
    assert len(pd.read_parquet(tmp_path / "iterations")) == 3  # plain pandas, as the README shows
    with pytest.raises(OmniError, match="already exists"):
        writing.write_iterations(tmp_path, row, its)


def test_uncommitted_iterations_are_set_aside_by_the_rerun(tmp_path):
    # a store interrupted between the iterations file and the run's row: the
    # resume reruns the same run id; the stale file is kept, hidden
    row = full_row("r1", "s1")
    writing.write_iterations(tmp_path, row, [{"iteration": 0, "ttft_ms": 99.0}])
    writing.write_iterations(tmp_path, row, [{"iteration": 0, "ttft_ms": 11.0}])
    writing.write_run(tmp_path, row)
    assert list(reading.load_iterations(tmp_path)["ttft_ms"]) == [11.0]
    hidden = list((tmp_path / "iterations" / "sweep=s1").glob(".r1.*.uncommitted"))
    assert len(hidden) == 1


# ------------------------------------------------------------------ compaction


def test_compaction_counts_every_row_once_for_omni_and_for_pandas(tmp_path):
    first = store_full_rows(tmp_path, "s1", 5)
    other = store_full_rows(tmp_path, "s2", 3)
    part = compaction.compact_sweep(tmp_path, "s1")
    assert part == tmp_path / "compacted" / "sweep=s1" / "part-0000.parquet"
    assert compaction.compact_sweep(tmp_path, "s1") is None  # nothing new
    loaded = reading.load_runs(tmp_path)
    assert sorted(loaded["run_id"]) == sorted(first + other)  # s1 from its part, s2 from run files
    # a late row (a resumed run) after the compaction: read from its run file, then its own part
    late = store_full_rows(tmp_path, "s1", 1, start=5)
    assert sorted(reading.load_runs(tmp_path, "s1")["run_id"]) == sorted(first + late)
    assert compaction.compact_sweep(tmp_path, "s1").name == "part-0001.parquet"
    assert pd.read_parquet(tmp_path / "compacted" / "sweep=s1" / "part-0001.parquet")["run_id"].tolist() == late
    for frame in (reading.load_runs(tmp_path), pd.read_parquet(tmp_path / "runs")):
        assert frame["run_id"].is_unique and len(frame) == 9
    # the parts are disjoint, so the compacted dataset alone counts no row twice either
    assert sorted(pd.read_parquet(tmp_path / "compacted")["run_id"]) == sorted(first + late)
    # resume still sees every run: run files are never removed
    assert layout.stored_run_ids(tmp_path, "s1") == set(first + late)
    # a retracted sweep's rows, read from its parts, and a retracted run's are left out
    from omni.store.retract import retract, without_retracted

    retract(tmp_path, "s1", "wrong model")
    retract(tmp_path, other[0], "a busy neighbour")
    kept, excluded = without_retracted(reading.load_runs(tmp_path), tmp_path)
    assert sorted(kept["run_id"]) == sorted(other[1:]) and excluded == len(first + late) + 1


def test_a_compacted_row_reads_back_as_its_run_file_does(tmp_path):
    store_full_rows(tmp_path, "s1", 3)
    before = reading.load_runs(tmp_path).sort_values("run_id").reset_index(drop=True)
    compaction.compact_sweep(tmp_path, "s1")
    after = reading.load_runs(tmp_path).sort_values("run_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(before, after)
    assert reading.load_runs(tmp_path, columns=["run_id", "decode_tok_s"]).columns.tolist() == [
        "run_id",
        "decode_tok_s",
    ]


def test_racing_compactions_write_disjoint_parts(tmp_path, monkeypatch):
    # another compaction writes part 0 between our look at the parts and our
    # write: ours must not replace it, and must hold only what part 0 lacks
    first = store_full_rows(tmp_path, "s1", 4)
    real_parts = layout.compacted_parts
    looks = []

    def stale_then_real(results, sweep_id=None):
        looks.append(sweep_id)
        if len(looks) == 1:
            writing.write_once(
                tmp_path / "compacted" / "sweep=s1" / "part-0000.parquet",
                reading.read_table(tmp_path, "s1").slice(0, 2).cast(columns.file_schema()),
            )
            return []
        return real_parts(results, sweep_id)

    monkeypatch.setattr(compaction, "compacted_parts", stale_then_real)
    part = compaction.compact_sweep(tmp_path, "s1")
    monkeypatch.undo()
    assert part.name == "part-0001.parquet"
    held = [pd.read_parquet(p)["run_id"].tolist() for p in layout.compacted_parts(tmp_path, "s1")]
    assert len(held[0]) == 2 and sorted(held[0] + held[1]) == sorted(first)
    assert sorted(reading.load_runs(tmp_path)["run_id"]) == sorted(first)


def test_retracting_a_run_of_a_compacted_sweep(tmp_path):
    from omni.store.retract import retract, without_retracted

    ids = store_full_rows(tmp_path, "s1", 3)
    compaction.compact_sweep(tmp_path, "s1")
    retract(tmp_path, ids[1], "the slot was shared")
    kept, excluded = without_retracted(reading.load_runs(tmp_path, "s1"), tmp_path)
    assert sorted(kept["run_id"]) == [ids[0], ids[2]] and excluded == 1


def test_one_row_files_carry_no_statistics_or_registry_text(tmp_path):
    import pyarrow.parquet as pq

    path = writing.write_run(tmp_path, full_row())
    meta = pq.ParquetFile(path).metadata
    assert all(meta.row_group(0).column(i).statistics is None for i in range(meta.num_columns))
    assert all(not f.metadata for f in pq.read_schema(path))  # meanings stay in the registry
    assert reading.load_runs(tmp_path).loc[0, "decode_tok_s"] == 291.0


def test_consolidation_merges_loose_parts_and_still_counts_every_row_once(tmp_path):
    from omni.store.retract import retract, without_retracted

    sweeps = {f"s{i}": store_full_rows(tmp_path, f"s{i}", 3) for i in range(3)}
    for sweep_id in sweeps:
        compaction.compact_sweep(tmp_path, sweep_id)
    assert compaction.consolidate(tmp_path, at=4) is None  # 3 loose parts: not yet
    merged = compaction.consolidate(tmp_path, at=3)
    assert merged == tmp_path / "consolidated" / "000000.parquet"
    assert reading.held_parts(tmp_path, [merged]) == {f"compacted/sweep={s}/part-0000.parquet" for s in sweeps}
    assert compaction.consolidate(tmp_path, at=1) is None  # every part is held
    everyone = sorted(r for ids in sweeps.values() for r in ids)
    late = store_full_rows(tmp_path, "s1", 1, start=3)  # a run file, then its own loose part
    for _ in range(2):
        frame = reading.load_runs(tmp_path)
        assert frame["run_id"].is_unique and sorted(frame["run_id"]) == sorted(everyone + late)
        assert sorted(reading.load_runs(tmp_path, "s1")["run_id"]) == sorted(sweeps["s1"] + late)
        compaction.compact_sweep(tmp_path, "s1")
    # each level alone holds each of its rows once, and runs/ stays the whole truth
    assert sorted(pd.read_parquet(tmp_path / "consolidated")["run_id"]) == everyone
    assert sorted(pd.read_parquet(tmp_path / "runs")["run_id"]) == sorted(everyone + late)
    # a retracted sweep held by a consolidated file: left out by id
    retract(tmp_path, "s2", "wrong model")
    kept, _ = without_retracted(reading.load_runs(tmp_path), tmp_path)
    assert set(kept["run_id"]) == set(sweeps["s0"] + sweeps["s1"] + late)


def test_s3_engine_files_go_to_the_users_cache_not_the_working_directory(tmp_path, monkeypatch):
    from omni.store.objstore import local_scratch

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OMNI_LOCAL_DIR", raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert local_scratch("s3://bucket/pre/fix") == tmp_path / "cache" / "omni" / "local" / "bucket" / "pre/fix"
    monkeypatch.setenv("OMNI_LOCAL_DIR", str(tmp_path / "chosen"))
    assert local_scratch("s3://bucket/p") == tmp_path / "chosen" / "bucket" / "p"
    assert local_scratch(tmp_path / "results") == tmp_path / "results"
