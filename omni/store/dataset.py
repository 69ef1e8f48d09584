"""The results dataset: one Parquet file per run, and the readers of it.

Layout: ``results/runs/sweep=<sweep_id>/<run_id>.parquet``. Each file holds a
single row with the full schema of the column registry (:mod:`omni.store.columns`),
so ``pandas.read_parquet("results/runs")`` works on the directory as it stands
(the hive directory adds a ``sweep`` column, which no registry column is
named). Files are written once, atomically, the moment a run ends and never
rewritten; old files stay readable through :func:`upgrade_table`. Readers take
the consolidated and compacted copies (:mod:`omni.store.compaction`) first, then the
run files none holds, so every row is read once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from omni.errors import OmniError, naming
from omni.store.columns import COLUMNS, COLUMNS_BY_NAME, SCHEMA_VERSION, Column, file_schema, schema
from omni.store.objstore import ResultsPath, S3Path, arrow_source, results_root
from omni.store.row_check import validate_row
from omni.store.side_tables import SIDE_TABLES

if TYPE_CHECKING:
    import pandas as pd

# a results location as callers give it: a directory, or s3://bucket/prefix
Results = str | Path | ResultsPath


# ----------------------------------------------------------------------- files

# Ids become path components and hive partition values: keep them plain, and
# never starting with "." or "_", which dataset discovery treats as hidden.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def run_path(results_dir: Results, sweep_id: str, run_id: str) -> ResultsPath:
    """Where the run's file lives: ``results_dir/runs/sweep=<id>/<run_id>.parquet``."""
    for what, value in (("sweep_id", sweep_id), ("run_id", run_id)):
        if not isinstance(value, str) or not _ID.match(value):
            raise OmniError(
                f"{what} {value!r} cannot name a results file: use letters, digits, "
                "'.', '_' and '-', starting with a letter or digit"
            )
    return _sweep_dir(results_dir, sweep_id) / f"{run_id}.parquet"


def _sweep_dir(results_dir: Results, sweep_id: str) -> ResultsPath:
    return results_root(results_dir) / "runs" / f"sweep={sweep_id}"


def write_run(results_dir: Results, row: Mapping[str, Any]) -> ResultsPath:
    """Validate ``row`` and write it as its run's file, atomically, once."""
    clean = validate_row(row)
    final = run_path(results_dir, clean["sweep_id"], clean["run_id"])
    return write_once(final, pa.Table.from_pylist([clean], schema=file_schema()))


# A one-row file gains nothing from column statistics (a reader reads the row)
# or dictionaries; without them it is 30 KB, not 82 KB (measured on a vLLM row).
# Compacted files (many rows of one sweep) keep both.
_ONE_ROW_OPTIONS = {"write_statistics": False, "use_dictionary": False}


def write_once(final: ResultsPath, table: pa.Table, **options: Any) -> ResultsPath:
    """Write ``table`` as Parquet to ``final``, atomically, never replacing anything.

    Locally the bytes go to a hidden temp file in the same directory, are
    fsynced, and are then hard-linked to the final name: unlike a rename, a
    link fails when the name exists, so a concurrent writer can never replace
    a stored file. A crash leaves at most a hidden temp file, which readers
    ignore. On S3 the object is one conditional PUT (``If-None-Match: *``).
    """
    options = options or (_ONE_ROW_OPTIONS if table.num_rows <= 1 else {})
    if isinstance(final, S3Path):
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **options)
        try:
            final.put_once(sink.getvalue().to_pybytes())
        except FileExistsError:
            raise _already_stored(final) from None
        return final
    if final.exists():
        raise _already_stored(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with naming(final), open(temp, "xb") as sink:
            pq.write_table(table, sink, **options)
            sink.flush()
            os.fsync(sink.fileno())
        os.link(temp, final)
    except FileExistsError:
        raise _already_stored(final) from None
    finally:
        temp.unlink(missing_ok=True)
    # The new name lives in the partition directory's entries; the partition
    # directory itself (when just made) in its dataset directory. Sync both.
    _fsync_dir(final.parent)
    _fsync_dir(final.parent.parent)
    return final


def read_parquet(path: ResultsPath, **options: Any) -> pa.Table:
    """One Parquet file, local or on S3 (``pq.read_table``'s options)."""
    source, filesystem = arrow_source(path)
    return pq.read_table(source, filesystem=filesystem, **options)


# ------------------------------------------------------- iterations and ops

# Side tables (omni.store.side_tables.SIDE_TABLES), one file per run in
# results/<kind>/sweep=<id>/<run_id>.parquet, written just before the run's own
# row (the run row is the commit: a side file without one is a run that never
# finished storing).
_SIDE_IDS = ("run_id", "sweep_id", "arm", "pass_index")


def side_path(results_dir: Results, kind: str, sweep_id: str, run_id: str) -> ResultsPath:
    run_path(results_dir, sweep_id, run_id)  # the same checks on the ids
    return results_root(results_dir) / kind / f"sweep={sweep_id}" / f"{run_id}.parquet"


def write_side_table(
    results_dir: Results, kind: str, row: Mapping[str, Any], records: list[Mapping[str, Any]]
) -> ResultsPath:
    """Store a run's records of side table ``kind`` (dicts with its schema's keys)."""
    table_schema = SIDE_TABLES[kind]
    ids = {k: row.get(k) for k in _SIDE_IDS}
    table = pa.Table.from_pylist(
        [{**ids, **{f.name: r.get(f.name) for f in table_schema if f.name not in ids}} for r in records],
        schema=table_schema,
    )
    final = side_path(results_dir, kind, ids["sweep_id"], ids["run_id"])
    if final.exists() and not run_path(results_dir, ids["sweep_id"], ids["run_id"]).exists():
        # left by a store interrupted between the two files: the run never
        # committed, and this rerun replaces it; kept, hidden from readers
        aside = final.parent / f".{final.stem}.{secrets.token_hex(4)}.uncommitted"
        final.move_aside(aside) if isinstance(final, S3Path) else final.rename(aside)
    return write_once(final, table, **({} if table.num_rows > 1 else _ONE_ROW_OPTIONS))


def load_side_table(results_dir: Results, kind: str, sweep_id: str | None = None) -> pd.DataFrame:
    """Every stored record of side table ``kind`` of committed runs, of all sweeps or of one."""
    import pandas as pd

    table_schema = SIDE_TABLES[kind]
    files = _partition_files(results_root(results_dir) / kind, sweep_id)
    # only committed runs: a side file is written just before its run's row
    committed = {(p.parent.name, p.stem) for p in run_files(results_dir, sweep_id)}
    files = [p for p in files if (p.parent.name, p.stem) in committed]
    if not files:
        return pd.DataFrame({f.name: pd.Series(dtype=object) for f in table_schema})
    return pa.concat_tables(read_parquet(p, schema=table_schema) for p in files).to_pandas()


def iterations_path(results_dir: Results, sweep_id: str, run_id: str) -> ResultsPath:
    return side_path(results_dir, "iterations", sweep_id, run_id)


def write_iterations(results_dir: Results, row: Mapping[str, Any], iterations: list[Mapping[str, Any]]) -> ResultsPath:
    return write_side_table(results_dir, "iterations", row, iterations)


def load_iterations(results_dir: Results, sweep_id: str | None = None) -> pd.DataFrame:
    return load_side_table(results_dir, "iterations", sweep_id)


def load_ops(results_dir: Results, sweep_id: str | None = None) -> pd.DataFrame:
    return load_side_table(results_dir, "ops", sweep_id)


def profiled(frame: pd.DataFrame) -> pd.Series:
    """Which rows are profiled passes: True, never null (rows before v5 were none)."""
    return frame["profiled"].eq(True).fillna(False).astype(bool)


class AlreadyStored(OmniError):
    """A results file that exists already: never replaced."""


def _already_stored(path: ResultsPath) -> OmniError:
    return AlreadyStored(
        f"run file {path} already exists: results are never rewritten; retract the run and record a new attempt instead"
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _partition_entries(dataset: ResultsPath, sweep_id: str | None = None) -> list[tuple[str, str]]:
    """(partition, file name) of ``dataset/sweep=*/*.parquet`` (or one
    sweep's), hidden and temp files left out. Names, not paths: at
    20,000 files making a pathlib path of each costs 0.8 s, more than all
    the rest of a consolidated read."""
    if isinstance(dataset, S3Path):  # one listing of the prefix: of one sweep's, when given
        base, prefix = (dataset / f"sweep={sweep_id}", f"sweep={sweep_id}/") if sweep_id else (dataset, "")
        found = []
        for rel, is_file in base.listing():
            partition, _, name = f"{prefix}{rel}".rpartition("/")
            if is_file and partition.startswith("sweep=") and "/" not in partition:
                found.append((partition, name))
    else:
        if sweep_id is not None:
            partitions = [f"sweep={sweep_id}"]
        else:
            try:
                partitions = [e.name for e in os.scandir(dataset) if e.name.startswith("sweep=") and e.is_dir()]
            except FileNotFoundError:
                return []
        found = []
        for partition in partitions:
            try:
                found += [(partition, e.name) for e in os.scandir(os.path.join(dataset, partition))]
            except (FileNotFoundError, NotADirectoryError):
                continue
    return [(p, n) for p, n in found if n.endswith(".parquet") and not n.startswith((".", "_"))]


def _partition_files(
    dataset: ResultsPath, sweep_id: str | None = None, unless: set[str] = frozenset()
) -> list[ResultsPath]:
    """The files of :func:`_partition_entries`, sorted, but those whose stem is in ``unless``."""
    entries = (e for e in _partition_entries(dataset, sweep_id) if e[1][: -len(".parquet")] not in unless)
    return [dataset / p / n for p, n in sorted(entries)]


def run_files(results_dir: Results, sweep_id: str | None = None, unless: set[str] = frozenset()) -> list[ResultsPath]:
    """Stored run files, of every sweep or of one; hidden temp files left out,
    and those of the run ids in ``unless``."""
    if sweep_id is not None and not _ID.match(sweep_id):
        return []  # no sweep id: nothing of it can be stored
    return _partition_files(results_root(results_dir) / "runs", sweep_id, unless)


def stored_run_ids(results_dir: Results, sweep_id: str) -> set[str]:
    """Run ids already stored for a sweep, from file names alone (for resume)."""
    return {p.stem for p in run_files(results_dir, sweep_id)}


def list_temp_files(results_dir: Results) -> list[Path]:
    """Hidden files left in run partitions, e.g. by a writer that crashed
    (none on S3: a PUT is all or nothing)."""
    runs = results_root(results_dir) / "runs"
    if isinstance(runs, S3Path):
        return []
    return sorted(p for p in runs.glob("sweep=*/.*") if p.is_file())


# --------------------------------------------------------------------- reading


# Upgrades keyed by the version they upgrade from: UPGRADES[1] takes a
# version-1 table to version 2.
def _v1_to_v2(table: pa.Table) -> pa.Table:
    """v2 added mmap, engine_env_key, engine_env_freeze_sha256: unknown (null) in
    v1 rows, which only ever came from the synthetic engine."""
    return table


def _v2_to_v3(table: pa.Table) -> pa.Table:
    """v3 added the memory policy and page placement columns (mempolicies_seen,
    mem_*_by_node, mem_*local_fraction, numa_by_proc, numa_maps_*), straddle and
    slots_override: not measured before, so null. Nothing else changed meaning,
    except mems_allowed_seen, which was always the cpuset and is now named so."""
    return table


def _v3_to_v4(table: pa.Table) -> pa.Table:
    """v4 added iterations, tpot_ms, the itl_p*_ms percentiles, the within-run
    spreads (*_iter_sd_log) and engine_config. A v3 run timed one iteration,
    so its metrics are that one sample; ``iterations`` stays null (not
    recorded). Two columns changed what they hold, not their type: env_vars
    was the orchestrator's environment and engine_env_freeze_sha256 hashed
    omni's own editable install too; v3 values are kept as they were."""
    return table


def _v4_to_v5(table: pa.Table) -> pa.Table:
    """v5 added profiled, profile_steps, profile_overhead and engine_perf: no
    run was profiled before, and the engines did not report phase totals."""
    return table


def _v5_to_v6(table: pa.Table) -> pa.Table:
    """v6 added hostname and numa_steady_missing: unknown before (null, as
    ``pd.read_parquet(..., schema=schema())`` reads them too)."""
    return table


def _v6_to_v7(table: pa.Table) -> pa.Table:
    """v7 added prompt_seed and the audits (tokens_mismatch_iterations,
    audit_repeat_ttft_*, audit_fresh_ttft_ms): not recorded before, so null. A v6 run timed the
    prompts of seed 0, and vLLM failed a run whose counts were off, but
    neither was stored: null says so, not a value made up for it."""
    return table


def _v7_to_v8(table: pa.Table) -> pa.Table:
    """v8 added compile_cache: not read from the log before, so null."""
    return table


def _v8_to_v9(table: pa.Table) -> pa.Table:
    """v9 added note (omni sweep --note): none was given before, so null."""
    return table


def _v9_to_v10(table: pa.Table) -> pa.Table:
    """v10 added what a run on a realistic shape needs to be defended: per-request
    timing (lock step or not), the KV its workload needs, the output head as
    loaded, interference measured during the run. None of it was measured
    before, so null; ``mmap`` of a vLLM row was null and means False (vLLM's
    weights are anonymous memory), which the v10 writer stores. An older row's
    per-node memory columns may come from a read before steady state (its
    ``numa_not_steady`` warning says so); ``memory_binding_verified`` null
    there means not assessed, not false."""
    return table


def _v10_to_v11(table: pa.Table) -> pa.Table:
    """v11 added serving runs (client_cpus, load_levels, capacity_*, slo): every
    earlier run was an offline one, so null."""
    return table


def _v11_to_v12(table: pa.Table) -> pa.Table:
    """v12 added the timed window's telemetry (switches, migrations, faults,
    steal, irq, frequency, energy, per thread): not measured before, so null."""
    return table


def _v12_to_v13(table: pa.Table) -> pa.Table:
    """v13 added the counts a run's pooled percentiles are over (*_samples) and
    each p99's 95 % upper bound (*_p99_upper95_ms): not stored before, so null.
    From v13 a capacity judges the SLO on that bound; a v12 capacity was judged
    on the point estimate and is kept as it was."""
    return table


def _v13_to_v14(table: pa.Table) -> pa.Table:
    """v14 added the iterations' lag-1 autocorrelation (*_iter_ac1_log): not
    stored before, so null. Its iterations are in results/iterations, but an
    upgrade reads one table; without it omni.stats.swing does not test the runs."""
    return table


UPGRADES: dict[int, Callable[[pa.Table], pa.Table]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
    8: _v8_to_v9,
    9: _v9_to_v10,
    10: _v10_to_v11,
    11: _v11_to_v12,
    12: _v12_to_v13,
    13: _v13_to_v14,
}


def upgrade_table(table: pa.Table, columns: list[str] | None = None) -> pa.Table:
    """Bring a table written with any earlier schema_version to the current one.

    Applies each upgrade in turn, then conforms the table to :func:`schema`:
    columns it lacks are added as nulls, narrower types are cast. A column the
    registry does not know is an error, not silently dropped.
    """
    version = _version_of(table)
    if version > SCHEMA_VERSION:
        raise OmniError(
            f"results written with schema_version {version}, newer than this omni "
            f"({SCHEMA_VERSION}): upgrade omni to read them"
        )
    for step in range(version, SCHEMA_VERSION):
        table = UPGRADES[step](table)
    return _conform(table, columns)


def _version_of(table: pa.Table) -> int:
    if "schema_version" not in table.column_names:
        return 1  # the oldest schema there is
    versions = {v for v in table.column("schema_version").to_pylist() if v is not None}
    if len(versions) > 1:
        raise OmniError(f"table mixes schema versions {sorted(versions)}: upgrade per file")
    return versions.pop() if versions else 1


def _conform(table: pa.Table, columns: list[str] | None = None) -> pa.Table:
    index = {name: i for i, name in enumerate(table.column_names)}
    unknown = [name for name in index if name not in COLUMNS_BY_NAME]
    if unknown:
        raise OmniError(
            f"columns {unknown} are not in schema version {SCHEMA_VERSION}: an upgrade function must map them"
        )
    rows = table.num_rows
    arrays = []
    wanted = COLUMNS if columns is None else [COLUMNS_BY_NAME[c] for c in columns]
    for col in wanted:
        if col.name == "schema_version":
            arrays.append(pa.array([SCHEMA_VERSION] * rows, col.type))
        elif col.name in index:
            arrays.append(_cast(table.column(index[col.name]), col))
        else:
            arrays.append(pa.nulls(rows, col.type))
    arrays = [a if isinstance(a, pa.ChunkedArray) else pa.chunked_array([a]) for a in arrays]
    full = schema()
    return pa.Table.from_arrays(arrays, schema=pa.schema([full.field(c.name) for c in wanted], metadata=full.metadata))


def _cast(values: pa.ChunkedArray, col: Column) -> pa.ChunkedArray:
    if values.type == col.type:
        return values
    try:
        return values.cast(col.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise OmniError(f"column {col.name!r}: cannot read {values.type} as {col.type}: {err}") from err


def _pandas_types() -> dict:
    """Nullable pandas dtypes, so an int column with a null stays an int column."""
    import pandas as pd

    return {
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }


def load_runs(results_dir: Results, sweep_id: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
    """Every stored run (or one sweep's) as one DataFrame with the registry's columns.

    Each file is read on its own and upgraded, so files of different schema
    versions load together. Ints and bools use pandas' nullable dtypes,
    timestamps are UTC-aware, list columns hold arrays. ``columns`` keeps
    only those (after the upgrade).
    """
    if columns is not None:
        unknown = [c for c in columns if c not in COLUMNS_BY_NAME]
        if unknown:
            raise OmniError(f"unknown column(s) {unknown}; see omni.store.columns.COLUMNS")
    return read_table(results_dir, sweep_id, columns).to_pandas(types_mapper=_pandas_types().get)


def read_table(results_dir: Results, sweep_id: str | None = None, columns: list[str] | None = None) -> pa.Table:
    """:func:`load_runs` as an Arrow table: every stored row once, from the
    consolidated files, the compacted parts none holds, and the run files no
    part holds (one sweep's: its parts and run files). Files are read on a
    thread pool (Parquet decoding and S3 reads release the GIL), each
    upgraded on its own."""
    results_dir = results_root(results_dir)  # once: parts are named relative to it
    asked = None if columns is None else list(dict.fromkeys([*columns, "run_id"]))
    consolidated = consolidated_files(results_dir) if sweep_id is None else []
    held = held_parts(results_dir, consolidated)
    tables = read_files(consolidated, asked)
    tables += read_files(
        [p for p in compacted_parts(results_dir, sweep_id) if part_name(results_dir, p) not in held], asked
    )
    covered = set().union(*(t.column("run_id").to_pylist() for t in tables)) if tables else set()
    tables += read_files(run_files(results_dir, sweep_id, unless=covered), asked)
    if not tables:
        empty = schema().empty_table()
        return empty if columns is None else empty.select(columns)
    table = pa.concat_tables(tables)
    return table if columns is None else table.select(columns)


# Files readers skipped in this process because they are no Parquet a writer
# finished (truncated, zero bytes, foreign): path -> why. Summaries list them.
UNREADABLE: dict[str, str] = {}
_UNREADABLE_LOCK = threading.Lock()
log = logging.getLogger("omni.store.dataset")


def unreadable_under(results_dir: Results) -> dict[str, str]:
    root = str(results_root(results_dir))
    with _UNREADABLE_LOCK:
        return {path: why for path, why in UNREADABLE.items() if path.startswith(root)}


def read_files(files: list[ResultsPath], columns: list[str] | None) -> list[pa.Table]:
    """Run files, parts or consolidated files, each upgraded (:func:`_read_run_file`),
    on a thread pool; unreadable ones left out."""
    from concurrent.futures import ThreadPoolExecutor

    if len(files) < 2:
        tables = [_read_run_file(p, columns) for p in files]
    else:
        workers = 16 if isinstance(files[0], S3Path) else min(8, (os.cpu_count() or 1) + 1)  # S3: waits, not CPU
        with ThreadPoolExecutor(max_workers=workers) as pool:
            tables = list(pool.map(lambda path: _read_run_file(path, columns), files))
    return [t for t in tables if t is not None]


def _parquet_file(path: ResultsPath, **options: Any) -> pq.ParquetFile:
    source, filesystem = arrow_source(path)
    return pq.ParquetFile(filesystem.open_input_file(source) if filesystem else source, **options)


def _read_run_file(path: ResultsPath, columns: list[str] | None = None) -> pa.Table | None:
    """One file, upgraded; with ``columns``, only those are read (upgrades see
    the projected table: one that derives a column from others must ask for them).
    None for a file that is no finished Parquet (truncated, empty, foreign):
    skipped with a warning naming it (:data:`UNREADABLE`). omni's writers
    never leave one, so it came from elsewhere. An I/O error is raised, not
    skipped: a flaky disk or network must not silently drop rows."""
    try:
        parquet = _parquet_file(path)
        if columns is None:
            table = parquet.read()
        else:
            wanted = {*columns, "schema_version"}
            table = parquet.read(columns=[n for n in parquet.schema_arrow.names if n in wanted])
    except pa.ArrowInvalid as err:
        with _UNREADABLE_LOCK:
            UNREADABLE[str(path)] = str(err).splitlines()[0]
        log.warning("skipped %s: not a readable Parquet file (%s); move it out of the results", path, err)
        return None
    except (OSError, pa.ArrowException) as err:
        raise OmniError(f"cannot read run file {path}: {err}; move it aside to go on") from err
    try:
        return upgrade_table(table, columns)
    except OmniError as err:
        raise OmniError(f"{path}: {err}") from None


def run_file_of(results_dir: Results, run_id: str) -> ResultsPath | None:
    """The stored file of a run id, whichever sweep it belongs to."""
    if not isinstance(run_id, str) or not _ID.match(run_id):
        return None
    found = [p for p in run_files(results_dir) if p.stem == run_id]
    return found[0] if found else None


# ---------------------------------------------------- compacted and consolidated

# Copies of stored rows that readers take first (omni.store.compaction writes them):
# ``compacted/sweep=<id>/part-NNNN.parquet``, a sweep's rows no earlier part
# holds, and ``consolidated/NNNNNN.parquet``, the rows of many parts, whose
# metadata (HOLDS) names the parts it holds. Each level is disjoint, so a
# reader takes the consolidated files, the parts none holds, then the run
# files no part holds, and counts every row once.
COMPACTED = "compacted"
CONSOLIDATED = "consolidated"
HOLDS = b"omni.parts"


def compacted_parts(results_dir: Results, sweep_id: str | None = None) -> list[ResultsPath]:
    return _partition_files(results_root(results_dir) / COMPACTED, sweep_id)


def consolidated_files(results_dir: Results) -> list[ResultsPath]:
    folder = results_root(results_dir) / CONSOLIDATED
    files = folder.glob("*.parquet") if isinstance(folder, S3Path) else sorted(folder.glob("*.parquet"))
    return [p for p in files if not p.name.startswith((".", "_"))]


def part_name(results_dir: Results, part: ResultsPath) -> str:
    """A part as consolidated files name it: ``compacted/sweep=<id>/part-NNNN.parquet``."""
    return str(part.relative_to(results_root(results_dir)))


def held_parts(results_dir: Results, consolidated: list[ResultsPath]) -> set[str]:
    """The parts (:func:`part_name`) whose rows these consolidated files hold."""
    held: set[str] = set()
    for path in consolidated:
        meta = _parquet_file(path).schema_arrow.metadata or {}
        held.update(json.loads(meta.get(HOLDS, b"[]")))
    return held


__all__ = [
    "AlreadyStored",
    "COMPACTED",
    "CONSOLIDATED",
    "HOLDS",
    "read_files",
    "compacted_parts",
    "consolidated_files",
    "held_parts",
    "part_name",
    "read_parquet",
    "write_once",
    "UPGRADES",
    "iterations_path",
    "load_ops",
    "load_side_table",
    "profiled",
    "side_path",
    "write_side_table",
    "load_iterations",
    "list_temp_files",
    "load_runs",
    "read_table",
    "run_file_of",
    "run_files",
    "write_iterations",
    "run_path",
    "stored_run_ids",
    "upgrade_table",
    "write_run",
]
