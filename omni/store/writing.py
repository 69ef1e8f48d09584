"""Writing the results dataset: a run's row and its side tables, each file
written once, atomically, the moment the run ends, and never rewritten
(:func:`write_once`; where the files go is :mod:`omni.store.layout`'s).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from omni.errors import OmniError, naming
from omni.store.columns import file_schema
from omni.store.layout import Results, run_path, side_path
from omni.store.objstore import ResultsPath, S3Path
from omni.store.row_check import validate_row
from omni.store.side_tables import SIDE_TABLES


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


def rows_as_text(table: pa.Table) -> str:
    """Rows as text to embed in a JSON file (a summary carries its sweep's
    rows, so it alone can be reproduced): base64 of a zstd Parquet file, the
    same bytes a results file holds, so types and schema upgrades are a
    results file's (:func:`omni.store.reading.rows_from_text`)."""
    import base64

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


# Side tables (omni.store.side_tables.SIDE_TABLES), one file per run in
# results/<kind>/sweep=<id>/<run_id>.parquet, written just before the run's own
# row (the run row is the commit: a side file without one is a run that never
# finished storing).
_SIDE_IDS = ("run_id", "sweep_id", "arm", "pass_index")


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


def write_iterations(results_dir: Results, row: Mapping[str, Any], iterations: list[Mapping[str, Any]]) -> ResultsPath:
    return write_side_table(results_dir, "iterations", row, iterations)


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


__all__ = [
    "AlreadyStored",
    "rows_as_text",
    "write_iterations",
    "write_once",
    "write_run",
    "write_side_table",
]
