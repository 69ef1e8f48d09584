"""Runs in the vLLM env: prompt logprobs of tiny-llama, bf16 or cpu_int4.

``python tests/engines/int4_probe.py MODEL bf16|int4|int4-head OUT.json [CPU]``: for 4
fixed prompts of 48 tokens, the top-5 logprobs vLLM reports at every position.
With CPU, the probe and every process vLLM starts run on that one CPU, so
probes can run side by side.
"""

import json
import os
import random
import sys

os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def main(model: str, kind: str, out: str, cpu: str | None = None) -> None:
    if cpu is not None:  # before vLLM starts anything: its processes inherit the mask
        os.sched_setaffinity(0, {int(cpu)})
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu
    from vllm import LLM, SamplingParams, TokensPrompt

    kwargs = {
        "model": model,
        "dtype": "bfloat16",
        "enforce_eager": True,
        "max_model_len": 64,
        "kv_cache_memory_bytes": 64 << 20,
        "seed": 0,
    }
    if kind.startswith("int4"):
        os.environ["OMNI_VLLM_QUANTIZATION"] = "cpu_int4"
        kwargs["quantization"] = "cpu_int4"
        kwargs["hf_overrides"] = {
            "quantization_config": {"quant_method": "cpu_int4", "group_size": 32, "lm_head_bf16": kind != "int4-head"}
        }
    llm = LLM(**kwargs)
    rng = random.Random(5)
    prompts = [[rng.randint(259, 9999) for _ in range(48)] for _ in range(4)]
    params = SamplingParams(max_tokens=1, prompt_logprobs=5, temperature=0.0)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    result = [
        [{str(t): lp.logprob for t, lp in pos.items()} if pos else None for pos in o.prompt_logprobs] for o in outputs
    ]
    with open(out, "w") as f:  # closed before teardown, which may abort
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
