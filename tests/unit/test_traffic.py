"""The bytes and FLOPs model against hand-computed values, on two real
layouts written here: a q8_0 GGUF (llama.cpp's block format, an f16 output
head) and a bf16 safetensors directory with tied embeddings (the factory's
writer), and the roofline's choice of roof."""

from __future__ import annotations

import json

import numpy as np
import pytest

from omni.errors import OmniError
from omni.measure.roofline import phase_roof, roof_columns
from omni.measure.traffic import as_cpu_int4, compute_dtype, model_layout, run_traffic
from omni.models import factory

pytestmark = pytest.mark.unit


def write_q8_gguf(path):
    """2 layers, hidden 64, 4 heads of 16, 2 KV heads, MLP 128, vocab 96."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_feed_forward_length(128)
    rng = np.random.default_rng(0)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def add(name, rows, cols, kind):
        data = rng.standard_normal((rows, cols)).astype(np.float32)
        if kind == "q8_0":
            writer.add_tensor(name, gguf.quants.quantize(data, q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, data.astype(np.float16 if kind == "f16" else np.float32))

    add("token_embd.weight", 96, 64, "q8_0")
    add("output.weight", 96, 64, "f16")
    writer.add_tensor("output_norm.weight", np.ones(64, np.float32))
    for i in range(2):
        for name, rows, cols in (("attn_q", 64, 64), ("attn_k", 32, 64), ("attn_v", 32, 64), ("attn_output", 64, 64)):
            add(f"blk.{i}.{name}.weight", rows, cols, "q8_0")
        for name, rows, cols in (("ffn_gate", 128, 64), ("ffn_up", 128, 64), ("ffn_down", 64, 128)):
            add(f"blk.{i}.{name}.weight", rows, cols, "q8_0")
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(64, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(64, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_q8_0_gguf_is_counted_as_stored(tmp_path):
    path = tmp_path / "m.gguf"
    write_q8_gguf(path)
    layout = model_layout(path)
    assert (layout.layers, layout.heads, layout.kv_heads, layout.head_dim, layout.vocab) == (2, 4, 2, 16, 96)
    # q8_0: 34 bytes per block of 32. Layers: 2 x 36864 weights = 78336 B; norms 2 x 2 x 64 x 4 + 64 x 4 = 1280 B;
    # the f16 head 96 x 64 x 2 = 12288 B; the table (not read whole: the head is untied) 6144 / 32 x 34 = 6528 B
    assert layout.step_weight_bytes == 78336 + 1280 + 12288
    assert layout.embedding_row_bytes == 68
    assert layout.body_dtype == "q8_0" and compute_dtype(layout.body_dtype) == "int8"
    t = run_traffic(layout, prompt_len=16, max_tokens=8, batch=2, kv_element_bytes=2)
    # depth 16 + 8/2 = 20; KV per position 2 x 2 layers x 2 heads x 16 x 2 B = 256 B
    assert t.decode_bytes_per_token == pytest.approx(91904 / 2 + 68 + 256 * 20)
    # 2 x (73728 + 6144) + 4 x (2 x 4 x 16) x 20
    assert t.decode_flops_per_token == pytest.approx(159744 + 10240)
    # 2 x 73728 + 2 x 6144 / 16 (the head on the last prompt token) + 2 x 128 x 17
    assert t.prefill_flops_per_token == pytest.approx(147456 + 768 + 4352)
    assert t.decode_step_bytes == pytest.approx(91904 + 2 * (68 + 256 * 20))


def write_bf16_hf(directory, weights=True):
    shape = factory.Shape(300, 32, 64, 2, 2, 1, 64, 10000.0, True, weights)
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(factory.hf_config(shape)))
    if weights:
        factory.write_safetensors(directory / "model.safetensors", factory.hf_tensors(shape))
    return shape


def test_a_tied_bf16_safetensors_reads_its_table_as_the_head(tmp_path):
    write_bf16_hf(tmp_path / "hf")
    layout = model_layout(tmp_path / "hf")
    assert layout.source == "safetensors" and layout.tied and layout.body_dtype == "bf16"
    # layers 2 x 9216 weights x 2 B = 36864; norms 2 x 2 x 32 x 2 + 32 x 2 = 320; the tied table 300 x 32 x 2 = 19200
    assert layout.step_weight_bytes == 36864 + 320 + 19200
    t = run_traffic(layout, prompt_len=10, max_tokens=4, batch=1)
    # depth 12; KV per position 2 x 2 layers x 1 head x 16 x 2 B = 128
    assert t.decode_bytes_per_token == pytest.approx(56384 + 64 + 128 * 12)
    assert t.decode_flops_per_token == pytest.approx(2 * (18432 + 9600) + 4 * 64 * 12)
    assert t.prefill_flops_per_token == pytest.approx(2 * 18432 + 2 * 9600 / 10 + 2 * 64 * 11)
    # the same directory without weights (load_format: dummy) is sized from config.json alike
    write_bf16_hf(tmp_path / "dummy", weights=False)
    dummy = model_layout(tmp_path / "dummy")
    assert dummy.source == "config" and dummy.step_weight_bytes == layout.step_weight_bytes
    # cpu_int4 (group 32): 18432 weights at 4 bits + 18432 / 32 groups x (bf16 scale + zero)
    packed = as_cpu_int4(layout, 32, head_too=True)
    assert packed.role_bytes("body") == 9216 + 2304 and compute_dtype(packed.body_dtype) == "bf16"


def test_what_is_not_a_model_is_refused_by_name(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"0")
    with pytest.raises(OmniError, match="neither an HF directory nor a .gguf"):
        model_layout(tmp_path / "x.bin")
    (tmp_path / "bad.gguf").write_bytes(b"nope")
    with pytest.raises(OmniError, match="not a readable GGUF"):
        model_layout(tmp_path / "bad.gguf")


def test_the_roof_that_binds():
    # a working set inside the cache is judged against the cache's bandwidth
    assert phase_roof(2.0, 10e6, dram=30e9, cache=190e9, llc=32 << 20, compute=400e9) == ("cache", 380e9)
    assert phase_roof(2.0, 100e6, dram=30e9, cache=190e9, llc=32 << 20, compute=400e9) == ("dram", 60e9)
    # high intensity: compute binds
    assert phase_roof(500.0, 100e6, dram=30e9, cache=190e9, llc=32 << 20, compute=400e9) == ("compute", 400e9)
    assert phase_roof(2.0, 1e6, dram=None, cache=None, llc=None, compute=None) == (None, None)


def test_a_share_above_one_is_a_finding_not_a_number():
    class T:
        decode_bytes_per_token = 40e6
        decode_flops_per_token = 2e7
        prefill_bytes_per_token = 1e5
        prefill_flops_per_token = 2e7
        decode_step_bytes = 40e6
        decode_intensity = 0.5
        prefill_intensity = 200.0

    limits = {
        "key": "k",
        "figures": {
            "dram_read": {"roof": 30e9},
            "cache_read": {"roof": 190e9, "llc_bytes": 32 << 20},
            "matmul_bf16": {"roof": 400e9},
        },
    }
    cols, findings = roof_columns(T(), limits, "bf16", prefill_tok_s=1000.0, decode_tok_s=1000.0)
    # 40 MB x 1000 tok/s = 40 GB/s against a 30 GB/s DRAM roof: within 4x the cache, so part came from cache
    assert cols["decode_roof"] == "dram" and cols["decode_roof_share"] == pytest.approx(40 / 30)
    assert len(findings) == 1 and "part of it is read from cache" in findings[0]
    assert cols["prefill_roof"] == "compute" and cols["prefill_roof_share"] == pytest.approx(2e10 / 400e9)


def test_a_dtypes_roof_is_the_best_matmul_that_can_do_its_work():
    from omni.measure.roofline import compute_roof

    # an AVX2-only host: torch's bf16 matmul (converted) is slower than its fp32 one
    limits = {"figures": {"matmul_fp32": {"roof": 100e9}, "matmul_bf16": {"roof": 60e9}}}
    assert compute_roof(limits, "bf16") == 100e9 and compute_roof(limits, "int8") == 100e9
    assert compute_roof(limits, "fp32") == 100e9 and compute_roof({"figures": {}}, "bf16") is None


def test_the_summary_shows_each_arms_share_with_its_interval_and_flags_one_above_its_roof():
    import math

    import pandas as pd

    from omni.measure.roofline import ROOF_EXCEEDED
    from omni.report.roofs import arm_roofs, roofs_lines

    def row(arm, share, warnings=()):
        return {
            "arm": arm, "decode_roof": "dram", "decode_roof_share": share, "prefill_roof": "compute",
            "prefill_roof_share": 0.5, "roof_note": None, "decode_bytes_per_token": 2.5e9,
            "decode_working_set_bytes": 2.5e9, "roof_llc_bytes": 32 << 20, "decode_flops_per_token": 2.5e9,
            "decode_tok_s": 10.0, "prefill_flops_per_token": 2.5e9, "prefill_bytes_per_token": 2e7,
            "prefill_tok_s": 100.0, "roof_dram_bytes_s": 3e10, "roof_cache_bytes_s": 2e11,
            "roof_compute_flop_s": 4e11, "warnings": [w for w, _ in warnings], "warning_rules": [r for _, r in warnings],
        }  # fmt: skip

    over = "decode reached 1.30x its dram roof: the bytes model counts more than the engine reads"
    ok = pd.DataFrame([row("a", 0.8), row("a", 0.9), row("b", 1.3, [(over, ROOF_EXCEEDED)])])
    roofs = arm_roofs(ok, ["a", "b"])
    a = roofs["a"].phases["decode"]
    assert a.share == pytest.approx(math.sqrt(0.8 * 0.9)) and a.runs == 2 and a.low < 0.8 and a.high > 0.9
    # Student's t at 1 df (12.71) on the logs' sd over sqrt(2)
    half = 12.706 * abs(math.log(0.9) - math.log(0.8)) / math.sqrt(2) / math.sqrt(2)
    assert a.high == pytest.approx(math.sqrt(0.72) * math.exp(half), rel=1e-3)
    text = "\n".join(roofs_lines(roofs))
    assert "| a | dram 0.849" in text and "exceeds the 32 MiB last-level cache" in text
    assert "above its roof (x1.30)" in text and f"- b: {over}" in text
    assert roofs["a"].points["decode"] == (1.0, 2.5e10)
