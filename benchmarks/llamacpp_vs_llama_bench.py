"""omni's offline llama.cpp arm against ``llama-bench`` built from the same
llama.cpp source (the llama.cpp env's ``bin/llama-bench``): same GGUF,
prompt and generation lengths, threads, batch sizes, flash attention
(auto on both), mmap and repack, pinned to the same CPUs with numactl, the
pairs interleaved (which side goes first alternates).

Per pair: omni's median prefill tok/s (batch x prompt / TTFT) and decode
tok/s over its timed iterations, against llama-bench's pp<prompt> and
tg<gen> averages over its repetitions. Prints each pair's ratios (omni /
llama-bench), their medians and ranges, and each side's spread between
starts ((max - min) / median of its per-start figures): agreement means the
ratio's distance from 1 is within that noise.

What each side times (read in ``tools/llama-bench/llama-bench.cpp`` and
``omni/engines/llamacpp.py``): llama-bench's pp is one ``llama_decode`` of
the prompt and a synchronize, no sampling; its tg is one ``llama_decode``
per token and a synchronize, no sampling either, and by default from an
empty cache, where omni's decode steps follow the prompt: llama-bench runs
here with ``-d 0,<prompt>``, and its tg is the one at depth <prompt> (tg64
@ d128), its pp the one at depth 0. omni's TTFT ends when the
first token has been sampled from the prompt's logits, and each of its
decode steps includes sampling the step's token (greedy over the vocabulary)
and filling the next batch: what a caller of the engine waits for. That
sampling is the one difference left once the settings agree.

    .venv/bin/python benchmarks/llamacpp_vs_llama_bench.py [--pairs 6] [--cpus 0] [--prompt 128 --gen 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

from omni import REPO_ROOT
from omni.cpulist import format_cpulist
from omni.envs.build import env_dir
from omni.host.placement import numactl_path, pin_argv
from omni.host.topology import allocate_slots, read_topology
from omni.store.reading import load_iterations
from omni.sweep.execute import run_once


def omni_arm(args: argparse.Namespace) -> dict:
    return {
        "name": "omni-llamacpp",
        "engine": "llamacpp",
        "model": "tiny-llama",
        "context_len": args.prompt + args.gen,
        "prompt_len": args.prompt,
        "max_tokens": args.gen,
        "batch_size": 1,
        "threads": args.threads,
        "params": {"gguf": args.gguf, "mmap": False, "repack": True, "warmup": 1, "iterations": args.reps},
    }


def internal_rates(row: dict) -> tuple[float, float]:
    """llama.cpp's own prompt-eval and eval rates over omni's timed iterations
    (``llama_perf_context``, in the same process and window as omni's clock):
    the time inside ``llama_decode`` only, as llama-bench's."""
    perf = row["engine_perf"]
    perf = json.loads(perf) if isinstance(perf, str) else perf
    return perf["n_p_eval"] / perf["t_p_eval_ms"] * 1e3, perf["n_eval"] / perf["t_eval_ms"] * 1e3


class OmniSide(NamedTuple):
    """One omni run: its median iteration's prefill and decode tok/s (what a
    summary uses, set against llama-bench), llama.cpp's own rates over the
    timed iterations, and omni's rates over those same iterations as one
    window (to set against llama.cpp's own: one disturbed iteration moves
    both alike, where it moves a total and not a median)."""

    prefill: float
    decode: float
    internal_prefill: float
    internal_decode: float
    whole_prefill: float
    whole_decode: float


def whole_rate(rates) -> float:
    """Tokens over seconds across the timed iterations, as llama_perf_context
    totals them. Every iteration has the same prompt and generation lengths,
    so that is the harmonic mean of the iterations' rates."""
    return statistics.harmonic_mean(float(r) for r in rates)


def run_omni(args: argparse.Namespace, work: Path, index: int) -> OmniSide:
    spec = {
        "name": f"llama-bench-peer-{index}",
        "passes": 1,
        "slots": {"cpus": args.cpus},
        "busy_wait_s": 60,
        "arms": [omni_arm(args)],
    }
    row, sweep_id = run_once(spec, work)
    its = load_iterations(work / "results", sweep_id)
    prefill, decode = its["prefill_tok_s"], its["decode_tok_s"]
    return OmniSide(
        float(prefill.median()), float(decode.median()), *internal_rates(row), whole_rate(prefill), whole_rate(decode)
    )


def bench_argv(args: argparse.Namespace) -> list[str]:
    gguf = REPO_ROOT / "models" / "tiny-llama" / f"tiny-llama-{args.gguf}.gguf"
    return [
        str(env_dir(REPO_ROOT, "llamacpp") / "bin" / "llama-bench"),
        "-m",
        str(gguf),
        "-p",
        str(args.prompt),
        "-n",
        str(args.gen),
        "-t",
        str(args.threads),
        "-d",
        f"0,{args.prompt}",  # pp at depth 0; tg after the prompt, where omni's decode steps are
        "-r",
        str(args.reps),
        "-ub",
        str(max(args.prompt, 512)),  # as omni sets n_ubatch (omni.engines.llamacpp.new_context)
        "-fa",
        "auto",
        "--load-mode",
        "none",  # mmap: false
        "--repack",
        "1",
        "-o",
        "json",
    ]


def run_bench(args: argparse.Namespace, slot) -> tuple[float, float]:
    argv, _ = pin_argv(slot, bench_argv(args), numactl_path())
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"llama-bench failed: {done.stderr[-2000:]}")
    tests = json.loads(done.stdout)
    pp = next(t for t in tests if t["n_prompt"] == args.prompt and t["n_gen"] == 0 and t["n_depth"] == 0)
    tg = next(t for t in tests if t["n_gen"] == args.gen and t["n_prompt"] == 0 and t["n_depth"] == args.prompt)
    return float(pp["avg_ts"]), float(tg["avg_ts"])


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--cpus", default="0")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--gguf", default="bf16")
    parser.add_argument("--json", type=Path, default=None, help="write the pairs and medians here")
    args = parser.parse_args()
    (slot,) = allocate_slots(read_topology("/"), cpus=[[int(c) for c in _cpus(args.cpus)]])
    args.threads = args.threads or len(slot.cpus)
    pairs = []
    with tempfile.TemporaryDirectory(prefix="llama-bench-peer-") as tmp:
        for i in range(args.pairs):
            first_omni = i % 2 == 0
            bench = None if first_omni else run_bench(args, slot)
            mine = run_omni(args, Path(tmp), i)
            bench = bench or run_bench(args, slot)
            pairs.append({**mine._asdict(), "bench_prefill": bench[0], "bench_decode": bench[1]})
            p = pairs[-1]
            print(
                f"pair {i} ({'omni' if first_omni else 'llama-bench'} first): prefill omni {p['prefill']:.0f} / "
                f"pp{args.prompt} {p['bench_prefill']:.0f} tok/s = x{p['prefill'] / p['bench_prefill']:.3f}; decode "
                f"omni {p['decode']:.0f} / tg{args.gen} {p['bench_decode']:.0f} tok/s = "
                f"x{p['decode'] / p['bench_decode']:.3f}",
                flush=True,
            )
    result = {"cpus": format_cpulist(slot.cpus), "threads": args.threads, "prompt": args.prompt, "gen": args.gen}
    for name in ("prefill", "decode"):
        ratios = [p[name] / p[f"bench_{name}"] for p in pairs]
        own = [p[f"whole_{name}"] / p[f"internal_{name}"] for p in pairs]
        result[name] = {
            "omni_over_internal_median": statistics.median(own),
            "omni_over_internal_min": min(own),
            "omni_over_internal_max": max(own),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "omni_median": statistics.median(p[name] for p in pairs),
            "bench_median": statistics.median(p[f"bench_{name}"] for p in pairs),
            "omni_between_starts": spread([p[name] for p in pairs]),
            "bench_between_starts": spread([p[f"bench_{name}"] for p in pairs]),
        }
        r = result[name]
        print(
            f"{name}: omni/llama-bench x{r['ratio_median']:.3f} [{r['ratio_min']:.3f}-{r['ratio_max']:.3f}] over "
            f"{len(pairs)} pairs; medians {r['omni_median']:.0f} vs {r['bench_median']:.0f} tok/s; between starts "
            f"omni {r['omni_between_starts']:.1%}, llama-bench {r['bench_between_starts']:.1%}; omni's clock over "
            f"llama.cpp's own (same process, same iterations as one window) x{r['omni_over_internal_median']:.3f} "
            f"[{r['omni_over_internal_min']:.3f}-{r['omni_over_internal_max']:.3f}]"
        )
    if args.json:
        args.json.write_text(json.dumps({**result, "pairs": pairs}, indent=1))


def _cpus(text: str) -> list[int]:
    from omni.cpulist import parse_cpulist

    return parse_cpulist(text)


if __name__ == "__main__":
    main()
