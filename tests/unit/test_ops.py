"""Per-op profiles: trace parsing, the ops table, per-op verdicts, and the
bf16-head rule, on hand-made traces and on traces vLLM wrote for the tiny model."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from omni.errors import SpecError
from omni.host.topology import Slot
from omni.measure import ops
from omni.run.plan import plan_sweep
from omni.spec import load_spec
from omni.store import reading, writing

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"
VOCAB, HIDDEN = 32000, 256  # tiny-llama
INT4_HEAD = {"quantization": "cpu_int4", "engine_params": {"int4_lm_head": True}}
BF16_HEAD = {"quantization": "cpu_int4", "engine_params": {"int4_lm_head": False}}


def fixture(name: str) -> dict:
    with gzip.open(FIXTURES / f"{name}.pt.trace.json.gz", "rt") as f:
        return json.load(f)


def event(name, ts, dur, cat="cpu_op", tid=1, dims=None, types=None):
    args = {"Input Dims": dims or [], "Input type": types or []}
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_self_time_is_duration_less_the_ops_inside_it_per_step():
    trace = {
        "traceEvents": [
            event("execute_context_0(0)_generation_2(2)", 100, 100, cat="user_annotation"),
            event("aten::linear", 110, 50, dims=[[2, 8], [4, 8], []]),
            event("aten::mm", 112, 40, dims=[[2, 8], [8, 4]]),  # inside linear: linear keeps 10
            event("aten::add", 170, 5),
            event("aten::add", 180, 5),  # the same op again: 2 calls
            event("aten::mm", 120, 30, tid=2),  # another thread: not linear's child
            event("aten::mm", 300, 10),  # after the step: in no step
            event("execute_context_2(128)_generation_0(0)", 400, 50, cat="user_annotation"),
            event("aten::mm", 410, 20),
        ]
    }
    records = ops.torch_trace_records(trace)
    got = {(r["step"], r["op"], r["shapes"]): (r["calls"], round(r["self_ms"] * 1000)) for r in records}
    assert got == {
        (0, "aten::linear", "[[2, 8], [4, 8], []]"): (1, 10),
        (0, "aten::mm", "[[2, 8], [8, 4]]"): (1, 40),
        (0, "aten::mm", "[]"): (1, 30),
        (0, "aten::add", "[]"): (2, 10),
        (1, "aten::mm", "[]"): (1, 20),
    }
    assert {r["step"]: (r["step_kind"], r["step_ms"]) for r in records} == {0: ("decode", 0.1), 1: ("prefill", 0.05)}


def test_step_kinds():
    assert ops.step_kind("execute_context_1(64)_generation_0(0)") == "prefill"
    assert ops.step_kind("execute_context_0(0)_generation_2(2)") == "decode"
    assert ops.step_kind("execute_context_1(64)_generation_1(1)") == "mixed"
    assert ops.step_kind("something else") == "unknown"


def test_a_bf16_head_is_found_in_vllms_trace_and_a_claimed_int4_head_is_invalid():
    records = ops.torch_trace_records(fixture("bf16-head"))  # vLLM 0.32, tiny-llama in bf16, 3 steps
    signature = ops.head_signature(records, VOCAB, HIDDEN)
    assert signature["op"] == "aten::mm" and "32000" in signature["shapes"] and signature["ms_per_step"] > 0
    why = ops.head_rule(INT4_HEAD, records, VOCAB, HIDDEN)
    assert why.startswith("bf16 head: the arm claims a quantized output head (cpu_int4 with int4_lm_head: true)")
    assert f"aten::mm {signature['ms_per_step']:.3f} ms/step" in why and "vocab 32000 x hidden 256" in why
    assert ops.head_rule(BF16_HEAD, records, VOCAB, HIDDEN) is None  # says its head is bf16: honest
    assert ops.head_rule({"quantization": None, "engine_params": {}}, records, VOCAB, HIDDEN) is None


def test_an_int4_head_shows_the_int4_matmul_and_no_bf16_gemm_of_its_shape():
    records = ops.torch_trace_records(fixture("int4-head"))
    assert ops.head_signature(records, VOCAB, HIDDEN) is None
    assert ops.head_rule(INT4_HEAD, records, VOCAB, HIDDEN) is None
    int4 = [r for r in records if r["op"] == "aten::_weight_int4pack_mm_for_cpu"]
    assert any("32000" in r["shapes"] for r in int4)  # the head, in int4
    assert not [r for r in records if r["op"] in ops.DENSE_GEMM_OPS]


def ggml(shapes, dtypes, op="MUL_MAT", ms=1.0):
    return {"step": 0, "op": op, "shapes": json.dumps(shapes), "dtypes": dtypes, "self_ms": ms}


def test_the_head_rule_reads_the_weight_operand_not_the_f32_activations():
    """ggml's MUL_MAT takes the weight as src0 and f32 activations as src1: an
    honest q6_K or q8_0 head is not dense, an f16/bf16/f32 one is."""
    q4_0 = {"engine": "llamacpp", "quantization": None, "engine_params": {"gguf": "q4_0"}}
    for weight in ("q6_K", "q8_0", "q4_0"):
        records = [ggml([[HIDDEN, VOCAB], [HIDDEN, 2]], f"{weight},f32")]
        assert ops.head_signature(records, VOCAB, HIDDEN) is None, weight
        assert ops.head_rule(q4_0, records, VOCAB, HIDDEN) is None
    for weight in ("f16", "bf16", "f32"):
        records = [ggml([[HIDDEN, VOCAB], [HIDDEN, 2]], f"{weight},f32")]
        assert ops.head_signature(records, VOCAB, HIDDEN)["op"] == "MUL_MAT", weight
        why = ops.head_rule(q4_0, records, VOCAB, HIDDEN)
        assert why.startswith("bf16 head: the arm claims a quantized output head (gguf: q4_0)")
    # an f16 matmul of another shape (a layer), beside a quantized head: not the head
    layer = [ggml([[HIDDEN, 768], [HIDDEN, 2]], "f16,f32"), ggml([[HIDDEN, VOCAB], [HIDDEN, 2]], "q6_K,f32")]
    assert ops.head_signature(layer, VOCAB, HIDDEN) is None
    # the activations of the head's shape in a weight's place do not make it the head
    assert ops.head_signature([ggml([[VOCAB, 2], [HIDDEN, VOCAB]], "f32,q6_K")], VOCAB, HIDDEN) is None


def test_torch_head_weights_by_position_and_onednn_by_its_output():
    linear = ggml([[2, HIDDEN], [VOCAB, HIDDEN], []], "c10::BFloat16,c10::BFloat16", op="aten::linear")
    assert ops.dense_head_gemm(linear, VOCAB, HIDDEN)
    addmm = ggml([[VOCAB], [2, HIDDEN], [HIDDEN, VOCAB]], "float,float,float", op="aten::addmm")
    assert ops.dense_head_gemm(addmm, VOCAB, HIDDEN)
    # a bf16 input but not the weight: torch's int4 matmul is no dense GEMM, whatever its activations
    int4 = ggml([[2, HIDDEN], [4000, 8, 32, 4], [], [8, VOCAB, 2]], "c10::BFloat16,int,Scalar,c10::BFloat16")
    assert not ops.dense_head_gemm({**int4, "op": "aten::_weight_int4pack_mm_for_cpu"}, VOCAB, HIDDEN)
    onednn = ggml([[2, VOCAB], [2, HIDDEN], []], "c10::BFloat16,c10::BFloat16,Scalar", op="_C::onednn_mm")
    assert ops.dense_head_gemm(onednn, VOCAB, HIDDEN)  # its weight is a handle: the op is the signature


def ops_frame(arms: dict[str, list[list[float]]], op="aten::mm") -> pd.DataFrame:
    """Runs of per-step self ms of one op (plus 'other' at 1 ms/step)."""
    rows = []
    for arm, runs in arms.items():
        for r, steps in enumerate(runs):
            for s, ms in enumerate(steps):
                for name, value in ((op, ms), ("other", 1.0)):
                    rows.append(
                        {
                            "run_id": f"{arm}-{r}",
                            "arm": arm,
                            "step": s,
                            "step_kind": "decode",
                            "step_ms": ms + 1.0,
                            "op": name,
                            "calls": 1,
                            "self_ms": value,
                            "distorting": False,
                        }
                    )
    return pd.DataFrame(rows)


def test_op_lines_give_ms_per_step_share_and_noise_between_runs():
    frame = ops_frame({"a": [[2.0, 2.0], [2.2, 2.2], [1.8, 1.8]]})
    line = next(x for x in ops.op_lines(frame) if x.op == "aten::mm")
    assert line.runs == 3 and line.ms_per_step == pytest.approx(2.0)
    assert line.share == pytest.approx(2.0 / 3.0)
    assert line.noise == pytest.approx(pd.Series([math.log(2.0), math.log(2.2), math.log(1.8)]).std())


def test_per_op_verdicts_follow_the_rule_of_every_metric():
    steady = [[2.0, 2.02], [2.02, 2.0], [1.99, 2.01]]
    slower = [[2.4, 2.42], [2.42, 2.4], [2.39, 2.41]]
    frame = ops_frame({"base": steady, "same": [list(s) for s in steady], "slow": slower})
    judged = {c.op: c.comparison for c in ops.compare_ops(frame, "base", "slow", 0.05)}
    assert judged["aten::mm"].verdict == "worse" and judged["aten::mm"].ratio == pytest.approx(1.2, rel=0.01)
    assert judged["other"].verdict == "equivalent"
    assert {c.op: c.comparison.verdict for c in ops.compare_ops(frame, "base", "same", 0.05)}[
        "aten::mm"
    ] == "equivalent"
    one_sided = ops.compare_ops(
        frame.replace({"op": {"aten::mm": "int4_mm"}}).query("arm != 'base' or op != 'int4_mm'"), "base", "slow", 0.05
    )
    assert {c.op: (c.base_ms, c.comparison) for c in one_sided}["int4_mm"] == (None, None)


def test_ops_are_stored_beside_the_run_and_read_once_committed(tmp_path):
    row = {"run_id": "r1", "sweep_id": "s1", "arm": "a", "pass_index": 0}
    records = ops.torch_trace_records(fixture("int4-head"))
    writing.write_side_table(tmp_path, "ops", row, records)
    assert reading.load_ops(tmp_path, "s1").empty  # no run row yet: not committed
    (tmp_path / "runs" / "sweep=s1").mkdir(parents=True)
    (tmp_path / "runs" / "sweep=s1" / "r1.parquet").write_bytes(b"")  # the commit, by name
    got = reading.load_ops(tmp_path, "s1")
    assert len(got) == len(records) and set(got["run_id"]) == {"r1"}
    assert got["self_ms"].sum() == pytest.approx(sum(r["self_ms"] for r in records))
    assert pd.read_parquet(tmp_path / "ops").shape[0] == len(records)  # pandas reads the directory


SPEC = """\
name: prof
passes: 3
arms:
  - {name: a, engine: vllm, model: tiny-llama, context_len: 96, profile: {steps: 8, passes: 2}}
  - {name: b, engine: vllm, model: tiny-llama, context_len: 96}
"""


def test_profiled_passes_come_after_the_timed_ones_with_their_own_run_ids(tmp_path):
    path = tmp_path / "prof.yaml"
    path.write_text(SPEC)
    loaded = load_spec(path)
    assert [a.name for a in loaded.sweep.arms] == ["a", "b", "a.control"]
    assert loaded.sweep.arms[2].profile is None  # the control replicates the timed runs only
    items = plan_sweep(loaded, "s", [Slot(index=0, node=0, cpus=(0,), mems=(0,))])
    timed, profiled = [i for i in items if not i.profiled], [i for i in items if i.profiled]
    assert len(timed) == 9 and [(i.arm.name, i.pass_index) for i in profiled] == [("a", 0), ("a", 1)]
    assert items[-2:] == profiled  # never interleaved with the timed runs
    assert len({i.run_id for i in items}) == len(items)
    # profile: out of the arm's identity when unset: runs of arms without one keep their ids
    plain = load_spec(path).sweep.arms[1]
    from omni.spec import canonical_arm_json

    assert '"profile"' not in canonical_arm_json(plain) and '"profile"' in canonical_arm_json(loaded.sweep.arms[0])


def test_profile_on_an_engine_without_a_profiler_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: x\narms:\n  - {name: a, engine: synthetic, profile: {steps: 4}}\n")
    with pytest.raises(SpecError, match=r"s.yaml:3 arms\[0\].profile: engine 'synthetic' has no profiler"):
        load_spec(path)
