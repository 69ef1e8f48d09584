"""The dense-head rule (omni.measure.heads): every claim that an output head is
quantized, the arm's or the model's, against the head as the engine loaded it;
and the arms its runs void (omni.report.void.void_arms)."""

from __future__ import annotations

import struct

import pandas as pd
import pytest

from omni.engines.llamacpp import gguf_header
from omni.measure import heads
from omni.report.void import void_arms
from omni.run.validity import fill_head

INT4 = {"int4_lm_head": True, "int4_group_size": 32}
LM_HEAD = {"tensor": "lm_head", "method": "UnquantizedEmbeddingMethod"}


def check(engine="vllm", arm_quantization=None, params=None, preset=True, **head):
    return heads.check_head(engine, arm_quantization, params or {}, preset, head)


@pytest.mark.parametrize(
    "weight_type, dense",
    [("bfloat16", True), ("torch.float16", True), ("c10::BFloat16", True), ("f32", True), ("BF16", True)]
    + [("q6_K", False), ("q8_0", False), ("q4_0", False), ("cpu_int4", False), (None, False)],
)
def test_only_f32_f16_bf16_are_dense(weight_type, dense):
    assert heads.is_dense(weight_type) is dense


def test_an_int4_arm_whose_head_loaded_bf16_is_contradicted_and_an_int4_head_is_not():
    lying = check(arm_quantization="cpu_int4", params=INT4, weight_type="bfloat16", quantization="cpu_int4", **LM_HEAD)
    assert lying.contradiction.startswith(
        "dense head: the output head is claimed quantized (arm: cpu_int4 with int4_lm_head: true) but loaded as bfloat16"
    )
    assert lying.claim.describe() == "arm: cpu_int4 with int4_lm_head: true" and lying.quantization_seen == "cpu_int4"
    honest = check(arm_quantization="cpu_int4", params=INT4, weight_type="cpu_int4", tensor="lm_head")
    assert honest.contradiction is None and honest.unchecked is None
    bf16_head = check(arm_quantization="cpu_int4", params={**INT4, "int4_lm_head": False}, weight_type="bfloat16")
    assert bf16_head.contradiction is None and not bf16_head.claim.quantized  # says bf16, is bf16: honest


def test_a_checkpoint_by_path_is_held_to_its_own_quantization_config():
    claimed = {"quant_method": "cpu_int4", "group_size": 32, "lm_head_bf16": False}
    dense = check(quantization_config={**claimed, "modules_to_not_convert": ["lm_head"]}, weight_type="bfloat16")
    assert dense.claim.describe() == "model: config.json quantization_config cpu_int4 with lm_head_bf16: false"
    assert dense.contradiction and "(model: config.json quantization_config cpu_int4" in dense.contradiction
    assert check(quantization_config=claimed, weight_type="cpu_int4").contradiction is None
    # the method's default keeps the head bf16: no claim that it is quantized
    assert check(quantization_config={"quant_method": "cpu_int4"}, weight_type="bfloat16").contradiction is None
    # an arm's cpu_int4 replaces the checkpoint's quantization_config: its claim is the one
    overridden = check(
        arm_quantization="cpu_int4",
        params={**INT4, "int4_lm_head": False},
        quantization_config=claimed,
        weight_type="bfloat16",
    )
    assert overridden.contradiction is None and overridden.claim.describe() == "arm: cpu_int4 with int4_lm_head: false"
    gptq = {"quant_method": "gptq", "bits": 4, "lm_head": True}
    assert check(quantization_config=gptq, weight_type="float16").contradiction  # GPTQ's own lm_head claim
    assert check(quantization_config={**gptq, "lm_head": False}, weight_type="float16").contradiction is None


def test_gguf_heads_quantized_by_llamacpps_rule_are_honest_and_a_dense_one_under_q4_0_is_not():
    q4_0 = {"gguf": "q4_0"}
    for head_type in ("q6_K", "q8_0"):  # llama_model_quantize's default for output.weight
        assert check("llamacpp", params=q4_0, weight_type=head_type, file_type="MOSTLY_Q4_0").contradiction is None
    f16 = check("llamacpp", params=q4_0, weight_type="f16", tensor="output.weight", file_type="MOSTLY_Q4_0")
    assert "arm: gguf: q4_0; model: general.file_type MOSTLY_Q4_0" in f16.contradiction
    assert "loaded as f16 (output.weight)" in f16.contradiction
    # a GGUF given by path: params.gguf means nothing there, its file type is the claim
    by_path = check("llamacpp", params={"gguf": "bf16"}, preset=False, weight_type="f16", file_type="MOSTLY_Q4_0")
    assert by_path.claim.describe() == "model: general.file_type MOSTLY_Q4_0" and by_path.contradiction
    bf16 = check("llamacpp", params={"gguf": "bf16"}, weight_type="bf16", file_type="MOSTLY_BF16")
    assert bf16.contradiction is None and bf16.claim.describe() == "arm: gguf: bf16"


def test_tied_embeddings_are_the_head():
    tied = check("llamacpp", params={"gguf": "q4_0"}, weight_type="f16", tensor="token_embd.weight (tied)")
    assert "loaded as f16 (token_embd.weight (tied))" in tied.contradiction
    vllm = check(arm_quantization="cpu_int4", params=INT4, weight_type="bfloat16", tensor="model.embed_tokens (tied)")
    assert "(model.embed_tokens (tied))" in vllm.contradiction


def test_a_quantized_claim_with_no_head_reported_is_unchecked_not_passed():
    got = check(arm_quantization="cpu_int4", params=INT4, weight_type=None, error="no head report at x")
    assert (
        got.contradiction is None and got.unchecked.startswith("head_unchecked:") and "no head report" in got.unchecked
    )
    assert check(weight_type=None).unchecked is None  # nothing claimed: nothing to check


def row(**extra):
    base = {"engine": "vllm", "model": "tiny-llama", "quantization": "cpu_int4", "engine_params": INT4}
    return {**base, "status": "ok", "error": None, "warnings": [], "warning_rules": [], **extra}


def test_fill_head_fills_the_columns_and_invalidates_a_dense_head():
    lying = row()
    fill_head(lying, {"weight_type": "bfloat16", "tensor": "lm_head", "quantization": "cpu_int4"})
    assert lying["status"] == "invalid" and lying["error"].startswith("dense head:")
    assert lying["warning_rules"] == ["dense_head"] and lying["head_weight_type"] == "bfloat16"
    assert lying["head_claim"] == "arm: cpu_int4 with int4_lm_head: true" and lying["quantization_seen"] == "cpu_int4"
    first = row(status="invalid", error="tokens_mismatch: ...")
    fill_head(first, {"weight_type": "bfloat16"})
    assert first["error"] == "tokens_mismatch: ..." and first["warning_rules"] == ["dense_head"]  # first reason kept
    honest = row()
    fill_head(honest, {"weight_type": "cpu_int4", "quantization": "cpu_int4"})
    assert honest["status"] == "ok" and not honest["warnings"]
    synthetic = row(engine="synthetic")
    fill_head(synthetic, None)
    assert "head_weight_type" not in synthetic


def frame(*rows):
    return pd.DataFrame([{"pass_index": 0, "profiled": False, "warnings": [], "warning_rules": [], **r} for r in rows])


def test_void_arms_come_from_any_run_the_head_rules_invalidated_profiled_or_not():
    timed = frame(
        {"arm": "ok", "status": "ok", "error": None},
        {"arm": "w4", "status": "invalid", "error": "dense head: claimed quantized", "pass_index": 1},
        {"arm": "w4", "status": "invalid", "error": "dense head: claimed quantized (pass 0)", "pass_index": 0},
        {"arm": "both", "status": "invalid", "error": "tokens_mismatch: x", "warnings": ["dense head: y"]}
        | {"warning_rules": ["dense_head"]},
        {"arm": "tokens", "status": "invalid", "error": "tokens_mismatch: x"},
    )
    profiled = frame({"arm": "prof", "status": "invalid", "error": "bf16 head: profile", "profiled": True})
    void = void_arms(timed, profiled)
    assert void == {
        "w4": "pass 0: dense head: claimed quantized (pass 0)",
        "both": "pass 0: dense head: y",
        "prof": "profiled pass 0: bf16 head: profile",
    }
    assert void_arms(frame(), profiled.iloc[0:0]) == {}


def gguf_bytes(kvs: list[tuple[str, int, bytes]], tensors: list[tuple[str, list[int], int]]) -> bytes:
    """A GGUF v3 header by hand: (key, value type, packed value), (name, dims, ggml type)."""

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text.encode())) + text.encode()

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, kind, packed in kvs:
        out += string(key) + struct.pack("<I", kind) + packed
    for name, dims, kind in tensors:
        out += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", kind, 0)
    return out


def test_the_gguf_header_gives_tensor_types_and_skips_arrays(tmp_path):
    tokens = ["<unk>", "\u2581t0", "\u2581t1"]
    token_array = struct.pack("<IQ", 8, len(tokens)) + b"".join(
        struct.pack("<Q", len(t.encode())) + t.encode() for t in tokens
    )
    path = tmp_path / "m.gguf"
    path.write_bytes(
        gguf_bytes(
            [
                ("general.architecture", 8, struct.pack("<Q", 5) + b"llama"),
                ("tokenizer.ggml.tokens", 9, token_array),
                ("tokenizer.ggml.scores", 9, struct.pack("<IQ3f", 6, 3, 0.0, -1.0, -2.0)),
                ("general.file_type", 4, struct.pack("<I", 2)),  # MOSTLY_Q4_0
            ],
            [("token_embd.weight", [256, 32000], 2), ("output.weight", [256, 32000], 14)],  # q4_0, q6_K
        )
    )
    meta, types = gguf_header(path)
    assert meta == {
        "general.architecture": "llama",
        "tokenizer.ggml.tokens": None,  # arrays skipped, not built
        "tokenizer.ggml.scores": None,
        "general.file_type": 2,
    }
    assert types == {"token_embd.weight": 2, "output.weight": 14}
    path.write_bytes(b"GGML" + bytes(20))
    with pytest.raises(ValueError, match="not a GGUF"):
        gguf_header(path)
