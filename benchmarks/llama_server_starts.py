"""llama-server started many times in a row: how many runs are stored
invalid for their memory policy. llama-server is ready in a fraction of a
second, so the first ``numa_maps`` read of its tree can land while the root is
still numactl (before ``set_mempolicy`` and exec) or on a task on its way out;
omni reads neither, and this counts what a row would say if it did.

Runs arms/serve-smoke.yaml's llama-server arm for ``--starts`` passes (a
fresh server each), one closed-loop level of a few requests, through
``omni sweep``; prints the runs' statuses and every error naming a memory
policy.

    .venv/bin/python benchmarks/llama_server_starts.py [--starts 50]
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from omni import REPO_ROOT
from omni.store.reading import load_runs

SMOKE = REPO_ROOT / "arms" / "serve-smoke.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=50)
    args = parser.parse_args()
    smoke = yaml.safe_load(SMOKE.read_text())
    arm = next(a for a in smoke["arms"] if a["engine"] == "llamacpp")
    arm["load"] = {"concurrency": [1], "requests": 5, "warmup": 1, "slo": arm["load"]["slo"]}
    spec = {**{k: smoke[k] for k in ("seed", "timeout_s", "slots")}, "name": "llama-starts", "passes": args.starts}
    spec["arms"] = [arm]
    with tempfile.TemporaryDirectory(prefix="omni-starts-") as tmp:
        path = Path(tmp) / "starts.yaml"
        path.write_text(yaml.safe_dump(spec))
        results = Path(tmp) / "results"
        omni = Path(sys.executable).with_name("omni")
        subprocess.run([str(omni), "sweep", str(path), "--results", str(results), "--quiet"], check=False)
        rows = load_runs(results)
    statuses = collections.Counter(rows["status"])
    policy = [e for e in rows["error"].dropna() if "policy" in e]
    print(f"{len(rows)} runs: {dict(statuses)}")
    print(f"invalid for the memory policy: {len(policy)}")
    for error in policy:
        print("  " + error)


if __name__ == "__main__":
    main()
