"""omni's vLLM arm against ``vllm bench latency``: same model, lengths, cores,
and the same samples per engine start (2 warm-ups, then 5 timed iterations).

Both run pinned to the same slot with ``numactl`` and the same
``VLLM_CPU_OMP_THREADS_BIND``, interleaved start by start. Per engine start
each yields 5 end-to-end latencies of the full generation (omni: its
iterations table; vllm bench: ``latencies`` of ``--output-json``). Prints, for
each, the median over all iterations, the spread within a start (median over
starts of (max - min) / median) and between starts ((max - min) / median of
the per-start medians), and the ratio of the medians: omni's stepped loop
(``llm_engine.step()`` with DELTA outputs, timestamping every step) against
``LLM.generate``'s own, i.e. what omni's per-step timing costs.

    .venv/bin/python benchmarks/vllm_vs_bench_latency.py [--passes 3]
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

from omni.placement import numactl_path, pin_argv
from omni.request import SweepRequest
from omni.store import load_iterations
from omni.sweep import REPO_ROOT, prepare_sweep, run_and_store
from omni.topology import allocate_slots, format_cpulist, read_topology

INPUT_LEN, OUTPUT_LEN, BATCH, MAX_LEN, KV_BYTES = 128, 64, 4, 192, 268435456


def omni_arm_spec(directory: Path, passes: int) -> Path:
    arm = {
        "name": "omni-vllm",
        "engine": "vllm",
        "model": "tiny-llama",
        "dtype": "bfloat16",
        "compile_mode": "eager",
        "context_len": MAX_LEN,
        "prompt_len": INPUT_LEN,
        "max_tokens": OUTPUT_LEN,
        "batch_size": BATCH,
        "kv_cache_bytes": KV_BYTES,
        "patches": "none",  # stock vLLM on both sides
        "params": {"warmup": 2, "iterations": 5},
    }
    path = directory / "omni-vllm.yaml"
    path.write_text(yaml.safe_dump({"name": "bench-vs-omni", "passes": passes, "timeout_s": 600, "arms": [arm]}))
    return path


def bench_latency(slot, python: str, model: str, out: Path) -> list[float]:
    """One engine start of ``vllm bench latency``: its 5 timed e2e latencies (s)."""
    probe = REPO_ROOT / "benchmarks" / "bench_latency_probe.py"
    argv = [
        python,
        str(probe),
        model,
        str(INPUT_LEN),
        str(OUTPUT_LEN),
        str(BATCH),
        str(MAX_LEN),
        str(KV_BYTES),
        str(out),
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
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-bench-"))
    prepared = prepare_sweep(SweepRequest(spec=omni_arm_spec(work, args.passes), results=work / "results", force=True))
    res = prepared.context.resources["omni-vllm"]
    slot = allocate_slots(read_topology())[0]
    bench, omni = [], []
    for index, item in enumerate(prepared.items):
        for side in random.Random(index).sample(["bench", "omni"], 2):
            if side == "bench":
                bench.append(bench_latency(slot, res.python, res.model_path, work / f"bench{index}.json"))
            else:
                row = run_and_store(prepared.context, item)
                if row["status"] != "ok":
                    raise SystemExit(f"omni run failed: {row['error']}")
                omni.append(omni_latencies(work / "results", item.run_id))
        print(
            f"start {index}: vllm bench {[round(v * 1000, 1) for v in bench[-1]]} ms, "
            f"omni {[round(v * 1000, 1) for v in omni[-1]]} ms",
            flush=True,
        )
    print(
        f"cores {format_cpulist(slot.cpus)}, tiny-llama, input {INPUT_LEN}, output {OUTPUT_LEN}, batch {BATCH}, eager, bf16"
    )
    b = report("vllm bench latency", bench)
    o = report("omni vllm arm (stepped)", omni)
    noise = max(spread([statistics.median(s) for s in bench]), spread([statistics.median(s) for s in omni]))
    verdict = "agree within the between-start noise" if abs(o / b - 1) <= noise else "DIFFER by more than the noise"
    print(f"ratio omni/bench e2e {o / b:.3f} (omni's per-step timing cost); {verdict} ({noise:.1%})")


if __name__ == "__main__":
    main()
