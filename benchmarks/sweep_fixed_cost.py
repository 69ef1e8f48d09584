"""What ``omni sweep`` costs around its runs: a sweep of one short synthetic
run against that run's engine alone, side by side.

- **engine**: the engine process alone, exactly as the sweep started it (its
  row's ``command``: numactl, the engine's Python, ``--arm ARM.json --out``);
- **sweep**: ``omni sweep SPEC --force`` of the same one-run spec (the smoke
  spec's ``small`` arm, one pass), as a user runs it: Prefect's temporary
  server, the flow run and its artifacts, the row, the summary, the HTML
  report, the printed table and verdicts.

Each side starts once the slot's CPU locks are free (another sweep on this
host holds them while its run goes on: the wait is not omni's fixed cost)
and its CPUs are quiet. The sweep's time is also split at its row's
``started_at`` and ``finished_at``: before the run (server, imports, plan,
flow run), the run (busy check and engine), after it (summary, report,
artifacts, the printed table, the server's stop).

``--pairs`` pairs, the order flipped every other pair so drift on a shared
host falls on both; each sweep writes to a fresh results directory (its
first sweep: no trend plots), or to one directory with ``--same-results``.
Prints each pair, the median of each side, the per-pair difference (sweep -
engine) as median [min-max] and the ratio of the medians. ``--force``: on a
busy host a refused run would make the sweep short and the figure
meaningless; the busy check still measures its 0.5 s window.

    .venv/bin/python benchmarks/sweep_fixed_cost.py [--pairs 5] [--same-results] [--omni CMD]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from omni.host.placement import measure_busy  # noqa: E402
from omni.run.schedule import hold_cpus  # noqa: E402
from omni.spec.settings import Sweep  # noqa: E402
from omni.store.reading import load_runs  # noqa: E402

OMNI = str(REPO / ".venv" / "bin" / "omni")
BUSY_PCT = Sweep.model_fields["busy_threshold_pct"].default  # a spec's default


def one_run_spec(folder: Path) -> Path:
    """arms/smoke-synthetic.yaml cut to its first arm and one pass."""
    spec = yaml.safe_load((REPO / "arms" / "smoke-synthetic.yaml").read_text())
    spec.update(name="fixed-cost", passes=1, arms=spec["arms"][:1], baseline=spec["arms"][0]["name"])
    path = folder / "one-run.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def timed_sweep(omni: list[str], spec: Path, results: Path) -> tuple[float, float, float]:
    """Wall seconds of one ``omni sweep``, and of them, those before its run
    began (the row's started_at: the busy check and the engine follow) and
    after it ended (finished_at)."""
    start = time.time()
    done = subprocess.run(
        [*omni, "sweep", str(spec), "--results", str(results), "--force"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    end = time.time()
    if done.returncode != 0:
        sys.exit(f"omni sweep exited {done.returncode}:\n{done.stderr[-3000:]}")
    row = newest_run(results)
    return end - start, row["started_at"].timestamp() - start, end - row["finished_at"].timestamp()


def newest_run(results: Path) -> dict:
    return load_runs(results).sort_values("finished_at").iloc[-1].to_dict()


def wait_quiet(cpus: tuple[int, ...], limit_s: float = 600) -> None:
    """Until the slot's CPU locks are free (another sweep on this host holds
    them while its run goes on) and its CPUs are under omni's busy threshold."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with hold_cpus(cpus):
            pass
        if measure_busy(list(cpus), 1.0).max_pct <= BUSY_PCT:
            return
    print(f"  (CPUs {cpus} still busy after {limit_s:.0f} s: measuring anyway)", flush=True)


def engine_command(row: dict, folder: Path) -> list[str]:
    """The run's engine command line, its arm file copied beside us and its
    result written there, so the sweep's own files stay as they were."""
    argv = json.loads(row["command"])
    arm = folder / "arm.json"
    arm.write_text(Path(argv[argv.index("--arm") + 1]).read_text())
    argv[argv.index("--arm") + 1] = str(arm)
    argv[argv.index("--out") + 1] = str(folder / "result.json")
    return argv


def timed_engine(argv: list[str]) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"the engine exited {done.returncode}:\n{done.stderr[-3000:]}")
    return took


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="(engine, sweep) pairs")
    parser.add_argument("--same-results", action="store_true", help="every sweep into one results directory")
    parser.add_argument(
        "--omni", default=OMNI, help="command that runs omni, e.g. 'env PYTHONPATH=OTHER_CHECKOUT omni'"
    )
    args = parser.parse_args()
    omni = shlex.split(args.omni)
    with tempfile.TemporaryDirectory(prefix="omni-fixed-cost-") as tmp:
        folder = Path(tmp)
        spec = one_run_spec(folder)
        shared = folder / "results"
        warm, _, _ = timed_sweep(omni, spec, shared)  # also fills the OS's caches and Prefect's database
        row = newest_run(shared)
        argv, cpus = engine_command(row, folder), tuple(row["cpus"])
        print(f"warm-up sweep {warm:.2f} s; engine: {' '.join(argv)}")
        engine, sweep, before, after = [], [], [], []
        for pair in range(args.pairs):
            results = shared if args.same_results else folder / f"results-{pair}"
            order = ("engine", "sweep") if pair % 2 == 0 else ("sweep", "engine")
            took = {}
            for side in order:
                wait_quiet(cpus)
                took[side] = timed_engine(argv) if side == "engine" else timed_sweep(omni, spec, results)
            engine.append(took["engine"])
            wall, pre, post = took["sweep"]
            sweep.append(wall)
            before.append(pre)
            after.append(post)
            print(
                f"pair {pair + 1} ({' then '.join(order)}): engine {took['engine']:.2f} s, sweep {wall:.2f} s "
                f"({pre:.2f} s before its run, {post:.2f} s after), difference {wall - took['engine']:.2f} s",
                flush=True,
            )
    diffs = [s - e for s, e in zip(sweep, engine)]
    print(f"engine alone: median {spread(engine)}")
    print(f"omni sweep:   median {spread(sweep)}")
    print(f"  before its run (started_at): {spread(before)}; after it (finished_at): {spread(after)}")
    print(f"difference (sweep - engine, per pair): median {spread(diffs)}")
    print(f"ratio of the medians: x{statistics.median(sweep) / statistics.median(engine):.2f}")


if __name__ == "__main__":
    main()
