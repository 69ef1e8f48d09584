"""What routing a sweep through a fleet host costs, against the same sweep run
locally: both against the stack's Prefect server, both storing to its S3.

- **local**: ``omni sweep SPEC`` with ``PREFECT_API_URL`` set: the flow and its
  runs in this process (what a sweep without ``hosts:`` does);
- **fleet**: the same spec with ``hosts: {names: [HOST]}``: the flow here sends
  the plan to ``omni worker --host HOST`` (started by this script, on this
  machine, 1 s polling) with ``run_deployment``; the host's flow run runs it.

Alternated ``--repeat`` times (local, fleet, local, ...); median [min-max] of
each sweep's wall time, the per-run overhead ``(fleet - local) / runs`` of each
pair, and the median run's own ``wall_s`` from the rows (the runs are the same
work both ways). The shard's start latency (created to running) is read
from the Prefect API.

    .venv/bin/python benchmarks/fleet_overhead.py [--passes 5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from omni.fleet import stack  # noqa: E402
from omni.store.reading import load_runs  # noqa: E402

OMNI = str(REPO / ".venv" / "bin" / "omni")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def timed_sweep(spec: Path, results: str, env: dict) -> tuple[float, dict]:
    start = time.monotonic()
    done = subprocess.run(
        [OMNI, "sweep", str(spec), "--results", results, "--force", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"omni sweep {spec} failed ({done.returncode}): {done.stderr[-3000:]}")
    return wall, json.loads(done.stdout)


def shard_start_latency(url: str, sweep_id: str) -> float | None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=f"{sweep_id}@")))
    starts = [(r.start_time - r.created).total_seconds() for r in runs if r.start_time and r.created]
    return max(starts) if starts else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env_file = stack.ensure_env_file()
    url, s3 = stack.api_url(stack.server_settings(env_file)), stack.s3_settings(env_file)
    if not stack.healthy(url):
        raise SystemExit(f"no Prefect server at {url}: run omni stack up")
    tag = uuid.uuid4().hex[:6]
    host = f"bench-{tag}"
    work = Path(f"/tmp/omni-bench-fleet-{tag}")
    work.mkdir(parents=True)
    # one lock directory for both: the local sweep must not wait on locks the fleet host ignores
    env = {
        **os.environ,
        "PREFECT_API_URL": url,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "OMNI_LOCK_DIR": str(work / "locks"),
    }
    base = yaml.safe_load((REPO / "arms" / "smoke-synthetic.yaml").read_text())
    base["passes"] = args.passes
    specs = {"local": work / "local.yaml", "fleet": work / "fleet.yaml"}
    specs["local"].write_text(yaml.safe_dump(base, sort_keys=False))
    specs["fleet"].write_text(yaml.safe_dump({**base, "hosts": {"names": [host]}}, sort_keys=False))
    worker = subprocess.Popen(
        [OMNI, "worker", "--host", host, "--lock-dir", str(work / "locks"), "--heartbeat", "5"],
        cwd=REPO,
        env=env,
        stdout=(work / "worker.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(
            json.loads(line)["host"] == host and json.loads(line)["alive"]
            for line in subprocess.run(
                [OMNI, "hosts", "--json"], cwd=REPO, env=env, capture_output=True, text=True
            ).stdout.splitlines()
        ):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit((work / "worker.log").read_text()[-3000:])
            time.sleep(1)
        walls: dict[str, list[float]] = {"local": [], "fleet": []}
        run_walls: dict[str, list[float]] = {"local": [], "fleet": []}
        latency, per_run, runs = [], [], 0
        for i in range(args.repeat):
            for kind in ("local", "fleet"):
                results = f"s3://{s3['bucket']}/bench-fleet-{tag}/{kind}"
                wall, outcome = timed_sweep(specs[kind], results, env)
                walls[kind].append(wall)
                runs = len(outcome["runs"])
                rows = load_runs(results, sweep_id=outcome["sweep_id"], columns=["wall_s", "host"])
                run_walls[kind].append(float(rows["wall_s"].median()))
                if kind == "fleet":
                    latency.append(shard_start_latency(url, outcome["sweep_id"]) or float("nan"))
                    assert set(rows["host"]) == {host}, set(rows["host"])
                print(f"{i} {kind}: {wall:.1f} s for {runs} run(s)", flush=True)
            per_run.append((walls["fleet"][-1] - walls["local"][-1]) / runs)
        print(f"\n{args.repeat} pairs, {runs} synthetic runs per sweep, one slot, S3 results, one Prefect server")
        print(f"local sweep wall s:  {spread(walls['local'])}")
        print(f"fleet sweep wall s:  {spread(walls['fleet'])}")
        ratios = [f / lo for f, lo in zip(walls["fleet"], walls["local"])]
        print(f"fleet / local:       x{spread(ratios)}")
        print(f"overhead per run s:  {spread(per_run)}  ((fleet - local) / runs, per pair)")
        print(f"overhead per sweep s: {spread([p * runs for p in per_run])}")
        print(f"shard created->running s: {spread(latency)}")
        print(f"median run wall_s:   local {spread(run_walls['local'])}, fleet {spread(run_walls['fleet'])}")
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)


if __name__ == "__main__":
    main()
