"""omni's vLLM arm against ``vllm bench latency``: same model, lengths, cores,
and the same samples per engine start (2 warm-ups, then 5 timed iterations,
unless told otherwise).

Both run pinned to the same slot with ``numactl`` and the same
``VLLM_CPU_OMP_THREADS_BIND``, interleaved start by start. Per engine start
each yields 5 end-to-end latencies of the full generation (omni: its
iterations table; vllm bench: ``latencies`` of ``--output-json``). Prints, for
each, the median over all iterations, the spread within a start (median over
starts of (max - min) / median) and between starts ((max - min) / median of
the per-start medians), and the ratio of the medians: omni's stepped loop
(``llm_engine.step()`` with DELTA outputs, timestamping every step) against
``LLM.generate``'s own.

What that ratio is depends on how omni's arm adds the batch (``--admission``,
its ``params.admission``): ``paused`` (omni's default) adds it with vLLM's
scheduler paused, so the first step holds every prompt, where
``LLM.generate`` lets the engine core step on the first request while the
others are added: the ratio is then a difference of definition.
``as_generate`` adds it as ``LLM.generate`` does: the ratio is what omni's
stepped, timestamped loop costs, beside the two settings that differ either
way (greedy against temperature 1.0, stats logging off against on:
docs/engines.md).

Both get the same step budget (``max_num_batched_tokens``): the one given, or
the one omni's arm would run with (enough for the whole batch's prefill),
which ``vllm bench latency`` would otherwise leave at vLLM's 4096. omni's
rows also say whether the batch decoded in lock step (partial steps per
start), and its per-request TTFT and TPOT.

``--bench-side NAME=FLAG,...`` (repeatable) runs the bench several ways in
the same interleaved starts, to take the gap apart one cause at a time; the
flag ``--greedy`` makes the bench sample as omni does (its other flags are
``vllm bench latency``'s own). Each side is compared with the one before it
(the cost of what changed between them) and every omni arm with every side:

    .venv/bin/python benchmarks/vllm_vs_bench_latency.py --input-len 384 --output-len 48 --batch 6 \
        --passes 5 --admission as_generate --bench-side bench= \
        --bench-side nostats=--disable-log-stats --bench-side nostats-greedy=--disable-log-stats,--greedy

    .venv/bin/python benchmarks/vllm_vs_bench_latency.py [--passes 3] [--admission as_generate]
    .venv/bin/python benchmarks/vllm_vs_bench_latency.py --input-len 2048 --output-len 128 --batch 8 \
        --max-num-batched-tokens 2048 --kv-bytes 50331648 --passes 2 --warmup 1 --iterations 2
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import tempfile
from pathlib import Path

import yaml

from omni import REPO_ROOT
from omni.cpulist import format_cpulist
from omni.engines.vllm import batched_tokens
from omni.host.placement import numactl_path, pin_argv
from omni.host.topology import allocate_slots, read_topology
from omni.store.reading import load_iterations
from omni.sweep.execute import run_and_store
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest


def omni_arm(args: argparse.Namespace, admission: str) -> dict:
    arm = {
        "name": f"omni-{admission}",
        "engine": "vllm",
        "model": "tiny-llama",
        "dtype": "bfloat16",
        "compile_mode": "eager",
        "context_len": args.input_len + args.output_len,
        "prompt_len": args.input_len,
        "max_tokens": args.output_len,
        "batch_size": args.batch,
        "kv_cache_bytes": args.kv_bytes,
        "patches": "none",  # stock vLLM on both sides
        "params": {"warmup": args.warmup, "iterations": args.iterations, "admission": admission},
    }
    if args.max_num_batched_tokens is not None:
        arm["params"]["max_num_batched_tokens"] = args.max_num_batched_tokens
    return arm


def step_budget(arm: dict) -> int | None:
    """The budget omni's arm runs with (None: vLLM's own), given to vllm bench too."""
    return batched_tokens(arm, arm["context_len"])


def omni_arm_spec(directory: Path, arms: list[dict], passes: int) -> Path:
    path = directory / "omni-vllm.yaml"
    spec = {"name": "bench-vs-omni", "passes": passes, "timeout_s": 600, "control": False, "arms": arms}
    path.write_text(yaml.safe_dump(json.loads(json.dumps(spec))))
    return path


def bench_latency(slot, python: str, model: str, arm: dict, out: Path, extra: list[str]) -> list[float]:
    """One engine start of ``vllm bench latency``: its 5 timed e2e latencies (s)."""
    probe = REPO_ROOT / "benchmarks" / "bench_latency_probe.py"
    budget = step_budget(arm)
    argv = [
        python,
        str(probe),
        model,
        str(arm["prompt_len"]),
        str(arm["max_tokens"]),
        str(arm["batch_size"]),
        str(arm["context_len"]),
        str(arm["kv_cache_bytes"]),
        "none" if budget is None else str(budget),
        str(arm["params"]["warmup"]),
        str(arm["params"]["iterations"]),
        str(out),
        *extra,
    ]
    argv, _ = pin_argv(slot, argv, numactl_path())
    env = {
        **__import__("os").environ,
        "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, slot.cpus)),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["latencies_n"]


def omni_latencies(results: Path, run_id: str) -> list[float]:
    """One engine start of omni's arm: its iterations' e2e latencies (s)."""
    frame = load_iterations(results)
    return frame.loc[frame["run_id"] == run_id].sort_values("iteration")["e2e_s"].tolist()


def describe_requests(row: dict) -> str:
    """What omni saw per request in one start: lock step or not, TTFT and TPOT."""
    partial = f"{row['partial_steps']} partial steps" if row["partial_steps"] else "lock step"
    return (
        f"{partial}; batch ttft {row['ttft_ms']:.0f} ms, per request ttft p50 {row['ttft_p50_ms']:.0f} / "
        f"p99 {row['ttft_p99_ms']:.0f} ms, tpot {row['tpot_ms']:.2f} ms (p99 {row['tpot_p99_ms']:.2f})"
    )


def spread(values: list[float]) -> float:
    """(max - min) / median."""
    return (max(values) - min(values)) / statistics.median(values)


def report(name: str, starts: list[list[float]]) -> float:
    every = [v for start in starts for v in start]
    median = statistics.median(every)
    within = statistics.median(spread(s) for s in starts)
    between = spread([statistics.median(s) for s in starts])
    print(
        f"{name:<28} {len(starts)} starts x {len(starts[0])} iterations: median e2e {median * 1000:.1f} ms, "
        f"spread within a start {within:.1%}, between starts {between:.1%}"
    )
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--kv-bytes", type=int, default=256 << 20)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None, help="default: omni's")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument(
        "--admission",
        nargs="+",
        choices=("paused", "as_generate"),
        default=["paused"],
        help="how omni's arm adds the batch, one arm per value, interleaved with the bench start by start: "
        "paused (omni's default: the first step holds every prompt) or as_generate (as LLM.generate, so "
        "vllm bench latency, does: vLLM steps while the batch is added)",
    )
    parser.add_argument(
        "--bench-arg",
        action="append",
        default=[],
        help="a flag for vllm bench latency, as given (repeatable), e.g. --bench-arg=--disable-log-stats",
    )
    parser.add_argument(
        "--bench-side",
        action="append",
        default=[],
        type=bench_side,
        help="NAME=FLAG,FLAG: one more way to run the bench in every start (repeatable; replaces --bench-arg); "
        "--greedy samples as omni does",
    )
    args = parser.parse_args()
    sides = dict(args.bench_side) or {"vllm bench latency": args.bench_arg}
    arms = [omni_arm(args, mode) for mode in args.admission]
    work = Path(tempfile.mkdtemp(prefix="omni-bench-"))
    spec = omni_arm_spec(work, arms, args.passes)
    prepared = prepare_sweep(SweepRequest(spec=spec, results=work / "results", force=True))
    res = prepared.context.resources[arms[0]["name"]]
    slot = allocate_slots(read_topology())[0]
    bench: dict[str, list[list[float]]] = {name: [] for name in sides}
    omni: dict[str, list[list[float]]] = {arm["name"]: [] for arm in arms}
    for index in range(args.passes):
        items = {item.arm.name: item for item in prepared.items if item.pass_index == index}
        seen = {}
        order = [*(("bench", name) for name in sides), *(("omni", name) for name in items)]
        for kind, side in random.Random(index).sample(order, len(order)):
            if kind == "bench":
                out = work / f"bench{index}-{list(sides).index(side)}.json"
                bench[side].append(bench_latency(slot, res.python, res.model_path, arms[0], out, sides[side]))
                continue
            row = run_and_store(prepared.context, items[side])
            if row["status"] != "ok":
                raise SystemExit(f"omni run failed: {row['error']}")
            omni[side].append(omni_latencies(work / "results", items[side].run_id))
            seen[side] = describe_requests(row)
        shown = "; ".join(
            [f"{name} {[round(v * 1000, 1) for v in bench[name][-1]]} ms" for name in bench]
            + [f"{name} {[round(v * 1000, 1) for v in omni[name][-1]]} ms ({seen[name]})" for name in omni]
        )
        print(f"start {index}: {shown}", flush=True)
    budget = step_budget(arms[0])
    shown_sides = "; ".join(f"{n}: {' '.join(f) or 'as shipped'}" for n, f in sides.items())
    print(
        f"cores {format_cpulist(slot.cpus)}, tiny-llama, input {args.input_len}, output {args.output_len}, "
        f"batch {args.batch}, eager, bf16, max_num_batched_tokens {budget or 'vLLM default'}; "
        f"bench sides: {shown_sides}"
    )
    medians = {name: report(name, starts) for name, starts in bench.items()}
    names = list(bench)
    for before, after in zip(names, names[1:]):
        compare(f"bench {after} / {before}", bench[after], bench[before], "what changed between the two sides")
    for arm in arms:
        name, mode = arm["name"], arm["params"]["admission"]
        report(f"omni vllm arm ({mode})", omni[name])
        meaning = (
            "omni's stepped, timestamped loop: both add the batch as LLM.generate does"
            if mode == "as_generate"
            else "omni's batch added with the scheduler paused, the bench's while vLLM steps: a difference of definition"
        )
        for side in medians:
            compare(f"omni ({mode}) / {side}", omni[name], bench[side], meaning)


def compare(label: str, these: list[list[float]], those: list[list[float]], meaning: str) -> None:
    """Ratio of the medians over every iteration, paired by start, against the noise between starts."""
    ratio = statistics.median(v for s in these for v in s) / statistics.median(v for s in those for v in s)
    noise = max(spread([statistics.median(s) for s in these]), spread([statistics.median(s) for s in those]))
    paired = [statistics.median(x) / statistics.median(y) for x, y in zip(these, those)]
    shorter = sum(p < 1 for p in paired)
    verdict = "within the between-start noise" if abs(ratio - 1) <= noise else "DIFFER by more than the noise"
    print(
        f"ratio {label} e2e {ratio:.3f}, paired by start {min(paired):.3f}-{max(paired):.3f} "
        f"(shorter in {shorter} of {len(paired)} starts; {meaning}); {verdict} ({noise:.1%})"
    )


def bench_side(text: str) -> tuple[str, list[str]]:
    name, sep, flags = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: a bench side is NAME=FLAG,FLAG (e.g. nostats=--disable-log-stats)")
    return name, [f for f in flags.split(",") if f]


if __name__ == "__main__":
    main()
