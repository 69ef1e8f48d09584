"""llama.cpp engine (the baseline), through llama-cpp-python's C API.

The batch runs as ``batch_size`` parallel sequences in one context, like
vLLM's batch: one ``llama_decode`` for all prompts (the prefill), then one
per step with a token per sequence, greedy. Timings are wall clock around
those calls, each decode step timed on its own, ``iterations`` times after
warm-up with the KV cache cleared in between; llama.cpp's own
``llama_perf_context`` totals over the timed iterations are kept beside them
(it files every multi-token decode under prompt eval, so with a batch its
split is not comparable).

With ``mmap: true`` the weights are file-backed pages, not RssAnon: the row
records the mode and memory must not be compared across modes.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from omni.engines.common import token_prompts
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


def set_load_mode(llama_cpp, mparams, mmap: bool) -> None:
    """mmap on or off. This llama.cpp has ``load_mode`` (an enum), no ``use_mmap``:
    a ctypes Structure silently accepts an unknown attribute, so check the field."""
    fields = {name for name, _ in type(mparams)._fields_}
    if "load_mode" in fields:
        mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP if mmap else llama_cpp.LLAMA_LOAD_MODE_NONE
    elif "use_mmap" in fields:
        mparams.use_mmap = mmap
    else:
        raise RuntimeError(f"llama_model_params has neither load_mode nor use_mmap: {sorted(fields)}")


@dataclass
class Loaded:
    model: object
    ctx: object
    n_vocab: int
    n_ctx: int


def load(path: Path, arm: dict) -> Loaded:
    """Model and a context with one KV stream per sequence of the batch.

    The C API directly: llama-cpp-python's ``Llama`` cannot set n_seq_max.
    ``context_len`` is per sequence, as vLLM's max_model_len is.
    """
    import llama_cpp

    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    set_load_mode(llama_cpp, mparams, arm["params"]["mmap"])
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    batch, prompt_len = arm["batch_size"], arm["prompt_len"]
    per_seq = arm.get("context_len") or prompt_len + arm["max_tokens"]
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = batch * per_seq
    cparams.n_batch = cparams.n_ubatch = max(batch * prompt_len, 512)
    cparams.n_seq_max = batch
    cparams.n_threads = cparams.n_threads_batch = arm["threads_effective"]
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        raise RuntimeError(f"llama.cpp could not create a context of {cparams.n_ctx} tokens")
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    return Loaded(model, ctx, n_vocab, cparams.n_ctx)


def generate(lm: Loaded, arm: dict, prompts: list[list[int]]) -> dict:
    """Prefill all sequences, then decode step by step: the raw times of
    :mod:`omni.iterations` (first token, end, each decode step's wall time)."""
    import llama_cpp

    ctx, n_vocab = lm.ctx, lm.n_vocab
    batch_n, prompt_len, max_tokens = len(prompts), arm["prompt_len"], arm["max_tokens"]
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    entries = [(tok, pos, s, pos == prompt_len - 1) for s, p in enumerate(prompts) for pos, tok in enumerate(p)]
    t0 = time.perf_counter()
    batch = build_batch(llama_cpp, entries, len(entries), batch_n)
    rc = llama_cpp.llama_decode(ctx, batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode failed on the prefill (rc {rc}): context of {lm.n_ctx} tokens too small?")
    last = [greedy(llama_cpp, ctx, (s + 1) * prompt_len - 1, n_vocab) for s in range(batch_n)]
    ttft = time.perf_counter() - t0
    llama_cpp.llama_batch_free(batch)
    step = llama_cpp.llama_batch_init(batch_n, 0, batch_n)
    steps = []
    for k in range(1, max_tokens):
        started = time.perf_counter()
        for s in range(batch_n):
            step.token[s], step.pos[s], step.n_seq_id[s], step.logits[s] = last[s], prompt_len + k - 1, 1, True
            step.seq_id[s][0] = s
        step.n_tokens = batch_n
        rc = llama_cpp.llama_decode(ctx, step)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed at decode step {k} (rc {rc})")
        last = [greedy(llama_cpp, ctx, s, n_vocab) for s in range(batch_n)]
        steps.append(time.perf_counter() - started)
    e2e = time.perf_counter() - t0
    llama_cpp.llama_batch_free(step)
    return {"ttft_s": ttft, "e2e_s": e2e, "step_s": steps}


def kv_bytes(lm: Loaded) -> int:
    """f16 K and V for every layer and every context slot."""
    import llama_cpp

    model = lm.model
    heads = llama_cpp.llama_model_n_head(model)
    head_dim = llama_cpp.llama_model_n_embd(model) // heads
    kv_heads = llama_cpp.llama_model_n_head_kv(model)
    return lm.n_ctx * llama_cpp.llama_model_n_layer(model) * kv_heads * head_dim * 2 * 2


def run(arm: dict) -> dict:
    import llama_cpp

    params = arm["params"]
    path = Path(arm["model_path"])
    batch, prompt_len = arm["batch_size"], arm["prompt_len"]
    mark_phase("load")
    t0 = time.perf_counter()
    lm = load(path, arm)
    load_s = time.perf_counter() - t0
    mark_phase("loaded")
    log(f"loaded {path.name} in {load_s:.2f} s, n_ctx={lm.n_ctx}, threads={arm['threads_effective']}, mmap={params['mmap']}")
    for seed in range(params["warmup"]):
        generate(lm, {**arm, "max_tokens": 2}, token_prompts(batch, prompt_len, lm.n_vocab, seed=100 + seed))
    llama_cpp.llama_perf_context_reset(lm.ctx)
    prompts = token_prompts(batch, prompt_len, lm.n_vocab)
    iterations = [generate(lm, arm, prompts) for _ in range(params["iterations"])]  # KV cleared each time
    perf = llama_cpp.llama_perf_context(lm.ctx)
    mark_phase("steady")
    time.sleep(params["hold_s"])
    return {
        "metrics": {"load_s": load_s, "kv_cache_bytes_effective": kv_bytes(lm)},
        "iterations": iterations,
        "config": {
            "n_ctx": lm.n_ctx, "threads": arm["threads_effective"], "mmap": params["mmap"], "gguf": path.name,
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
