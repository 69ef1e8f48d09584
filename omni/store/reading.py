"""Reading the results dataset: every stored row once, upgraded
(:mod:`omni.store.upgrades`), as pandas or Arrow, and the side tables of
committed runs.

Each run file holds a single row with the full schema of the column registry
(:mod:`omni.store.columns`), so ``pandas.read_parquet("results/runs")`` works
on the directory as it stands (the hive directory adds a ``sweep`` column,
which no registry column is named); old files stay readable through
:func:`omni.store.upgrades.upgrade_table`. Readers take the consolidated and
compacted copies (:mod:`omni.store.compaction`) first, then the run files none
holds, so every row is read once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from omni.errors import OmniError
from omni.store.columns import COLUMNS_BY_NAME, schema
from omni.store.layout import (
    HOLDS,
    Results,
    compacted_parts,
    consolidated_files,
    part_name,
    partition_files,
    run_files,
)
from omni.store.objstore import ResultsPath, S3Path, arrow_source, results_root
from omni.store.side_tables import SIDE_TABLES
from omni.store.upgrades import upgrade_table

if TYPE_CHECKING:
    import pandas as pd


def read_parquet(path: ResultsPath, **options: Any) -> pa.Table:
    """One Parquet file, local or on S3 (``pq.read_table``'s options)."""
    source, filesystem = arrow_source(path)
    return pq.read_table(source, filesystem=filesystem, **options)


def load_side_table(results_dir: Results, kind: str, sweep_id: str | None = None) -> pd.DataFrame:
    """Every stored record of side table ``kind`` of committed runs, of all sweeps or of one."""
    import pandas as pd

    table_schema = SIDE_TABLES[kind]
    files = partition_files(results_root(results_dir) / kind, sweep_id)
    # only committed runs: a side file is written just before its run's row
    committed = {(p.parent.name, p.stem) for p in run_files(results_dir, sweep_id)}
    files = [p for p in files if (p.parent.name, p.stem) in committed]
    if not files:
        return pd.DataFrame({f.name: pd.Series(dtype=object) for f in table_schema})
    return pa.concat_tables(read_parquet(p, schema=table_schema) for p in files).to_pandas()


def load_iterations(results_dir: Results, sweep_id: str | None = None) -> pd.DataFrame:
    return load_side_table(results_dir, "iterations", sweep_id)


def load_ops(results_dir: Results, sweep_id: str | None = None) -> pd.DataFrame:
    return load_side_table(results_dir, "ops", sweep_id)


def profiled(frame: pd.DataFrame) -> pd.Series:
    """Which rows are profiled passes: True, never null (rows before v5 were none)."""
    return frame["profiled"].eq(True).fillna(False).astype(bool)


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
log = logging.getLogger("omni.store.reading")


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


def load_file(path: ResultsPath) -> pd.DataFrame:
    """One Parquet file of omni's rows (a run file, a compacted part, a
    consolidated file, or a copy of one anywhere), upgraded as :func:`load_runs`'s."""
    table = _read_run_file(path)
    if table is None:
        raise OmniError(f"{path}: not a Parquet file omni can read ({UNREADABLE.get(str(path), 'unreadable')})")
    return table.to_pandas(types_mapper=_pandas_types().get)


def rows_from_text(text: str, where: str) -> pd.DataFrame:
    """The rows :func:`omni.store.writing.rows_as_text` embedded, upgraded as
    :func:`load_runs`'s; ``where`` names the file they came from in an error."""
    import base64
    import binascii

    try:
        table = pq.read_table(pa.BufferReader(base64.b64decode(text, validate=True)))
    except (binascii.Error, ValueError, pa.ArrowException) as err:
        raise OmniError(f"{where}: its embedded rows are not base64 Parquet ({str(err).splitlines()[0]})") from None
    try:
        return upgrade_table(table).to_pandas(types_mapper=_pandas_types().get)
    except OmniError as err:
        raise OmniError(f"{where}: {err}") from None


def held_parts(results_dir: Results, consolidated: list[ResultsPath]) -> set[str]:
    """The parts (:func:`part_name`) whose rows these consolidated files hold."""
    held: set[str] = set()
    for path in consolidated:
        meta = _parquet_file(path).schema_arrow.metadata or {}
        held.update(json.loads(meta.get(HOLDS, b"[]")))
    return held


__all__ = [
    "UNREADABLE",
    "held_parts",
    "load_iterations",
    "load_ops",
    "load_runs",
    "load_side_table",
    "profiled",
    "read_files",
    "read_parquet",
    "read_table",
    "rows_from_text",
    "unreadable_under",
]
