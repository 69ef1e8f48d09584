"""Load + summarize 1 M rows: omni against DuckDB on the same query.

1 M synthetic run rows (100 sweeps x 4 arms x 2500 passes, 2 % failed, a
retraction of one sweep's arm) in 100 Parquet files of 10 000 rows each, the
layout of a compacted archive (the live store writes one file per run; a
million files would measure the file system, not omni). The query, per
(sweep, arm) over ok, unretracted rows: n, median, MAD, min, max of
decode_tok_s. omni: ``scan`` + ``group_summary``; DuckDB:
``read_parquet`` + ``GROUP BY`` with ``median`` and ``mad``. Best of 5 each,
interleaved; the answers are checked equal. Target (issue 6): omni <= 2 s
and <= 1.5 x DuckDB.

    .venv/bin/python benchmarks/summary_1m.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omni.columns import schema  # noqa: E402
from omni.retract import exclusions, retract, retracted_runs  # noqa: E402
from omni.store import scan  # noqa: E402
from omni.summary import group_summary  # noqa: E402

COLUMNS = ["sweep_id", "arm", "status", "run_id", "decode_tok_s"]


def generate(results: Path, rows: int, files: int = 100) -> None:
    rng = np.random.default_rng(0)
    per_file = rows // files
    full = schema()
    for f in range(files):
        sweep = f"bench-{f:03d}"
        arm = np.array(["a", "b", "c", "d"])[np.arange(per_file) % 4]
        decode = 500 * np.exp(rng.normal(0, 0.1, per_file)) * np.where(arm == "d", 0.8, 1.0)
        status = np.where(rng.random(per_file) < 0.02, "failed", "ok")
        data = {
            "run_id": [f"{f:03d}{i:08d}" for i in range(per_file)],
            "sweep_id": [sweep] * per_file,
            "arm": arm,
            "status": status,
            "decode_tok_s": np.where(status == "ok", decode, np.nan),
            "schema_version": np.full(per_file, full.field("schema_version").type.to_pandas_dtype()(2)),
        }
        # every registry column, as the store writes them; the ones not set here are null
        table = pa.Table.from_arrays(
            [
                pa.array(data[f.name], f.type, from_pandas=True) if f.name in data else pa.nulls(per_file, f.type)
                for f in full
            ],
            schema=full,
        )
        folder = results / "runs" / f"sweep={sweep}"
        folder.mkdir(parents=True)
        pq.write_table(table, folder / "part-0.parquet")


def omni_query(results: Path):
    skip, rows = exclusions(results)  # a retracted sweep's files are not even read
    table = scan(results, ["sweep_id", "arm", "status", "decode_tok_s", *(["run_id"] if rows else [])], skip)
    return group_summary(table, ["sweep_id", "arm"], "decode_tok_s", rows)


def duckdb_query(results: Path, con):
    import pandas as pd

    withdrawn = pd.DataFrame({"run_id": list(retracted_runs(results))})  # noqa: F841 - read by DuckDB
    return con.execute(
        f"""SELECT r.sweep_id, r.arm, count(r.decode_tok_s) AS n, median(r.decode_tok_s) AS median,
                  mad(r.decode_tok_s) AS mad, min(r.decode_tok_s) AS min, max(r.decode_tok_s) AS max
           FROM read_parquet('{results}/runs/sweep=*/*.parquet', hive_partitioning=false) r
           ANTI JOIN withdrawn w ON r.run_id = w.run_id
           WHERE r.status = 'ok'
           GROUP BY r.sweep_id, r.arm ORDER BY r.sweep_id, r.arm"""
    ).df()


def main() -> None:
    import duckdb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    results = Path(tempfile.mkdtemp(prefix="omni-1m-"))
    t0 = time.perf_counter()
    generate(results, args.rows)
    retract(results, "bench-007", "benchmark: a retracted sweep must leave the answer")  # its 10 000 run ids
    print(f"{args.rows} rows in 100 files written in {time.perf_counter() - t0:.1f} s")
    con = duckdb.connect()
    best = {"omni": float("inf"), "duckdb": float("inf")}
    for _ in range(5):
        for name, query in (("omni", lambda: omni_query(results)), ("duckdb", lambda: duckdb_query(results, con))):
            start = time.perf_counter()
            answer = query()
            best[name] = min(best[name], time.perf_counter() - start)
            if name == "omni":
                ours = answer
            else:
                theirs = answer
    theirs = theirs.set_index(["sweep_id", "arm"])
    assert len(ours) == len(theirs) == 99 * 4, (len(ours), len(theirs))
    for col in ("n", "median", "mad", "min", "max"):
        np.testing.assert_allclose(ours[col].to_numpy(float), theirs[col].to_numpy(float), rtol=1e-9)
    ratio = best["omni"] / best["duckdb"]
    print(
        f"load + summarize, best of 5: omni {best['omni']:.3f} s, DuckDB {best['duckdb']:.3f} s, "
        f"ratio {ratio:.2f} (targets: <= 2 s, <= 1.5 x DuckDB): answers equal over {len(ours)} groups"
    )


if __name__ == "__main__":
    main()
