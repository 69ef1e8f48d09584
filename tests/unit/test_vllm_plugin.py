"""omni's vLLM plugin without vLLM: the patch registry, each outcome of a patch on a stand-in vLLM
module, and the compile-cache state read from vLLM's log lines."""

from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace

import pytest

from omni.vllm_plugin import names
from omni.vllm_plugin.patch import REGISTRY, apply_patch, selected


def test_registry_matches_the_names_the_spec_accepts():
    assert tuple(REGISTRY) == names.PATCHES


def test_selection():
    assert selected("all") == list(names.PATCHES)
    assert selected("none") == selected(None) == []
    assert selected("explicit_kv_cache_memory,aot_compile_cache_load") == [
        "explicit_kv_cache_memory",
        "aot_compile_cache_load",
    ]


MiB = 1 << 20

# vllm/platforms/cpu.py as vLLM 0.32 has it (the lines the patch reads), as a
# fixed release would have it, and as a release that renamed the method would
CPU_PLATFORM = {
    "buggy": """
import os
class CpuPlatform:
    @classmethod
    def check_and_update_config(cls, vllm_config):
        cache_config = vllm_config.cache_config
        env_key = "VLLM_CPU_KVCACHE_SPACE"
        if env_key in os.environ and os.environ[env_key] != "":
            kv_cache_space = int(os.environ[env_key])
            cache_config.kv_cache_memory_bytes = kv_cache_space * (1 << 30)
""",
    "fixed": None,  # below: the buggy lines, guarded as a fix would guard them
    "renamed": """
class CpuPlatform:
    @classmethod
    def update_config(cls, vllm_config):
        pass
""",
}


CPU_PLATFORM["fixed"] = CPU_PLATFORM["buggy"].replace(
    'os.environ[env_key] != ""', "cache_config.kv_cache_memory_bytes is None"
)


@pytest.fixture
def stand_in_vllm(tmp_path, monkeypatch):
    """A vLLM package of one module, importable here, and a fresh patch registry."""
    from omni.vllm_plugin import patch

    def install(kind: str):
        package = tmp_path / kind / "vllm" / "platforms"
        package.mkdir(parents=True)
        (package.parent / "__init__.py").write_text("")
        (package / "__init__.py").write_text("")
        (package / "cpu.py").write_text(CPU_PLATFORM[kind])
        monkeypatch.syspath_prepend(str(tmp_path / kind))
        return importlib.import_module("vllm.platforms.cpu")

    monkeypatch.setattr(patch, "_applied", {})
    yield install
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


def test_a_patch_for_a_bug_that_is_there_applies_once_and_fixes_it(stand_in_vllm, monkeypatch):
    cpu = stand_in_vllm("buggy")
    status, detail = apply_patch("explicit_kv_cache_memory")
    assert status == "applied" and "overwrites kv_cache_memory_bytes" in detail
    assert apply_patch("explicit_kv_cache_memory") == (status, detail)  # idempotent
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    config = SimpleNamespace(cache_config=SimpleNamespace(kv_cache_memory_bytes=256 * MiB))
    cpu.CpuPlatform.check_and_update_config(config)
    assert config.cache_config.kv_cache_memory_bytes == 256 * MiB  # the arm's budget, not 4 GiB


def test_a_patch_for_a_bug_this_vllm_has_fixed_is_not_needed_and_changes_nothing(stand_in_vllm):
    cpu = stand_in_vllm("fixed")
    original = cpu.CpuPlatform.check_and_update_config.__func__
    assert apply_patch("explicit_kv_cache_memory") == ("not needed", "this vLLM does not have the bug")
    assert cpu.CpuPlatform.check_and_update_config.__func__ is original


def test_a_patch_whose_symbols_are_gone_fails_with_its_reason_and_nothing_breaks(stand_in_vllm):
    cpu = stand_in_vllm("renamed")  # an upgrade renamed what the patch reads
    status, detail = apply_patch("explicit_kv_cache_memory")
    assert status == "failed" and detail.startswith("AttributeError") and "check_and_update_config" in detail
    assert apply_patch("explicit_kv_cache_memory") == (status, detail)
    assert not hasattr(cpu.CpuPlatform, "check_and_update_config")  # nothing half-applied


def test_malloc_trim_is_not_needed_under_another_allocator(monkeypatch):
    from omni.vllm_plugin import patch

    monkeypatch.setattr(patch, "_applied", {})
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # applied, it waits there for the worker module
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
    assert apply_patch("release_memory_after_load")[0] == "not needed"
    monkeypatch.setattr(patch, "_applied", {})
    monkeypatch.delenv("LD_PRELOAD")
    assert apply_patch("release_memory_after_load")[0] == "applied"  # armed for where the worker loads


def test_compile_cache_state_is_read_from_vllms_own_log_lines():
    from omni.engines.vllm import compile_cache_state

    # as vLLM 0.32 wrote them in this file's warm-compiled test
    saved = (
        "(Worker pid=17825) INFO 12-01 12:30:19 [decorators.py:743] [backbone] saved AOT compiled function to "
        "/tmp/cache/torch_compile_cache/torch_aot_compile/3ecd44d8/rank_0_0/model"
    )
    loaded = "(Worker pid=9) INFO [decorators.py:320] [backbone] Directly load AOT compilation from path /tmp/cache/x"
    again = (
        "(Worker pid=9) WARNING [decorators.py:334] [backbone] Compiling model again due to a load failure from "
        "/tmp/cache/x, reason: 'function' object has no attribute 'finalize_loading'"
    )
    assert compile_cache_state([saved]) == "compiled"
    assert compile_cache_state([loaded]) == "loaded"
    assert compile_cache_state([again, saved]) == "recompiled"
    assert compile_cache_state([loaded, saved]) == "compiled"  # one graph loaded, another compiled: a compile paid
    assert compile_cache_state(["INFO init engine took 59.12 s"]) is None  # eager: nothing said


def test_a_kernel_fallback_vllm_logs_is_kept_by_the_log_reader_and_named_once(tmp_path):
    import io

    from omni.engines.vllm import fallback_notes
    from omni.run.engine_process import LogReader

    # as vLLM 0.32 wrote it loading Llama-3.2-1B's shape on a Zen 5 guest without AMX
    said = (
        "Failed to create oneDNN linear, fallback to torch linear. Exception: could not create a primitive "
        "descriptor for the matmul primitive."
    )
    log = f"(Worker pid=30536) WARNING 12-02 07:33:24 [utils.py:597] {said}\nINFO init engine took 0.14 s\n"
    reader = LogReader(io.BytesIO((log + log).encode()), tmp_path / "engine.log", sampler=None)
    reader.run()
    assert len(reader.fallback_lines) == 2 and fallback_notes(reader.fallback_lines) == [said]
    assert (tmp_path / "engine.log").read_text() == log + log  # the log itself is untouched
    assert fallback_notes(["INFO CPU unquantized GEMM dispatch: using oneDNN onednn_mm"]) == []


def test_when_imported_patches_a_module_only_once_it_loads():
    import sys

    from omni.vllm_plugin.patch import when_imported

    sys.modules.pop("tests.unit.late_module", None)
    seen = []
    assert when_imported("tests.unit.late_module", lambda module: seen.append(module.VALUE)) is False
    assert seen == []
    import tests.unit.late_module  # noqa: F401

    assert seen == [1]
    assert when_imported("tests.unit.late_module", lambda module: seen.append(2)) is True and seen == [1, 2]
