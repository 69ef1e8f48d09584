"""Runtime patches, each toggleable, each checking first that its bug is there.

Every patch reports per process: ``applied``, ``not needed`` (this vLLM does
not have the bug) or ``failed`` with the reason (a symbol gone after an
upgrade, say): the run goes on and the row says what each process did.
Applying twice is a no-op (``already applied``).
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from omni.vllm_plugin.names import PATCHES, QUANT_VAR, REPORT_VAR, SELECT_VAR  # noqa: F401 - PATCHES: the spec's list

MARK = "_omni_patched"


@dataclass(frozen=True)
class Patch:
    name: str
    why: str
    # returns None when the bug is absent, else what shows it is present
    present: Callable[[], str | None]
    apply: Callable[[], None]


# --- aot_compile_cache_load -------------------------------------------------


def _aot_present() -> str | None:
    from vllm.compilation import decorators

    source = inspect.getsource(decorators._try_load_aot_compiled_fn)
    call = "loaded_fn._artifacts.compiled_fn.finalize_loading("
    if call in source and "hasattr" not in source and "getattr(" not in source.split(call)[0][-200:]:
        return "decorators._try_load_aot_compiled_fn calls finalize_loading on whatever compiled_fn is"
    return None


def _aot_apply() -> None:
    """A loaded artifact whose compiled_fn is a plain function (the CPU
    standalone-compile path) has nothing left to finalize: give it a no-op
    ``finalize_loading`` instead of failing the load and recompiling."""
    import torch

    original = torch.compiler.load_compiled_function
    if getattr(original, MARK, False):
        return

    def load_compiled_function(*args, **kwargs):
        loaded = original(*args, **kwargs)
        compiled = getattr(getattr(loaded, "_artifacts", None), "compiled_fn", None)
        if compiled is not None and not hasattr(compiled, "finalize_loading"):
            compiled.finalize_loading = lambda vllm_config: None
        return loaded

    setattr(load_compiled_function, MARK, True)
    torch.compiler.load_compiled_function = load_compiled_function


# --- explicit_kv_cache_memory ----------------------------------------------


def _kv_present() -> str | None:
    from vllm.platforms.cpu import CpuPlatform

    source = inspect.getsource(CpuPlatform.check_and_update_config)
    if "VLLM_CPU_KVCACHE_SPACE" in source and "cache_config.kv_cache_memory_bytes = " in source:
        guard = source.split("VLLM_CPU_KVCACHE_SPACE", 1)[1].split("kv_cache_memory_bytes = ", 1)[0]
        if "kv_cache_memory_bytes is None" not in guard:
            return "CpuPlatform.check_and_update_config overwrites kv_cache_memory_bytes from VLLM_CPU_KVCACHE_SPACE"
    return None


def _kv_apply() -> None:
    """An explicit per-arm ``kv_cache_memory_bytes`` wins over the legacy env var."""
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.check_and_update_config.__func__
    if getattr(original, MARK, False):
        return

    def check_and_update_config(cls, vllm_config):
        explicit = vllm_config.cache_config.kv_cache_memory_bytes
        original(cls, vllm_config)
        if explicit is not None:
            vllm_config.cache_config.kv_cache_memory_bytes = explicit

    setattr(check_and_update_config, MARK, True)
    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


# --- release_memory_after_load ----------------------------------------------


WORKER_MODULE = "vllm.v1.worker.cpu_worker"
# glibc's allocator in the state it drifts into once big buffers have been
# freed (its mmap threshold rises with them, so later buffers land in the heap
# and free() keeps them), pinned so an A/B of this patch does not depend on
# allocation history. Left to drift, 1B-shape int4 runs retained 0-370 MB.
RETAINING_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after ``name`` is imported, then leaves."""

    def __init__(self, name: str, callback: Callable) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module, callback = spec.loader.exec_module, self.callback

        def exec_then_patch(module):
            exec_module(module)
            callback(module)

        spec.loader.exec_module = exec_then_patch
        return spec


def when_imported(name: str, callback: Callable) -> bool:
    """Patch a module where it is used, without importing it where it is not.

    Importing vLLM's CPU worker module into the main and EngineCore processes
    just to patch it costs them ~14 MB of RssAnon each (measured: +42 MB over
    the tree), which would hide the very saving this patch is for.
    """
    if name in sys.modules:
        callback(sys.modules[name])
        return True
    sys.meta_path.insert(0, _AfterImport(name, callback))
    return False


def _trim_present() -> str | None:
    preload = os.environ.get("LD_PRELOAD", "")
    if "tcmalloc" in preload or "jemalloc" in preload:
        return None  # not glibc's allocator: malloc_trim would do nothing
    if WORKER_MODULE in sys.modules and "malloc_trim" in inspect.getsource(sys.modules[WORKER_MODULE]):
        return None
    return "glibc keeps the arenas freed after weight loading mapped until malloc_trim"


def _wrap_load_model(module) -> None:
    """After ``CPUWorker.load_model``, ``malloc_trim(0)``: freed arenas go back to the OS."""
    worker = module.CPUWorker
    original = worker.load_model
    if getattr(original, MARK, False) or "malloc_trim" in inspect.getsource(worker):
        return
    libc = ctypes.CDLL("libc.so.6")

    def load_model(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        libc.malloc_trim(0)
        return result

    setattr(load_model, MARK, True)
    worker.load_model = load_model
    report({"release_memory_after_load": ("applied", "CPUWorker.load_model wrapped where the worker module loaded")})


def _trim_apply() -> None:
    when_imported(WORKER_MODULE, _wrap_load_model)


REGISTRY: dict[str, Patch] = {
    p.name: p
    for p in (
        Patch("aot_compile_cache_load", "warm compiled start reloads its AOT artifact", _aot_present, _aot_apply),
        Patch("explicit_kv_cache_memory", "an arm's KV budget beats VLLM_CPU_KVCACHE_SPACE", _kv_present, _kv_apply),
        Patch("release_memory_after_load", "freed arenas return to the OS after load", _trim_present, _trim_apply),
    )
}
_applied: dict[str, tuple[str, str]] = {}
_lock = threading.Lock()


def selected(value: str | None) -> list[str]:
    if not value or value == "none":
        return []
    if value == "all":
        return list(PATCHES)
    return [name for name in value.split(",") if name]


def apply_patch(name: str) -> tuple[str, str]:
    """Apply one patch here, once; return (status, detail)."""
    with _lock:
        if name in _applied:
            return _applied[name]
        patch = REGISTRY.get(name)
        try:
            if patch is None:
                raise KeyError(f"unknown patch {name!r}")
            evidence = patch.present()
            if evidence is None:
                outcome = ("not needed", "this vLLM does not have the bug")
            else:
                patch.apply()
                outcome = ("applied", evidence)
                if name == "release_memory_after_load" and WORKER_MODULE not in sys.modules:
                    outcome = ("applied", f"armed, takes effect where {WORKER_MODULE} loads: {evidence}")
        except Exception as err:  # noqa: BLE001 - reported per process, the run goes on
            outcome = ("failed", f"{type(err).__name__}: {err}")
        _applied[name] = outcome
        return outcome


def report(results: dict[str, tuple[str, str]]) -> None:
    """Append this process's outcome to the run's report file (one JSON line)."""
    path = os.environ.get(REPORT_VAR)
    if not path:
        return
    line = json.dumps(
        {
            "pid": os.getpid(),
            "process": _process_name(),
            "patches": {name: {"status": s, "detail": d} for name, (s, d) in results.items()},
        },
        sort_keys=True,
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one write: lines from processes never interleave
    finally:
        os.close(fd)


def _process_name() -> str:
    try:
        with open(f"/proc/{os.getpid()}/comm") as f:
            return f.read().strip()
    except OSError:
        return os.path.basename(sys.argv[0])


def register_quantization() -> None:
    """Register ``cpu_int4`` when an arm asks for it (the import costs memory)."""
    if os.environ.get(QUANT_VAR) == "cpu_int4":
        import omni.vllm_plugin.cpu_int4  # noqa: F401 - registers on import


def apply_from_env() -> dict[str, tuple[str, str]]:
    names = selected(os.environ.get(SELECT_VAR))
    results = {name: apply_patch(name) for name in names}
    if os.environ.get(REPORT_VAR):
        report(results)
    return results
