"""Per-op profiles end to end in the real engines: profiled vLLM runs (an honest int4 head and a
mislabeled one) and a profiled llama.cpp run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni.measure import ops
from omni.report.summary import summarize_sweep
from omni.store import reading

VOCAB, HIDDEN = 32000, 256  # tiny-llama


@pytest.mark.engines
def test_profiled_vllm_runs_store_ops_and_a_mislabeled_int4_head_is_invalid(eager_vllm):
    """Two profiled runs in the real vLLM env: an honest int4 head passes the
    bf16-head rule, the same arm with its head left in bf16 behind its back
    (the test-only fault OMNI_FAULT_INT4_HEAD=bf16) is invalid, with the op.
    Both are profiled passes of the shared eager sweep."""
    results = eager_vllm.results
    rows = {arm: eager_vllm.row(arm, profiled=True) for arm in ("int4", "int4-mislabeled")}
    honest, lying = rows["int4"], rows["int4-mislabeled"]
    assert honest["status"] == "ok", honest.get("error")
    assert honest["profiled"] and honest["profile_steps"] == 6 and honest["profile_overhead"] > 0
    assert lying["status"] == "invalid" and lying["error"].startswith("bf16 head:"), lying.get("error")
    # which dense GEMM runs the head depends on the ISA: aten::mm on an AVX2 EPYC, _C::onednn_mm with AMX
    assert any(f"{op} " in lying["error"] for op in ops.DENSE_GEMM_OPS) and "vocab 32000 x hidden 256" in lying["error"]
    frame = reading.load_ops(results, eager_vllm.sweep_id)
    by_arm = {arm: set(group["op"]) for arm, group in frame.groupby("arm")}
    assert "aten::_weight_int4pack_mm_for_cpu" in by_arm["int4"] and not by_arm["int4"] & ops.DENSE_GEMM_OPS
    lied = frame[frame["arm"] == "int4-mislabeled"]
    head = lied[lied["shapes"].str.contains("32000") & lied["op"].isin(ops.DENSE_GEMM_OPS)]
    gemm_steps = set(lied.loc[lied["op"].isin(ops.DENSE_GEMM_OPS), "step"])
    assert set(head["step"]) == gemm_steps and len(gemm_steps) >= 4  # every step that ran a GEMM ran the head in bf16
    assert list(Path(results, "logs").rglob("*.pt.trace.json.gz"))  # the raw trace, kept gzipped


@pytest.mark.engines
def test_a_profiled_llamacpp_run_times_every_node_and_labels_it_distorting(eager_vllm):
    """llama.cpp's timed and profiled pass, from the shared eager sweep (the ops of its vLLM
    runs are theirs: this test reads the llama arm's)."""
    timed, profiled = eager_vllm.row("llama"), eager_vllm.row("llama", profiled=True)
    for row in (timed, profiled):
        perf = json.loads(row["engine_perf"]) if isinstance(row["engine_perf"], str) else row["engine_perf"]
        assert row["status"] == "ok" and perf["t_load_ms"] > 0 and perf["n_p_eval"] > 0  # phase totals, every run
        assert perf["t_p_eval_ms"] > 0  # timed: llama.cpp's contexts collect no timings unless asked
    assert not timed["profiled"] and profiled["profiled"] and profiled["profile_steps"] == 5
    assert profiled["profile_overhead"] > 0
    frame = reading.load_ops(eager_vllm.results, eager_vllm.sweep_id).query("arm == 'llama'")
    assert set(frame["run_id"]) == {profiled["run_id"]} and frame["distorting"].all()
    assert set(frame["method"]) == {ops.GGML_EVAL_CALLBACK} and list(frame.drop_duplicates("step")["step_kind"])[
        :2
    ] == ["prefill", "decode"]
    head = frame[(frame["op"] == "MUL_MAT") & frame["shapes"].str.contains("32000")]
    assert set(head["step"]) == set(range(5)) and set(head["dtypes"]).pop().startswith("bf16")  # the head, every step
    assert ops.head_rule({"quantization": None, "engine_params": {}}, frame.to_dict("records"), VOCAB, HIDDEN) is None


@pytest.mark.engines
def test_every_run_is_held_to_its_heads_claims_without_a_profile(eager_vllm):
    """Models given by path that claim a quantized head, none profiled (omni.models.factory.make_head_cases):
    a cpu_int4 checkpoint whose head loads bf16 is invalid, an honest one ok, a q4_0 GGUF whose
    output.weight stayed f16 invalid; the arm's own claims are checked the same way."""
    dense, honest, gguf = (eager_vllm.row(arm) for arm in ("ckpt-dense-head", "ckpt-int4-head", "gguf-f16-head"))
    claim = "model: config.json quantization_config cpu_int4 with lm_head_bf16: false"
    assert not dense["profiled"] and dense["quantization"] is None  # the checkpoint claims, not the arm
    assert dense["status"] == "invalid" and dense["error"].startswith(
        f"dense head: the output head is claimed quantized ({claim}) but loaded as bfloat16 (lm_head"
    ), dense["error"]
    assert "dense_head" in list(dense["warning_rules"]) and dense["quantization_seen"] == "cpu_int4"
    assert (dense["head_claim"], dense["head_weight_type"]) == (claim, "bfloat16")
    assert honest["status"] == "ok", honest.get("error")
    assert (honest["head_claim"], honest["head_weight_type"], honest["quantization_seen"]) == (
        claim,
        "cpu_int4",
        "cpu_int4",
    )
    assert gguf["status"] == "invalid" and "general.file_type MOSTLY_Q4_0" in gguf["error"], gguf.get("error")
    assert "loaded as f16 (output.weight)" in gguf["error"] and gguf["quantization_seen"] == "MOSTLY_Q4_0"
    # the arms' own claims: an honest int4 head, a bf16 GGUF, and the head left bf16 behind the arm's back
    stock, llama, lying = eager_vllm.row("stock"), eager_vllm.row("llama"), eager_vllm.row("int4-mislabeled", True)
    assert stock["status"] == "ok" and stock["head_claim"] == "arm: cpu_int4 with int4_lm_head: true"
    assert stock["head_weight_type"] == "cpu_int4"
    assert (llama["status"], llama["head_claim"], llama["head_weight_type"]) == ("ok", "arm: gguf: bf16", "bf16")
    assert lying["head_weight_type"] == "bfloat16" and "dense_head" in list(lying["warning_rules"])
    void = summarize_sweep(eager_vllm.results, eager_vllm.sweep_id).void
    assert {"ckpt-dense-head", "gguf-f16-head", "int4-mislabeled"} <= set(void) and "ckpt-int4-head" not in void
