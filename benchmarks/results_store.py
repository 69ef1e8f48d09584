"""The results store at a year of history: 20,000 run files in 400 sweeps,
local and on S3, raw, compacted (a part per sweep) and consolidated, omni
against DuckDB on the same rows.

Rows are real: a synthetic-engine sweep is run once (``omni sweep
arms/smoke-synthetic.yaml``) and its rows are the templates, their ids and
metrics varied. Measured side by side in one run, each reading repeated
``--repeat`` times in turn (ABAB...), median [min-max]:

- ``regressions``: ``omni regressions``' load, every row of the store with the
  columns its rule reads (``compare.spec_runs``' columns);
- ``summary``: a summary's load, one sweep's rows whole (``load_runs(SWEEP)``);
- DuckDB ``read_parquet`` of the same columns into pandas: over the per-run
  files (what a user points it at; locally only: through fsspec, 20,000 S3
  files would take it many minutes), the compacted parts, the consolidated file;
- write + read of 1,000 run files one by one (a sweep's pattern), S3 vs local.

Targets: the loads <= 2 s locally, and <= 1.5 x DuckDB.

    .venv/bin/python benchmarks/results_store.py [--sweeps 400 --runs 50] [--no-s3]

S3 is the stack's (``omni stack up``) or the AWS_* variables'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from omni.history.compare import history_columns  # noqa: E402
from omni.store import compaction, reading, writing  # noqa: E402
from omni.store.objstore import S3Path, results_root  # noqa: E402

REGRESSION_COLUMNS = history_columns()  # what `omni regressions` reads of every run
SWEEPS = [400]  # --sweeps


def template_rows(work: Path) -> list[dict]:
    """The rows of one real synthetic sweep."""
    results = work / "template"
    subprocess.run(
        [
            str(REPO / ".venv/bin/omni"),
            "sweep",
            str(REPO / "arms/smoke-synthetic.yaml"),
            "--results",
            str(results),
            "--quiet",
            "--force",
        ],
        check=False,
        capture_output=True,
        cwd=REPO,
    )
    rows = reading.load_runs(results).to_dict("records")
    if not rows:
        sys.exit("the template sweep stored no rows: run `omni sweep arms/smoke-synthetic.yaml` to see why")
    return rows


def fill(results, templates: list[dict], sweeps: int, runs: int, threads: int) -> None:
    """``sweeps`` x ``runs`` run files written through writing.write_run, as a sweep does."""
    rng = np.random.default_rng(0)

    def one_sweep(s: int) -> None:
        sweep_id = f"nightly-{s:04d}"
        for r in range(runs):
            row = dict(templates[r % len(templates)])
            row.update(
                run_id=f"{sweep_id}-{r:03d}",
                sweep_id=sweep_id,
                sweep_name="nightly",
                order_index=r,
                pass_index=r // len(templates),
                decode_tok_s=float(500 * np.exp(rng.normal(0, 0.05))),
            )
            writing.write_run(results, row)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one_sweep, range(sweeps)))


def duckdb_load(con, pattern: str, columns: list[str]):
    cols = ", ".join(f'"{c}"' for c in columns)
    return con.execute(f"SELECT {cols} FROM read_parquet('{pattern}', union_by_name=true)").df()


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s [{min(values):.3f}-{max(values):.3f}]"


def measure(label: str, results, repeat: int, raw_repeat: int, s3fs_fs=None) -> dict:
    """Every reading of one store, raw (``raw_repeat`` times: tens of
    seconds each) then compacted (``repeat`` times), in turn."""
    import duckdb

    con = duckdb.connect()
    prefix = str(results)
    if s3fs_fs is not None:
        con.register_filesystem(s3fs_fs)
    one_sweep = "nightly-0007"
    readers = {
        "omni regressions load": lambda: reading.load_runs(results, columns=REGRESSION_COLUMNS),
        "omni summary load (one sweep)": lambda: reading.load_runs(results, one_sweep),
    }
    if s3fs_fs is None:  # through fsspec, 20,000 S3 files one by one would take DuckDB many minutes
        readers["duckdb, run files"] = lambda: duckdb_load(con, f"{prefix}/runs/*/*.parquet", REGRESSION_COLUMNS)
    stages = ("raw", "compacted", "consolidated")
    out: dict = {stage: {} for stage in stages}
    rows = {}
    for stage in stages:
        if stage == "compacted":  # each sweep into its part, as sweeps do when they end
            seconds, parts = timed(
                lambda: [compaction.compact_sweep(results, f"nightly-{s:04d}") for s in range(SWEEPS[0])]
            )
            out["compact_s"] = seconds
            readers["duckdb, compacted parts"] = lambda: duckdb_load(
                con, f"{prefix}/compacted/*/*.parquet", REGRESSION_COLUMNS
            )
        if stage == "consolidated":  # omni compact: the 400 loose parts into one file
            seconds, merged = timed(lambda: compaction.consolidate(results, at=1))
            out["consolidate_s"] = seconds
            readers.pop("duckdb, run files", None)
            readers["duckdb, consolidated"] = lambda: duckdb_load(
                con, f"{prefix}/consolidated/*.parquet", REGRESSION_COLUMNS
            )
        for _ in range(raw_repeat if stage == "raw" else repeat):
            for name, reader in readers.items():
                seconds, frame = timed(reader)
                out[stage].setdefault(name, []).append(seconds)
                rows[(stage, name)] = len(frame)
    out["rows"] = {f"{s}/{n}": v for (s, n), v in rows.items()}
    print(f"\n{label}:")
    for stage in stages:
        for name, values in out[stage].items():
            print(f"  {stage:<12} {name:<32} {spread(values)}  ({rows[(stage, name)]} rows)")
    print(f"  compact each sweep: {out['compact_s']:.1f} s; consolidate the parts: {out['consolidate_s']:.1f} s")
    return out


def ratio(a: list[float], b: list[float]) -> str:
    pairs = [x / y for x, y in zip(a, b)]
    return f"x{statistics.median(pairs):.2f} [{min(pairs):.2f}-{max(pairs):.2f}]"


def write_read_1000(local: Path, s3, templates: list[dict], repeat: int) -> dict:
    """1,000 run files written one by one (as runs end) and read back, local vs S3, in turn."""
    out: dict[str, list[float]] = {}
    for i in range(repeat):
        targets = [("local", local / f"wr{i}")] + ([("s3", s3 / f"wr{i}")] if s3 is not None else [])
        for label, base in targets:
            seconds, _ = timed(lambda base=base: fill(base, templates, 20, 50, threads=1))
            out.setdefault(f"{label} write", []).append(seconds)
            seconds, frame = timed(lambda base=base: reading.load_runs(base))
            assert len(frame) == 1000
            out.setdefault(f"{label} read", []).append(seconds)
    print("\n1,000 run files, written one by one and read back:")
    for name, values in out.items():
        print(f"  {name:<12} {spread(values)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweeps", type=int, default=400)
    parser.add_argument("--runs", type=int, default=50, help="run files per sweep")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of the compacted readings")
    parser.add_argument("--raw-repeat", type=int, default=2, help="repetitions of the raw (one file per run) readings")
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    SWEEPS[0] = args.sweeps
    with tempfile.TemporaryDirectory(prefix="omni-store-bench-") as tmp:
        work = Path(tmp)
        templates = template_rows(work)
        n = args.sweeps * args.runs
        print(f"{n} run files in {args.sweeps} sweeps, rows from {len(templates)} real synthetic runs")
        local = work / "local"
        seconds, _ = timed(lambda: fill(local, templates, args.sweeps, args.runs, threads=4))
        size = sum(p.stat().st_size for p in local.glob("runs/*/*.parquet")) / n
        print(f"local fill: {seconds:.1f} s, {size / 1024:.1f} KiB per run file")
        figures = {"files": n, "local": measure("local", local, args.repeat, args.raw_repeat)}
        s3 = None
        if not args.no_s3:
            s3 = results_root(f"s3://omni-results/bench-{uuid.uuid4().hex[:8]}")
            seconds, _ = timed(lambda: fill(s3, templates, args.sweeps, args.runs, threads=16))
            print(f"s3 fill ({s3}): {seconds:.1f} s")
            import s3fs

            figures["s3"] = measure(
                f"s3 ({s3.settings.endpoint_url})",
                s3,
                args.repeat,
                1,
                s3fs.S3FileSystem(**s3.settings.storage_options()),
            )
        figures["write_read_1000"] = write_read_1000(work, s3, templates, args.raw_repeat)
        print("\nratios (per repetition, median [min-max]):")
        same = {
            "raw": "duckdb, run files",
            "compacted": "duckdb, compacted parts",
            "consolidated": "duckdb, consolidated",
        }
        for where in ("local", "s3"):
            if where not in figures:
                continue
            f = figures[where]
            for stage, duck in same.items():
                if duck in f[stage]:
                    print(
                        f"  {where} {stage}: regressions load / duckdb on the same files {ratio(f[stage]['omni regressions load'], f[stage][duck])}"
                    )
            print(
                f"  {where}: consolidated / raw regressions load {ratio(f['consolidated']['omni regressions load'], f['raw']['omni regressions load'])}"
            )
        if "s3" in figures:
            print(
                f"  s3 / local, consolidated regressions load "
                f"{ratio(figures['s3']['consolidated']['omni regressions load'], figures['local']['consolidated']['omni regressions load'])}"
            )
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1, default=str))
        if isinstance(s3, S3Path):
            print(f"\n(the S3 objects stay under {s3}: results are never deleted; drop the prefix by hand)")


if __name__ == "__main__":
    main()
