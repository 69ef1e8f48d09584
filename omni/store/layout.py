"""Where each file of the results dataset lives, and which are stored.

Layout: ``results/runs/sweep=<sweep_id>/<run_id>.parquet``, one file per run
(:mod:`omni.store.writing` writes it); each side table the same way under
``results/<kind>/``; and the compacted and consolidated copies readers take
first (:mod:`omni.store.compaction` writes them, :mod:`omni.store.reading`
reads them). Here: the paths, the checks on the ids that name them, and the
listings of stored files (from names alone, nothing read).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from omni.errors import OmniError
from omni.store.objstore import ResultsPath, S3Path, results_root

# a results location as callers give it: a directory, or s3://bucket/prefix
Results = str | Path | ResultsPath


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


# Side tables (omni.store.side_tables.SIDE_TABLES): one file per run in
# results/<kind>/sweep=<id>/<run_id>.parquet (omni.store.writing).
def side_path(results_dir: Results, kind: str, sweep_id: str, run_id: str) -> ResultsPath:
    run_path(results_dir, sweep_id, run_id)  # the same checks on the ids
    return results_root(results_dir) / kind / f"sweep={sweep_id}" / f"{run_id}.parquet"


def iterations_path(results_dir: Results, sweep_id: str, run_id: str) -> ResultsPath:
    return side_path(results_dir, "iterations", sweep_id, run_id)


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


def partition_files(
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
    return partition_files(results_root(results_dir) / "runs", sweep_id, unless)


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
    return partition_files(results_root(results_dir) / COMPACTED, sweep_id)


def consolidated_files(results_dir: Results) -> list[ResultsPath]:
    folder = results_root(results_dir) / CONSOLIDATED
    files = folder.glob("*.parquet") if isinstance(folder, S3Path) else sorted(folder.glob("*.parquet"))
    return [p for p in files if not p.name.startswith((".", "_"))]


def part_name(results_dir: Results, part: ResultsPath) -> str:
    """A part as consolidated files name it: ``compacted/sweep=<id>/part-NNNN.parquet``."""
    return str(part.relative_to(results_root(results_dir)))


__all__ = [
    "COMPACTED",
    "CONSOLIDATED",
    "HOLDS",
    "Results",
    "compacted_parts",
    "consolidated_files",
    "iterations_path",
    "list_temp_files",
    "part_name",
    "partition_files",
    "run_file_of",
    "run_files",
    "run_path",
    "side_path",
    "stored_run_ids",
]
