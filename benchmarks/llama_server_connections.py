"""llama-server beyond its slots: requests the load generator loses when it
reuses connections, against a connection per request (omni's default for
llama-server arms: ``--close-connections``, omni/engines/bench_serve.py).

llama-server closes each streamed response's connection while its header
says keep-alive; aiohttp reuses the closed connection and the next request
fails ("Can not write request body"). This runs arms/serve-smoke.yaml's
llama-server arm (4 slots) at 16 and 32 requests in flight, ``--requests``
measured requests a level, both ways, the pairs interleaved (which way goes
first alternates), and prints each run's failed requests per level and the
totals.

    .venv/bin/python benchmarks/llama_server_connections.py [--pairs 2] [--requests 300]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from omni import REPO_ROOT
from omni.engines.bench_serve import CLOSE_FLAG
from omni.serving import run as serving_run
from omni.store.reading import load_side_table
from omni.sweep.execute import run_once

SMOKE = REPO_ROOT / "arms" / "serve-smoke.yaml"


def spec(requests: int, name: str) -> dict:
    smoke = yaml.safe_load(SMOKE.read_text())
    arm = next(a for a in smoke["arms"] if a["engine"] == "llamacpp")
    load = {**arm["load"], "concurrency": [16, 32], "requests": requests, "warmup": 2}
    return {
        **{k: smoke[k] for k in ("seed", "timeout_s", "slots")},
        "name": name,
        "passes": 1,
        "arms": [{**arm, "load": load}],
    }


def one_run(way: str, requests: int, work: Path) -> dict[str, tuple[int, int]]:
    """{level: (failed, requests)} of one run, the client reusing connections or not."""
    real = serving_run.client_argv

    def reusing(*args, **kwargs):
        return [a for a in real(*args, **kwargs) if a != CLOSE_FLAG]

    serving_run.client_argv = real if way == "close" else reusing
    work.mkdir(parents=True)
    try:
        _, sweep_id = run_once(spec(requests, f"conn-{way}"), work)
    finally:
        serving_run.client_argv = real
    levels = load_side_table(work / "results", "levels", sweep_id)
    return {r["level"]: (int(r["failed"]), int(r["requests"])) for r in levels.to_dict("records")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    totals = {"close": [0, 0], "reuse": [0, 0]}
    with tempfile.TemporaryDirectory(prefix="omni-conn-") as tmp:
        for pair in range(args.pairs):
            for way in ("close", "reuse") if pair % 2 == 0 else ("reuse", "close"):
                found = one_run(way, args.requests, Path(tmp) / f"{pair}-{way}")
                print(
                    f"pair {pair} {way:5}: "
                    + ", ".join(f"{lv} {f} failed of {n}" for lv, (f, n) in sorted(found.items())),
                    flush=True,
                )
                totals[way][0] += sum(f for f, _ in found.values())
                totals[way][1] += sum(n for _, n in found.values())
    for way, (failed, sent) in totals.items():
        print(f"{way:5}: {failed} failed of {sent} requests")


if __name__ == "__main__":
    main()
