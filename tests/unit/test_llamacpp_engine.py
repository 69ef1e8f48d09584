"""The llama.cpp engine's facts read from its log: where the weights went, and
what to do when the AMX kernels crash (no llama.cpp needed)."""

from __future__ import annotations

import ctypes
import io
import signal

import pytest

from omni.engines.llamacpp import crash_hint, set_repack, weight_buffers
from omni.run.engine_process import LogReader

# as llama.cpp (llama-cpp-python 0.3.36) wrote them loading a q4_0 GGUF on a Sapphire Rapids guest
AMX_LOG = """load_tensors: tensor 'token_embd.weight' (q4_0) (and 9 others) cannot be used with preferred buffer type AMX
load_tensors:          AMX model buffer size =   727.49 MiB
load_tensors:          CPU model buffer size =   262.50 MiB
load_all_data: buffer type AMX is not the default buffer type for device CPU for async uploads
"""
PLAIN_LOG = "load_tensors:          CPU model buffer size =   989.99 MiB\n"


def test_the_log_reader_keeps_the_buffer_lines_and_they_say_where_the_weights_went(tmp_path):
    reader = LogReader(io.BytesIO(AMX_LOG.encode()), tmp_path / "engine.log", sampler=None)
    reader.run()
    assert weight_buffers(reader.buffer_lines) == {"AMX": 727.49, "CPU": 262.5}
    assert weight_buffers(PLAIN_LOG.splitlines()) == {"CPU": 989.99}
    assert weight_buffers(["INFO nothing about buffers"]) == {}


def test_a_segfault_after_an_amx_repack_names_repack_false_and_nothing_else_does():
    amx = AMX_LOG.splitlines()
    assert "repack: false" in crash_hint(-signal.SIGSEGV, amx)
    assert crash_hint(-signal.SIGSEGV, PLAIN_LOG.splitlines()) is None  # another crash: no guess
    assert crash_hint(-signal.SIGKILL, amx) is None
    assert crash_hint(1, amx) is None


class WithExtraBufts(ctypes.Structure):
    _fields_ = [("use_extra_bufts", ctypes.c_bool)]


class WithoutExtraBufts(ctypes.Structure):
    _fields_ = [("vocab_only", ctypes.c_bool)]


def test_repack_sets_llama_cpps_field_and_refuses_a_llama_cpp_without_it():
    params = WithExtraBufts(True)
    set_repack(None, params, False)
    assert params.use_extra_bufts is False
    set_repack(None, WithoutExtraBufts(), True)  # repacking is what such a llama.cpp does anyway
    with pytest.raises(RuntimeError, match="repack false cannot be applied"):
        set_repack(None, WithoutExtraBufts(), False)
