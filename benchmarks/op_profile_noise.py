"""What a profile costs and how well per-op times reproduce, side by side in one run.

One vLLM arm (tiny-llama, bf16, eager), ``--passes`` timed runs and as many
profiled runs (``profile: {steps: 16}``), interleaved by omni's own plan. Prints:

- the profiler's overhead: each profiled run's median decode step while traced
  over the same run's untraced one (``profile_overhead``), median and range;
- the op-level A/A noise: for the ops that make up 90 % of the decode step,
  the sd of log ms/step between the profiled runs (``omni ops``'s noise
  column), weighted by their share of the step;
- beside it, the same between-run sd of the end-to-end numbers of the timed
  runs of the same sweep: decode_tok_s and itl_p50_ms;
- the wall time of a profiled run against a timed one (what a profile pass costs).

    .venv/bin/python benchmarks/op_profile_noise.py [--passes 3] [--results DIR] [--sweep ID: analyze only]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path

import yaml

from omni.measure.ops import op_lines
from omni.report.ops import sweep_ops
from omni.store.reading import load_runs
from omni.store.reading import profiled as is_profiled
from omni.sweep.execute import run_and_store
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest

ARM = {
    "name": "bf16",
    "engine": "vllm",
    "model": "tiny-llama",
    "dtype": "bfloat16",
    "compile_mode": "eager",
    "context_len": 192,
    "prompt_len": 64,
    "max_tokens": 32,
    "batch_size": 2,
    "kv_cache_bytes": 268435456,
}


def log_sd(values) -> float:
    logs = [math.log(v) for v in values if v and v > 0]
    return statistics.stdev(logs) if len(logs) > 1 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--sweep", help="only analyze this stored sweep of the benchmark (with --results)")
    args = parser.parse_args()
    if args.sweep:
        return analyze(args.results, args.sweep)
    work = Path(tempfile.mkdtemp(prefix="omni-opnoise-"))
    results = args.results or work / "results"
    spec = work / "op-noise.yaml"
    arm = {**ARM, "profile": {"steps": 16, "passes": args.passes}}
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "op-noise",
                "passes": args.passes,
                "timeout_s": 600,
                "control": False,
                "busy_threshold_pct": 100,
                "arms": [arm],
            }
        )
    )
    prepared = prepare_sweep(SweepRequest(spec=spec, results=results))
    for item in prepared.items:
        row = run_and_store(prepared.context, item)
        print(
            f"{'profiled' if item.profiled else 'timed':>8} pass {item.pass_index}: {row['status']} {row.get('error') or ''}"
        )
    analyze(results, prepared.items[0].sweep_id)


def analyze(results: Path, sweep_id: str) -> None:
    runs = load_runs(results, sweep_id=sweep_id)
    timed, profiled = runs[~is_profiled(runs)], runs[is_profiled(runs)]
    frame, _ = sweep_ops(results, sweep_id, "decode")
    lines = op_lines(frame[frame["status"] == "ok"])
    covered, chosen = 0.0, []
    for line in lines:  # heaviest first: the ops that make up 90 % of the step
        if covered >= 0.9 or line.noise is None:
            break
        chosen.append(line)
        covered += line.share
    weighted = sum(line.noise * line.share for line in chosen) / sum(line.share for line in chosen)
    overheads = profiled["profile_overhead"].dropna().tolist()
    print(f"\nsweep {sweep_id} under {results}")
    print(
        f"profiler overhead (traced / untraced decode step, same run): median x{statistics.median(overheads):.2f}, "
        f"range x{min(overheads):.2f}-x{max(overheads):.2f}, {len(overheads)} runs"
    )
    print(
        f"op-level A/A noise, {len(chosen)} ops = {covered:.0%} of the decode step, share-weighted sd of log "
        f"ms/step between {len(profiled)} profiled runs: {weighted:.1%}"
    )
    for line in chosen:
        print(f"  {line.op:<45} {line.ms_per_step:8.3f} ms/step  share {line.share:5.1%}  noise {line.noise:.1%}")
    for metric in ("decode_tok_s", "itl_p50_ms"):
        print(f"end-to-end {metric}: sd of log between {len(timed)} timed runs {log_sd(timed[metric]):.1%}")
    print(
        f"wall time of a run: profiled {profiled['wall_s'].median():.1f} s, timed {timed['wall_s'].median():.1f} s "
        f"(x{profiled['wall_s'].median() / timed['wall_s'].median():.2f})"
    )


if __name__ == "__main__":
    main()
