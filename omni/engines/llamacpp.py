"""llama.cpp engine (the baseline), through llama-cpp-python's C API.

The batch runs as ``batch_size`` parallel sequences in one context, like
vLLM's batch: one ``llama_decode`` for all prompts (the prefill), then one
per step with a token per sequence, greedy. Timings are wall clock around
those calls; llama.cpp's own ``llama_perf_context`` figures are kept beside
them (it files every multi-token decode under prompt eval, so with a batch
its split is not comparable).

With ``mmap: true`` the weights are file-backed pages, not RssAnon: the row
records the mode and memory must not be compared across modes.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np

from omni.engines.common import rates, token_prompts
from omni.engines.protocol import log, mark_phase, serve


def ggml_commit() -> str | None:
    """The llama.cpp commit the library was built from (ggml_commit(), when exported)."""
    import llama_cpp

    for lib in sorted((Path(llama_cpp.__file__).parent / "lib").glob("libggml-base.so*")):
        try:
            fn = ctypes.CDLL(str(lib)).ggml_commit
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        return fn().decode()
    return None


def build_batch(llama_cpp, tokens: list[tuple[int, int, int, bool]], capacity: int, n_seq: int):
    """A llama_batch of ``(token, pos, seq, want_logits)``."""
    batch = llama_cpp.llama_batch_init(capacity, 0, n_seq)
    for i, (tok, pos, seq, want) in enumerate(tokens):
        batch.token[i] = tok
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = want
    batch.n_tokens = len(tokens)
    return batch


def greedy(llama_cpp, ctx, index: int, n_vocab: int) -> int:
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, index), shape=(n_vocab,))
    return int(np.argmax(logits))


def generate(llm, arm: dict, prompts: list[list[int]]) -> tuple[float, float]:
    """Prefill all sequences, then decode step by step; return (ttft_s, e2e_s)."""
    import llama_cpp

    ctx, n_vocab = llm._ctx.ctx, llm.n_vocab()
    batch_n, prompt_len, max_tokens = len(prompts), arm["prompt_len"], arm["max_tokens"]
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    entries = [(tok, pos, s, pos == prompt_len - 1) for s, p in enumerate(prompts) for pos, tok in enumerate(p)]
    t0 = time.perf_counter()
    batch = build_batch(llama_cpp, entries, len(entries), batch_n)
    if llama_cpp.llama_decode(ctx, batch) != 0:
        raise RuntimeError("llama_decode failed on the prefill (context too small?)")
    last = [greedy(llama_cpp, ctx, (s + 1) * prompt_len - 1, n_vocab) for s in range(batch_n)]
    ttft = time.perf_counter() - t0
    llama_cpp.llama_batch_free(batch)
    step = llama_cpp.llama_batch_init(batch_n, 0, batch_n)
    for k in range(1, max_tokens):
        for s in range(batch_n):
            step.token[s], step.pos[s], step.n_seq_id[s], step.logits[s] = last[s], prompt_len + k - 1, 1, True
            step.seq_id[s][0] = s
        step.n_tokens = batch_n
        if llama_cpp.llama_decode(ctx, step) != 0:
            raise RuntimeError(f"llama_decode failed at decode step {k}")
        last = [greedy(llama_cpp, ctx, s, n_vocab) for s in range(batch_n)]
    e2e = time.perf_counter() - t0
    llama_cpp.llama_batch_free(step)
    return ttft, e2e


def kv_bytes(llm, n_ctx: int) -> int:
    """f16 K and V for every layer and every context slot."""
    meta = llm.metadata
    layers = int(meta["llama.block_count"])
    heads = int(meta["llama.attention.head_count"])
    kv_heads = int(meta.get("llama.attention.head_count_kv", heads))
    head_dim = int(meta["llama.embedding_length"]) // heads
    return n_ctx * layers * kv_heads * head_dim * 2 * 2


def run(arm: dict) -> dict:
    import llama_cpp
    from llama_cpp import Llama

    params = arm["params"]
    path = Path(arm["model_path"])
    threads = arm["threads_effective"]
    batch, prompt_len, max_tokens = arm["batch_size"], arm["prompt_len"], arm["max_tokens"]
    n_ctx = arm.get("context_len") or batch * (prompt_len + max_tokens)
    mark_phase("load")
    t0 = time.perf_counter()
    llm = Llama(
        model_path=str(path), n_ctx=n_ctx, n_batch=max(batch * prompt_len, 512), n_ubatch=max(batch * prompt_len, 512),
        n_seq_max=batch, n_threads=threads, n_threads_batch=threads, use_mmap=params["mmap"], verbose=False,
    )  # fmt: skip
    load_s = time.perf_counter() - t0
    mark_phase("loaded")
    log(f"loaded {path.name} in {load_s:.2f} s, n_ctx={n_ctx}, threads={threads}, mmap={params['mmap']}")
    prompts = token_prompts(batch, prompt_len, llm.n_vocab())
    for _ in range(params["warmup"]):
        generate(llm, {**arm, "max_tokens": 2}, prompts)
    llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    ttft, e2e = generate(llm, arm, prompts)
    perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
    mark_phase("steady")
    time.sleep(params["hold_s"])
    metrics = rates(batch, prompt_len, max_tokens, ttft, e2e) | {"load_s": load_s, "kv_cache_bytes_effective": kv_bytes(llm, n_ctx)}
    return {
        "metrics": metrics,
        "config": {
            "n_ctx": n_ctx, "threads": threads, "mmap": params["mmap"], "gguf": path.name,
            "llama_perf": {"t_p_eval_ms": perf.t_p_eval_ms, "n_p_eval": perf.n_p_eval,
                           "t_eval_ms": perf.t_eval_ms, "n_eval": perf.n_eval},
        },
        "provenance": {
            "engine_version": f"llama-cpp-python {llama_cpp.__version__}",
            "engine_commit": ggml_commit(),
            "system_info": llama_cpp.llama_print_system_info().decode(),
        },
    }  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(serve(run))
