"""The engine side of the engine protocol (see DESIGN.md).

The orchestrator runs ``<env python> -m omni.engines.<kind> --arm ARM.json
--out RESULT.json``. The engine prints progress to stderr, marks its phases
with :func:`mark_phase` so the orchestrator can split memory into after-load
and steady, writes one JSON object to ``--out`` and exits 0. Anything else is
a failed run.

This module runs inside engine environments, which may lack the
orchestrator's packages: standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

# A line the orchestrator's log reader recognises: "omni-phase: loaded"
PHASE_PREFIX = "omni-phase: "


def mark_phase(name: str) -> None:
    """Tell the orchestrator a phase began (it timestamps the line on arrival)."""
    sys.stderr.write(f"{PHASE_PREFIX}{name}\n")
    sys.stderr.flush()


def hold_steady(seconds: float) -> None:
    """The steady window: mark ``steady``, hold everything for ``seconds`` while
    the orchestrator samples memory, then mark ``teardown`` before anything is
    freed. Whatever follows (children ended, buffers dropped, vLLM's EngineCore
    shut down when its ``LLM`` goes out of scope) is not steady state."""
    mark_phase("steady")
    time.sleep(seconds)
    mark_phase("teardown")


def log(message: str) -> None:
    sys.stderr.write(f"[{os.getpid()}] {message}\n")
    sys.stderr.flush()


# Variables that change what an engine does or how fast it does it.
ENV_PREFIXES = (
    "VLLM_",
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",
    "ONEDNN_",
    "DNNL_",
    "MALLOC_",
    "TCMALLOC_",
    "TORCH_",
    "PYTORCH_",
    "LLAMA_",
    "GGML_",
    "OMNI_FAULT_",  # a fault injected on purpose (omni.vllm_plugin.names.FAULT_HEAD_VAR)
)
ENV_NAMES = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "TOKENIZERS_PARALLELISM",
        "PYTHONHASHSEED",
    }
)
# VLLM_API_KEY and friends match a prefix: record that they are set, not what.
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
REDACTED = "<redacted>"


def behaviour_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The behaviour-changing variables of ``environ`` (default: this process's),
    sorted by name, secrets redacted."""
    environ = os.environ if environ is None else environ
    chosen = {}
    for name in sorted(environ):
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES):
            secret = any(word in name.upper() for word in _SECRET_WORDS)
            chosen[name] = REDACTED if secret else environ[name]
    return chosen


def base_provenance() -> dict:
    return {"python_version": platform.python_version(), "pid": os.getpid()}


def write_result(path: Path, result: dict) -> None:
    """Write the result JSON atomically: a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, sort_keys=True, default=str))
    os.replace(tmp, path)


def serve(run: Callable[[dict], dict], argv: list[str] | None = None) -> int:
    """Parse the protocol's arguments, run the engine on the arm, write the result."""
    parser = argparse.ArgumentParser(description="omni engine protocol")
    parser.add_argument("--arm", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    arm = json.loads(args.arm.read_text())
    started = time.time()
    result = run(arm)
    mark_phase("done")  # teardown follows: its memory is not the steady state
    result.setdefault("provenance", {}).update(base_provenance())
    result["provenance"]["env_vars"] = behaviour_env()  # as the engine ran, after it set its own
    result["engine_wall_s"] = time.time() - started
    write_result(args.out, result)
    return 0
