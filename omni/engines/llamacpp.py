"""llama.cpp engine (the baseline), through llama-cpp-python's C API.

The batch runs as ``batch_size`` parallel sequences in one context, like
vLLM's batch: one ``llama_decode`` for all prompts (the prefill), then one
per step with a token per sequence, greedy. Timings are wall clock around
those calls, each decode step timed on its own, ``iterations`` times after
warm-up with the KV cache cleared in between; llama.cpp's own
``llama_perf_context`` totals over the timed iterations are kept beside them
in ``engine_perf`` (it files every multi-token decode under prompt eval, so
with a batch its split is not comparable). A profiled pass then times every
graph node of ``profile.steps`` steps through ggml's eval callback
(:class:`NodeTimer`).

With ``mmap: true`` the weights are file-backed pages, not RssAnon: the row
records the mode and memory must not be compared across modes. ``repack``
(on, as llama.cpp's default) lets llama.cpp repack quantized weights for its
AMX or interleaved kernels; the row's ``engine_config.weight_buffers`` says,
from llama.cpp's own load lines, which buffers held them.
"""

from __future__ import annotations

import ctypes
import json
import re
import signal
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from omni.engines.common import (
    GGML_EVAL_CALLBACK,
    TokenClock,
    fresh_prompts,
    profile_overhead,
    prompts_digest,
    token_prompts,
    warmup_prompts,
)
from omni.engines.protocol import hold_steady, log, mark_phase, serve


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


def set_repack(llama_cpp, mparams, repack: bool) -> None:
    """llama.cpp's extra buffer types (AMX, CPU_REPACK) on or off, its
    ``use_extra_bufts``; a llama.cpp without that field always repacks."""
    if "use_extra_bufts" in {name for name, _ in type(mparams)._fields_}:
        mparams.use_extra_bufts = repack
    elif not repack:
        raise RuntimeError("this llama.cpp has no use_extra_bufts: params.repack false cannot be applied")


# llama.cpp's line per buffer type the weights were loaded into, e.g.
# "load_tensors:          AMX model buffer size =   727.49 MiB": AMX and
# CPU_REPACK hold repacked weights, CPU and CPU_Mapped the file's layout
BUFFER_MARKER = " model buffer size = "
BUFFER_LINE = re.compile(r"(\S+) model buffer size =\s+([\d.]+) MiB")
AMX_CRASH = (
    "llama.cpp had repacked weights for its AMX kernels, and this llama.cpp crashes in them on a quantized "
    "GGUF (SIGSEGV in ggml_backend_amx_mul_mat, ggml-org/llama.cpp#20824): set params: {repack: false} to run "
    "this arm on llama.cpp's plain CPU kernels (recorded in engine_config)"
)


def weight_buffers(lines) -> dict[str, float]:
    """Buffer type -> MiB of weights, from llama.cpp's load lines (the engine's log)."""
    return {m.group(1): float(m.group(2)) for line in lines if (m := BUFFER_LINE.search(line))}


def crash_hint(returncode: int, lines) -> str | None:
    """What to do about a llama.cpp engine that died of ``returncode`` (a
    negative signal number) after logging ``lines`` (its buffer lines): the
    AMX crash's way out, or None."""
    if returncode == -signal.SIGSEGV and "AMX" in weight_buffers(lines):
        return AMX_CRASH
    return None


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
    set_repack(llama_cpp, mparams, arm["params"]["repack"])
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    ctx, n_ctx = new_context(llama_cpp, model, arm)
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    return Loaded(model, ctx, n_vocab, n_ctx)


def n_batch(arm: dict) -> int:
    """The batch (and micro-batch) size: the whole batch's prefill in one
    ``llama_decode``, and llama.cpp's own 512 at least."""
    return max(arm["batch_size"] * arm["prompt_len"], 512)


def new_context(llama_cpp, model, arm: dict, cb_eval=None) -> tuple[object, int]:
    """A context with one KV stream per sequence; ``cb_eval``: ggml's eval callback."""
    batch, prompt_len = arm["batch_size"], arm["prompt_len"]
    per_seq = arm.get("context_len") or prompt_len + arm["max_tokens"]
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = batch * per_seq
    cparams.n_batch = cparams.n_ubatch = n_batch(arm)
    cparams.n_seq_max = batch
    cparams.n_threads = cparams.n_threads_batch = arm["threads_effective"]
    cparams.no_perf = False  # llama_perf_context's timings (off by default: all zeros)
    if cb_eval is not None:
        cparams.cb_eval = cb_eval
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        raise RuntimeError(f"llama.cpp could not create a context of {cparams.n_ctx} tokens")
    return ctx, cparams.n_ctx


def profile(
    lm: Loaded, arm: dict, prompts: list[list[int]], steps: int, untraced: list[dict]
) -> tuple[dict, float | None]:
    """``steps`` steps with every node timed (:class:`NodeTimer`), in a context of
    their own: the timed iterations ran without the callback. Returns the
    profile and the overhead, median traced decode step over median untraced."""
    import llama_cpp

    timer = NodeTimer(llama_cpp, steps)
    llama_cpp.llama_free(lm.ctx)
    lm.ctx, _ = new_context(llama_cpp, lm.model, arm, timer.callback)
    while timer.step < steps - 1:
        generate(lm, arm, prompts, timer)
        if timer.error:
            raise RuntimeError(f"ggml eval callback failed: {timer.error}")
    overhead = profile_overhead(untraced, [ms / 1000 for kind, ms in timer.step_ms.values() if kind == "decode"])
    head = [
        llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(lm.model)),
        llama_cpp.llama_model_n_embd(lm.model),
    ]
    return {"records": timer.records(), "head_shape": head}, overhead


class _Tensor(ctypes.Structure):
    """The head of ggml's ``struct ggml_tensor`` (ggml.h), as far as omni reads it."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
    ]


class NodeTimer:
    """Per-node times of a profiled pass, from ggml's eval callback (``cb_eval``).

    Asked about every node, the callback says yes, so the scheduler computes
    each node on its own and calls back when it is done: the time between the
    two calls is that node's. Computing nodes one by one (synchronized each
    time) distorts the step, so these times are for shares, not absolutes.
    One record per (step, op, shapes, types): calls and ms, as omni.measure.ops keeps
    them for every engine.
    """

    def __init__(self, llama_cpp, steps: int) -> None:
        lib = ctypes.CDLL(str(next((Path(llama_cpp.__file__).parent / "lib").glob("libggml-base.so*"))))
        for name in ("ggml_op_desc", "ggml_type_name", "ggml_nelements"):
            getattr(lib, name).argtypes = [ctypes.c_void_p] if name != "ggml_type_name" else [ctypes.c_int]
        lib.ggml_op_desc.restype = lib.ggml_type_name.restype = ctypes.c_char_p
        lib.ggml_nelements.restype = ctypes.c_int64
        self.lib, self.steps = lib, steps
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._eval)
        self.step, self.kind, self.started, self.asked = -1, "", 0.0, 0.0
        self.totals: dict[tuple, list] = {}
        self.step_ms: dict[int, tuple[str, float]] = {}
        self.error: str | None = None

    @property
    def tracing(self) -> bool:
        return 0 <= self.step < self.steps

    def begin(self, kind: str) -> None:
        self.step += 1
        self.kind, self.started = kind, time.perf_counter()

    def end(self) -> None:
        if self.tracing:
            self.step_ms[self.step] = (self.kind, (time.perf_counter() - self.started) * 1000)

    def _eval(self, tensor, ask, _user_data) -> bool:
        # an exception would die inside ggml's C caller: kept, and raised after the step
        try:
            return self._observe(tensor, ask)
        except Exception as err:  # noqa: BLE001
            self.error = self.error or f"{type(err).__name__}: {err}"
            return False

    def _observe(self, tensor, ask) -> bool:
        if ask:
            self.asked = time.perf_counter()
            return self.tracing
        ms = (time.perf_counter() - self.asked) * 1000
        t = _Tensor.from_address(tensor)
        if self.lib.ggml_nelements(tensor) != t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]:
            raise RuntimeError("ggml_tensor's layout is not the one omni reads (ggml.h changed?)")
        sources = [_Tensor.from_address(p) for p in t.src if p]
        shapes = json.dumps([_dims(src.ne) for src in sources])
        types = ",".join(self.lib.ggml_type_name(src.type).decode() for src in sources)
        entry = self.totals.setdefault((self.step, self.lib.ggml_op_desc(tensor).decode(), shapes, types), [0, 0.0])
        entry[0] += 1
        entry[1] += ms
        return True  # go on computing

    def records(self) -> list[dict]:
        return [
            {
                "step": step,
                "step_kind": self.step_ms[step][0],
                "step_ms": self.step_ms[step][1],
                "op": op,
                "shapes": shapes,
                "dtypes": types,
                "calls": calls,
                "self_ms": ms,
                "method": GGML_EVAL_CALLBACK,
                "distorting": True,
            }
            for (step, op, shapes, types), (calls, ms) in sorted(self.totals.items())
            if step in self.step_ms
        ]


def _dims(ne) -> list[int]:
    """ggml's ne (innermost first, padded with 1s) without the padding."""
    dims = list(ne)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return dims


class _NoTracer:
    def begin(self, kind: str) -> None:
        pass

    def end(self) -> None:
        pass


def generate(lm: Loaded, arm: dict, prompts: list[list[int]], tracer=_NoTracer()) -> dict:
    """Prefill all sequences, then decode step by step: the raw times of
    :mod:`omni.measure.iterations` (each sequence's token times, each step's end, the
    first token of the batch, the end, each decode step's wall time).
    ``tracer`` is told where each step (one ``llama_decode``) begins and ends.
    A token's time is when its step's logits have been sampled for every
    sequence: one ``llama_decode`` serves the whole batch, in lock step."""
    import llama_cpp

    ctx, n_vocab = lm.ctx, lm.n_vocab
    batch_n, prompt_len, max_tokens = len(prompts), arm["prompt_len"], arm["max_tokens"]
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    entries = [(tok, pos, s, pos == prompt_len - 1) for s, p in enumerate(prompts) for pos, tok in enumerate(p)]
    clock = TokenClock(batch_n)
    batch = build_batch(llama_cpp, entries, len(entries), batch_n)
    tracer.begin("prefill")
    rc = llama_cpp.llama_decode(ctx, batch)
    tracer.end()
    if rc != 0:
        raise RuntimeError(f"llama_decode failed on the prefill (rc {rc}): context of {lm.n_ctx} tokens too small?")
    last = [greedy(llama_cpp, ctx, (s + 1) * prompt_len - 1, n_vocab) for s in range(batch_n)]
    # sampled per sequence: the decode loop has no stop, so all or an error
    ttft = clock.step((s, 1) for s in range(batch_n))
    llama_cpp.llama_batch_free(batch)
    step = llama_cpp.llama_batch_init(batch_n, 0, batch_n)
    steps = []
    for k in range(1, max_tokens):
        started = time.perf_counter()
        for s in range(batch_n):
            step.token[s], step.pos[s], step.n_seq_id[s], step.logits[s] = last[s], prompt_len + k - 1, 1, True
            step.seq_id[s][0] = s
        step.n_tokens = batch_n
        tracer.begin("decode")
        rc = llama_cpp.llama_decode(ctx, step)
        tracer.end()
        if rc != 0:
            raise RuntimeError(f"llama_decode failed at decode step {k} (rc {rc})")
        last = [greedy(llama_cpp, ctx, s, n_vocab) for s in range(batch_n)]
        clock.step((s, 1) for s in range(batch_n))
        steps.append(time.perf_counter() - started)
    e2e = time.perf_counter() - clock.t0
    llama_cpp.llama_batch_free(step)
    tokens = [len(times) for times in clock.token_s]
    return {"ttft_s": ttft, "e2e_s": e2e, "step_s": steps, "tokens": tokens, **clock.raw()}


def kv_bytes(lm: Loaded) -> tuple[int, int]:
    """f16 K and V for every layer: (allocated, needed). Allocated counts the
    context's cells as llama.cpp made them (``llama_n_ctx``: it pads what was
    asked); needed counts what was asked, batch x context_len."""
    import llama_cpp

    model = lm.model
    heads = llama_cpp.llama_model_n_head(model)
    head_dim = llama_cpp.llama_model_n_embd(model) // heads
    kv_heads = llama_cpp.llama_model_n_head_kv(model)
    per_token = llama_cpp.llama_model_n_layer(model) * kv_heads * head_dim * 2 * 2
    return llama_cpp.llama_n_ctx(lm.ctx) * per_token, lm.n_ctx * per_token


# llama.cpp's dense file types (llama_ftype): no tensor of theirs is quantized
DENSE_FILE_TYPES = ("ALL_F32", "MOSTLY_F16", "MOSTLY_BF16")


def ggml_type_name(name: str) -> str:
    """gguf-py's enum name (Q6_K, BF16) as ggml spells the type (q6_K, bf16)."""
    lower = name.lower()
    return lower[:-2] + "_K" if lower.endswith("_k") else lower


# GGUF metadata value types (gguf.GGUFValueType): struct formats of the scalars
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_header(path: Path) -> tuple[dict, dict[str, int]]:
    """(scalar metadata, tensor name -> ggml type id) of a GGUF file, read from
    its header alone: arrays (the token list) are skipped, not built.

    Not ``gguf.GGUFReader``: it builds every array item as an object, which
    took 2.1-3.1 s on tiny-llama's 32000-token vocabulary (and more memory with
    a 128k one), in a process whose load and memory omni measures.
    """
    with open(path, "rb") as f:

        def unpack(fmt: str):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))

        def skip_string() -> None:
            f.seek(unpack("<Q")[0], 1)

        def value(kind: int):
            if kind == _GGUF_STRING:
                return f.read(unpack("<Q")[0]).decode("utf-8", "replace")
            if kind == _GGUF_ARRAY:
                item, count = unpack("<IQ")
                if item in _GGUF_SCALARS:
                    f.seek(struct.calcsize(_GGUF_SCALARS[item]) * count, 1)
                else:
                    for _ in range(count):
                        skip_string() if item == _GGUF_STRING else value(item)
                return None
            return unpack(_GGUF_SCALARS[kind])[0]

        magic, version = f.read(4), unpack("<I")[0]
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not a GGUF v2+ file (magic {magic!r}, version {version})")
        n_tensors, n_kv = unpack("<QQ")
        meta = {}
        for _ in range(n_kv):
            key = f.read(unpack("<Q")[0]).decode()
            meta[key] = value(unpack("<I")[0])
        types = {}
        for _ in range(n_tensors):
            name = f.read(unpack("<Q")[0]).decode()
            f.seek(8 * unpack("<I")[0], 1)  # the dimensions
            types[name] = unpack("<I")[0]
            f.seek(8, 1)  # the data offset
    return meta, types


def head_report(path: Path) -> dict:
    """The output head as the file holds it, which is what llama.cpp loads:
    ``output.weight``'s tensor type, or ``token_embd.weight``'s when the
    embeddings are tied (no output.weight: llama.cpp multiplies by the
    embedding), and the file's own claim, ``general.file_type``; the names
    are gguf's (llama.cpp's own gguf-py)."""
    import gguf

    meta, types = gguf_header(path)
    tensor = "output.weight" if "output.weight" in types else "token_embd.weight"
    file_type = meta.get("general.file_type")
    file_type = gguf.LlamaFileType(file_type).name if file_type is not None else None
    weight_type = gguf.GGMLQuantizationType(types[tensor]).name if tensor in types else None
    return {
        "tensor": tensor if tensor == "output.weight" else f"{tensor} (tied)",
        "weight_type": ggml_type_name(weight_type) if weight_type else None,
        "file_type": file_type,
        "quantization": file_type if file_type and file_type not in DENSE_FILE_TYPES else None,
    }


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
    log(
        f"loaded {path.name} in {load_s:.2f} s, n_ctx={lm.n_ctx}, threads={arm['threads_effective']}, mmap={params['mmap']}, "
        f"repack={params['repack']}"
    )
    seed = arm.get("prompt_seed", 0)
    # drawn before the first timed iteration, so no first sight waits on Python between iterations
    prompts, fresh_batch = (f(batch, prompt_len, lm.n_vocab, seed) for f in (token_prompts, fresh_prompts))
    for i in range(params["warmup"]):
        generate(lm, {**arm, "max_tokens": 2}, warmup_prompts(batch, prompt_len, lm.n_vocab, seed, i))
    llama_cpp.llama_perf_context_reset(lm.ctx)
    iterations = [generate(lm, arm, prompts) for _ in range(params["iterations"])]  # KV cleared each time
    perf = llama_cpp.llama_perf_context(lm.ctx)
    fresh = generate(lm, arm, fresh_batch)  # the repeat audit's second first sight, in no metric
    kv_allocated, kv_needed = kv_bytes(lm)
    metrics = {"load_s": load_s, "kv_cache_bytes_effective": kv_allocated, "kv_cache_bytes_needed": kv_needed}
    traced = {}
    if arm.get("profiled"):
        mark_phase("profiling")
        traced, metrics["profile_overhead"] = profile(lm, arm, prompts, arm["profile"]["steps"], iterations)
    hold_steady(params["hold_s"])
    return {
        "metrics": metrics,
        "iterations": iterations,
        "fresh": fresh,
        "profile": traced,
        "head": head_report(path),  # after the measured phases: a header read, nothing of it in them
        # llama.cpp's own phase totals over the timed iterations (t_load_ms: the
        # whole load); with a batch, every decode is a multi-token one, which it
        # files under prompt eval, so its split is not vLLM's prefill/decode
        "perf": {
            "t_load_ms": perf.t_load_ms,
            "t_p_eval_ms": perf.t_p_eval_ms,
            "n_p_eval": perf.n_p_eval,
            "t_eval_ms": perf.t_eval_ms,
            "n_eval": perf.n_eval,
            "n_reused": perf.n_reused,
        },
        "config": {
            "n_ctx": lm.n_ctx,
            "threads": arm["threads_effective"],
            # what llama-bench's flags would say: the same batch sizes, flash
            # attention left to llama.cpp (auto), decode after the prompt (depth)
            "n_batch": n_batch(arm),
            "n_ubatch": n_batch(arm),
            "flash_attn": "auto",
            "decode_depth": prompt_len,
            "mmap": params["mmap"],
            "repack": params["repack"],
            "gguf": path.name,
            "prompt_seed": seed,
            "prompts_sha256": prompts_digest(prompts),
        },
        "provenance": {
            "engine_version": f"llama-cpp-python {llama_cpp.__version__}",
            "engine_commit": ggml_commit(),
            "system_info": llama_cpp.llama_print_system_info().decode(),
        },
    }


if __name__ == "__main__":
    raise SystemExit(serve(run))
