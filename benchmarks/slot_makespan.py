"""Makespan of concurrent slots against the ideal total / k.

Synthetic arms of known, uneven durations on the slots of a 2-socket Xeon
8480C sysfs fixture (4 slots of 28 cores, placement planned from the fixture,
not applied: this host lacks those CPUs), run through the real Prefect flow,
timing real. Ideal = sum of run wall times / k; target:
makespan <= 1.05 x ideal + 2 s. Makespan runs from the first run's start to
the last run's end, from the rows (Prefect's temporary server start excluded).

    .venv/bin/python benchmarks/slot_makespan.py [--slots 4] [--arms 6] [--passes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from omni.store.reading import load_runs  # noqa: E402
from tests.conftest import xeon_8480c_2s  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--arms", type=int, default=6)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.sweep import sweep

    work = Path(tempfile.mkdtemp(prefix="omni-makespan-"))
    root = xeon_8480c_2s(work / "sysfs")
    arms = [
        {
            "name": f"a{i}",
            "engine": "synthetic",
            "prompt_len": 16,
            "max_tokens": 8,
            "params": {"load_s": 1.0 + 0.5 * (i % 4), "mem_mb": 16, "work_per_token": 0, "hold_s": 0.2},
        }
        for i in range(args.arms)
    ]
    spec = work / "makespan.yaml"
    data = {
        "name": "makespan",
        "passes": args.passes,
        "seed": 5,
        "timeout_s": 120,
        "busy_threshold_pct": 100,
        "slots": {"cores": 28, "count": args.slots},
        "control": False,
        "arms": arms,
    }
    spec.write_text(yaml.safe_dump(json.loads(json.dumps(data))))
    state = sweep(spec=str(spec), results=str(work / "results"), sysfs_root=str(root), return_state=True)
    summary = state.result(raise_on_failure=False)
    if summary["failed"]:
        raise SystemExit(f"runs failed: {summary['failed']}")
    rows = load_runs(work / "results")
    walls = (rows["finished_at"] - rows["started_at"]).dt.total_seconds()
    makespan = (rows["finished_at"].max() - rows["started_at"].min()).total_seconds()
    ideal = walls.sum() / args.slots
    bound = 1.05 * ideal + 2.0
    print(f"{len(rows)} runs on {args.slots} slots: total run time {walls.sum():.1f} s, ideal {ideal:.2f} s")
    print(
        f"makespan {makespan:.2f} s = {makespan / ideal:.3f} x ideal (bound 1.05 x ideal + 2 s = {bound:.2f} s): "
        f"{'within' if makespan <= bound else 'OVER'}"
    )


if __name__ == "__main__":
    main()
