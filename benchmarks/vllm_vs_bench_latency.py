"""omni's vLLM arm against ``vllm bench latency``: same model, lengths, cores.

Both run pinned to the same slot with ``numactl`` and the same
``VLLM_CPU_OMP_THREADS_BIND``, interleaved pass by pass. The decode figure is
defined the same way for both: batch x (output_len - 1) tokens over the time
after the first token (vllm bench: latency(output_len=N) - latency(1)).
Prints both medians with their spread over passes and the ratio; they agree
when the ratio's distance from 1 is within the runs' own noise.

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
from omni.sweep import REPO_ROOT, prepare_sweep, run_and_store
from omni.topology import allocate_slots, format_cpulist, read_topology

INPUT_LEN, OUTPUT_LEN, BATCH, MAX_LEN, KV_BYTES = 128, 64, 4, 192, 268435456


def omni_arm_spec(directory: Path, passes: int) -> Path:
    arm = {"name": "omni-vllm", "engine": "vllm", "model": "tiny-llama", "dtype": "bfloat16", "compile_mode": "eager",
           "context_len": MAX_LEN, "prompt_len": INPUT_LEN, "max_tokens": OUTPUT_LEN, "batch_size": BATCH,
           "kv_cache_bytes": KV_BYTES}  # fmt: skip
    path = directory / "omni-vllm.yaml"
    path.write_text(yaml.safe_dump({"name": "bench-vs-omni", "passes": passes, "timeout_s": 600, "arms": [arm]}))
    return path


def bench_latency_decode(slot, python: str, model: str, out: Path) -> float:
    probe = REPO_ROOT / "benchmarks" / "bench_latency_probe.py"
    argv = [python, str(probe), model, str(INPUT_LEN), str(OUTPUT_LEN), str(BATCH), str(MAX_LEN), str(KV_BYTES), str(out)]
    argv, _ = pin_argv(slot, argv, numactl_path())
    env = {**__import__("os").environ, "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, slot.cpus)),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}  # fmt: skip
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lat = json.loads(out.read_text())
    return BATCH * (OUTPUT_LEN - 1) / (lat["latency_n"] - lat["latency_1"])


def spread(values: list[float]) -> float:
    """(max - min) / median: the run-to-run noise over these passes."""
    return (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-bench-"))
    prepared = prepare_sweep(omni_arm_spec(work, args.passes), results=work / "results", force=True)
    res = prepared.context.resources["omni-vllm"]
    slot = allocate_slots(read_topology())[0]
    bench, omni = [], []
    for index, item in enumerate(prepared.items):
        for side in random.Random(index).sample(["bench", "omni"], 2):
            if side == "bench":
                bench.append(bench_latency_decode(slot, res.python, res.model_path, work / f"bench{index}.json"))
            else:
                row = run_and_store(prepared.context, item)
                if row["status"] != "ok":
                    raise SystemExit(f"omni run failed: {row['error']}")
                omni.append(row["decode_tok_s"])
        print(f"pass {index}: vllm bench {bench[-1]:.1f} tok/s, omni {omni[-1]:.1f} tok/s", flush=True)
    ratio = statistics.median(omni) / statistics.median(bench)
    noise = max(spread(bench), spread(omni))
    print(f"cores {format_cpulist(slot.cpus)}, tiny-llama, input {INPUT_LEN}, output {OUTPUT_LEN}, batch {BATCH}, eager, bf16")
    print(f"vllm bench latency decode: median {statistics.median(bench):.1f} tok/s, spread {spread(bench):.1%}")
    print(f"omni vllm arm decode:      median {statistics.median(omni):.1f} tok/s, spread {spread(omni):.1%}")
    verdict = "agree within noise" if abs(ratio - 1) <= noise else "DIFFER by more than the noise"
    print(f"ratio omni/bench {ratio:.3f}; noise over passes {noise:.1%}: {verdict}")


if __name__ == "__main__":
    main()
