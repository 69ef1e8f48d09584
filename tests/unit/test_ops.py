"""Per-op profiles: trace parsing, the ops table, per-op verdicts, and the
bf16-head rule, on hand-made traces, on traces vLLM wrote for the tiny model,
and end to end in the vLLM engine env."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from omni import ops, store
from omni.errors import SpecError
from omni.plan import plan_sweep
from omni.spec import load_spec
from omni.topology import Slot

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
    store.write_side_table(tmp_path, "ops", row, records)
    assert store.load_ops(tmp_path, "s1").empty  # no run row yet: not committed
    (tmp_path / "runs" / "sweep=s1").mkdir(parents=True)
    (tmp_path / "runs" / "sweep=s1" / "r1.parquet").write_bytes(b"")  # the commit, by name
    got = store.load_ops(tmp_path, "s1")
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


@pytest.mark.engines
@pytest.mark.timeout(900)
def test_profiled_vllm_runs_store_ops_and_a_mislabeled_int4_head_is_invalid(tmp_path):
    """Two profiled runs in the real vLLM env: an honest int4 head passes the
    bf16-head rule, the same arm with its head left in bf16 behind its back
    (the test-only fault OMNI_FAULT_INT4_HEAD=bf16) is invalid, with the op."""
    from omni.schedule import run_concurrently
    from omni.sweep import prepare_sweep, run_and_store
    from tests.engines.test_engines import SIDE_BY_SIDE, write_spec

    arms = [
        {"name": "int4", **VLLM_INT4},
        {"name": "int4-mislabeled", **VLLM_INT4, "env": {"OMNI_FAULT_INT4_HEAD": "bf16"}},
    ]
    results = tmp_path / "results"
    prepared = prepare_sweep(write_spec(tmp_path, arms, **SIDE_BY_SIDE), results=results)
    profiled = [item for item in prepared.items if item.profiled]  # the two profiled runs, side by side
    done = run_concurrently(profiled, prepared.slots, lambda item: run_and_store(prepared.context, item))
    rows = {row["arm"]: row for row in done}
    honest, lying = rows["int4"], rows["int4-mislabeled"]
    assert honest["status"] == "ok", honest.get("error")
    assert honest["profiled"] and honest["profile_steps"] == 6 and honest["profile_overhead"] > 0
    assert lying["status"] == "invalid" and lying["error"].startswith("bf16 head:"), lying.get("error")
    # which dense GEMM runs the head depends on the ISA: aten::mm on an AVX2 EPYC, _C::onednn_mm with AMX
    assert any(f"{op} " in lying["error"] for op in ops.DENSE_GEMM_OPS) and "vocab 32000 x hidden 256" in lying["error"]
    frame = store.load_ops(results, prepared.items[0].sweep_id)
    by_arm = {arm: set(group["op"]) for arm, group in frame.groupby("arm")}
    assert "aten::_weight_int4pack_mm_for_cpu" in by_arm["int4"] and not by_arm["int4"] & ops.DENSE_GEMM_OPS
    lied = frame[frame["arm"] == "int4-mislabeled"]
    head = lied[lied["shapes"].str.contains("32000") & lied["op"].isin(ops.DENSE_GEMM_OPS)]
    gemm_steps = set(lied.loc[lied["op"].isin(ops.DENSE_GEMM_OPS), "step"])
    assert set(head["step"]) == gemm_steps and len(gemm_steps) >= 4  # every step that ran a GEMM ran the head in bf16
    assert list(Path(results, "logs").rglob("*.pt.trace.json.gz"))  # the raw trace, kept gzipped


@pytest.mark.engines
@pytest.mark.timeout(300)
def test_a_profiled_llamacpp_run_times_every_node_and_labels_it_distorting(tmp_path):
    from omni.sweep import prepare_sweep, run_and_store
    from tests.engines.test_engines import write_spec

    arm = {
        "name": "llama",
        "engine": "llamacpp",
        "model": "tiny-llama",
        "context_len": 96,
        "prompt_len": 32,
        "max_tokens": 4,
        "batch_size": 2,
        "params": {"gguf": "bf16"},
        "profile": {"steps": 5, "passes": 1},
    }
    results = tmp_path / "results"
    prepared = prepare_sweep(write_spec(tmp_path, [arm]), results=results)
    timed, profiled = (run_and_store(prepared.context, item) for item in prepared.items)
    for row in (timed, profiled):
        perf = json.loads(row["engine_perf"]) if isinstance(row["engine_perf"], str) else row["engine_perf"]
        assert row["status"] == "ok" and perf["t_load_ms"] > 0 and perf["n_p_eval"] > 0  # phase totals, every run
        assert perf["t_p_eval_ms"] > 0  # timed: llama.cpp's contexts collect no timings unless asked
    assert not timed["profiled"] and profiled["profiled"] and profiled["profile_steps"] == 5
    assert profiled["profile_overhead"] > 0
    frame = store.load_ops(results, prepared.items[0].sweep_id)
    assert set(frame["run_id"]) == {profiled["run_id"]} and frame["distorting"].all()
    assert set(frame["method"]) == {ops.GGML_EVAL_CALLBACK} and list(frame.drop_duplicates("step")["step_kind"])[
        :2
    ] == ["prefill", "decode"]
    head = frame[(frame["op"] == "MUL_MAT") & frame["shapes"].str.contains("32000")]
    assert set(head["step"]) == set(range(5)) and set(head["dtypes"]).pop().startswith("bf16")  # the head, every step
    assert ops.head_rule({"quantization": None, "engine_params": {}}, frame.to_dict("records"), VOCAB, HIDDEN) is None


def test_omni_ops_prints_each_arms_ops_and_judges_them_and_summaries_skip_profiled_runs(tmp_path):
    """Two arms' stored profiles (vLLM's traces of the tiny model, bf16 and int4)
    and timed runs beside them: omni ops shows the int4 matmul only in the int4
    arm and the head's bf16 GEMM apart with --by-shape; the summary judges the
    timed runs only and counts the profiled ones."""
    import subprocess
    import sys

    from omni.summary import summarize_sweep
    from tests.unit.test_summary import store_sweep

    store_sweep(tmp_path, "sw", {"bf16": [100, 101, 99], "int4": [120, 121, 119]})
    template = store.load_runs(tmp_path, sweep_id="sw").iloc[0].to_dict()
    for n, (arm, trace) in enumerate(
        [("bf16", "bf16-head"), ("bf16", "bf16-head"), ("int4", "int4-head"), ("int4", "int4-head")]
    ):
        row = {k: v for k, v in template.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
        row.update(
            run_id=f"prof{n:012d}", arm=arm, pass_index=n % 2, order_index=6 + n, profiled=True, decode_tok_s=1.0
        )
        store.write_side_table(tmp_path, "ops", row, ops.torch_trace_records(fixture(trace)))
        store.write_run(tmp_path, row)
    summary = summarize_sweep(tmp_path, "sw")
    assert summary.profiled == 4 and summary.runs == {"bf16": 3, "int4": 3}
    assert summary.cells[("bf16", "decode_tok_s")].median == 100  # the profiled runs' 1.0 stayed out
    assert summary.void == {}
    # a profiled pass that caught the bf16 head voids the arm: its timed runs ran the same lie
    lie = {
        **row,
        "run_id": "prof-lie-000001",
        "arm": "int4",
        "pass_index": 2,
        "order_index": 10,
        "status": "invalid",
        "error": ops.head_rule(INT4_HEAD, ops.torch_trace_records(fixture("bf16-head")), VOCAB, HIDDEN),
    }
    store.write_run(tmp_path, lie)
    from omni.report import summary_markdown

    voided = summarize_sweep(tmp_path, "sw")
    assert set(voided.void) == {"int4"} and any(w.startswith("void arm int4:") for w in voided.warnings)
    assert "| int4 | decode_tok_s | 3 |" in summary_markdown(voided) and "VOID (bf16 head)" in summary_markdown(voided)
    done = subprocess.run(
        [sys.executable, "-m", "omni.cli", "ops", "sw", "--results", str(tmp_path), "--steps", "all", "--by-shape"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    int4_lines = [x for x in lines if "│ int4 " in x]
    bf16_lines = [x for x in lines if "│ bf16 " in x]
    assert any("_weight_int4pack_mm_for_cpu" in x for x in int4_lines) and not any("aten::mm" in x for x in int4_lines)
    assert any("aten::mm [[2, 256], [256, 32000]]" in x for x in bf16_lines)  # the head's GEMM, in bf16
    assert "int4 against bf16, per op" in done.stdout and "only in" in done.stdout
