"""Retraction: a bad result is withdrawn with a reason, never deleted.

``results/retractions/`` is an append-only table: one Parquet file per
retraction (``pd.read_parquet("results/retractions")`` reads it whole), each
naming its target (a run, a sweep, or a file under ``results/``), the run ids
it withdraws, the reason and, optionally, what supersedes it. Run files are
never rewritten or deleted; summaries leave retracted runs out and say how
many they left out (:func:`without_retracted`, :func:`ok_rows`: the rows every
verdict, comparison and calibration reads).
"""

from __future__ import annotations

import getpass
import secrets
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow as pa

from omni.errors import OmniError
from omni.store.layout import run_file_of, stored_run_ids
from omni.store.objstore import SCHEME, ResultsPath, S3Path, results_root
from omni.store.reading import load_runs, profiled, read_parquet
from omni.store.writing import write_once

SCHEMA = pa.schema(
    [
        ("retraction_id", pa.string()),
        ("target_kind", pa.string()),  # run | sweep | file
        ("target", pa.string()),
        ("run_ids", pa.list_(pa.string())),
        ("reason", pa.string()),
        ("superseded_by", pa.string()),
        ("retracted_at", pa.timestamp("us", tz="UTC")),
        ("retracted_by", pa.string()),
    ]
)


def retractions_dir(results: str | Path | ResultsPath) -> ResultsPath:
    return results_root(results) / "retractions"


def resolve_target(results: Path, target: str) -> tuple[str, str, list[str]]:
    """(kind, canonical target, run ids) of a run id, a sweep id or a file."""
    results = results_root(results)
    if run_file_of(results, target):
        return "run", target, [target]
    if stored_run_ids(results, target):
        frame = load_runs(results, sweep_id=target, columns=["run_id"])
        return "sweep", target, sorted(frame["run_id"])
    for candidate in _file_candidates(results, target):
        if candidate.is_file():
            try:
                inside = candidate.resolve().relative_to(results)
            except ValueError:
                raise OmniError(f"{target} is not under {results}: only results files can be retracted") from None
            if candidate.suffix != ".parquet" or inside.parts[0] != "runs":
                raise OmniError(f"{target} is not a run file (results/runs/sweep=*/RUN_ID.parquet)")
            frame = read_parquet(candidate, columns=["run_id"]).column("run_id").to_pylist()
            return "file", str(inside), frame
    raise OmniError(
        f"{target!r} is no run id, sweep id or run file under {results}: "
        f"list sweeps with ls {results / 'runs'}, runs with omni table SWEEP_ID"
    )


def _file_candidates(results: ResultsPath, target: str) -> list[ResultsPath]:
    """Where a file target may be: as given, or relative to the results."""
    if isinstance(results, S3Path):
        return [S3Path(target, results.settings)] if target.startswith(SCHEME) else [results / target]
    path = Path(target)
    return [path, results / path] if not path.is_absolute() else [path]


def retract(
    results: str | Path | ResultsPath, target: str, reason: str, superseded_by: str | None = None
) -> Path | None:
    """Append one retraction; returns its file, or None when every run of the
    target is retracted already (retracting twice records nothing). Nothing
    else is touched."""
    if not reason or not reason.strip():
        raise OmniError("a retraction needs a reason (--reason '...'): say what is wrong with the result")
    kind, canonical, run_ids = resolve_target(results, target)
    if set(run_ids) <= set(retracted_runs(results)):
        return None
    if superseded_by is not None:
        resolve_target(results, superseded_by)  # must exist: a pointer to nothing helps no one
    now = datetime.now(UTC)
    rid = f"{now:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
    row = {
        "retraction_id": rid,
        "target_kind": kind,
        "target": canonical,
        "run_ids": run_ids,
        "reason": reason.strip(),
        "superseded_by": superseded_by,
        "retracted_at": now,
        "retracted_by": f"{getpass.getuser()}@{socket.gethostname()}",
    }
    # never replaces an existing retraction
    return write_once(retractions_dir(results) / f"{rid}.parquet", pa.Table.from_pylist([row], schema=SCHEMA))


def load_retractions(results: str | Path | ResultsPath) -> pd.DataFrame:
    files = sorted(p for p in retractions_dir(results).glob("*.parquet") if not p.name.startswith("."))
    if not files:
        return SCHEMA.empty_table().to_pandas()
    return pa.concat_tables([read_parquet(p, schema=SCHEMA) for p in files]).to_pandas()


def retracted_runs(results: Path) -> dict[str, str]:
    """run id -> reason (the first retraction that named it)."""
    out: dict[str, str] = {}
    for row in load_retractions(results).itertuples():
        for run_id in row.run_ids:
            out.setdefault(run_id, row.reason)
    return out


# --------------------------------------------------- reads that leave them out


def without_retracted(frame: pd.DataFrame, results: Path, include_retracted: bool = False) -> tuple[pd.DataFrame, int]:
    """The rows no retraction names (all of them with ``include_retracted``), and how many were left out."""
    if include_retracted:
        return frame, 0
    keep = ~frame["run_id"].isin(retracted_runs(results))
    return frame[keep], int((~keep).sum())


class SweepRows(NamedTuple):
    ok: pd.DataFrame  # the timed runs that are ok
    timed: pd.DataFrame  # every timed run
    excluded: int  # retracted runs left out
    profiled: pd.DataFrame  # the profiled passes: no verdict reads their timings (omni ops does)


def ok_rows(results: Path, sweep_id: str, include_retracted: bool = False) -> SweepRows:
    """One sweep's unretracted rows, the timed ones apart from the profiled passes."""
    frame = load_runs(results, sweep_id=sweep_id)
    if frame.empty:
        raise OmniError(
            f"no rows for sweep {sweep_id!r} under {results_root(results) / 'runs'}; list them with omni table or ls"
        )
    frame, excluded = without_retracted(frame, results, include_retracted)
    if frame.empty:
        raise OmniError(f"all {excluded} run(s) of sweep {sweep_id} are retracted; --include-retracted shows them")
    rows = split_rows(frame, excluded)
    if rows.timed.empty:
        raise OmniError(f"every run of sweep {sweep_id} is a profiled pass: omni ops {sweep_id} reads them")
    return rows


def split_rows(frame: pd.DataFrame, excluded: int = 0) -> SweepRows:
    """A sweep's rows in plan order, the timed ones apart from the profiled
    passes (their timings carry the profiler's cost)."""
    frame = frame.sort_values("order_index")
    profiled_pass = profiled(frame)
    timed = frame[~profiled_pass]
    return SweepRows(timed[timed["status"] == "ok"], timed, excluded, frame[profiled_pass])


def covering(results: str | Path | ResultsPath, run_ids) -> list[dict]:
    """The retractions that name any of ``run_ids``: the ids of those they
    name, the reason and what superseded them."""
    ids = set(run_ids)
    return [
        {"run_ids": sorted(ids & set(r.run_ids)), "reason": r.reason, "superseded_by": r.superseded_by}
        for r in load_retractions(results).itertuples()
        if ids & set(r.run_ids)
    ]


__all__ = [
    "SweepRows",
    "covering",
    "load_retractions",
    "ok_rows",
    "retract",
    "retracted_runs",
    "resolve_target",
    "split_rows",
    "without_retracted",
]
