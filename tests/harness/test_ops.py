"""``omni ops`` on stored profiles (vLLM's traces of the tiny model): each arm's ops, judged, and
summaries that leave the profiled runs out."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from omni.measure import ops
from omni.store import reading, writing

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"


VOCAB, HIDDEN = 32000, 256  # tiny-llama


INT4_HEAD = {"quantization": "cpu_int4", "engine_params": {"int4_lm_head": True}}


def fixture(name: str) -> dict:
    with gzip.open(FIXTURES / f"{name}.pt.trace.json.gz", "rt") as f:
        return json.load(f)


def test_omni_ops_prints_each_arms_ops_and_judges_them_and_summaries_skip_profiled_runs(tmp_path):
    """Two arms' stored profiles (vLLM's traces of the tiny model, bf16 and int4)
    and timed runs beside them: omni ops shows the int4 matmul only in the int4
    arm and the head's bf16 GEMM apart with --by-shape; the summary judges the
    timed runs only and counts the profiled ones."""
    import subprocess
    import sys

    from omni.report.summary import summarize_sweep
    from tests.rows import store_sweep

    store_sweep(tmp_path, "sw", {"bf16": [100, 101, 99], "int4": [120, 121, 119]})
    template = reading.load_runs(tmp_path, sweep_id="sw").iloc[0].to_dict()
    for n, (arm, trace) in enumerate(
        [("bf16", "bf16-head"), ("bf16", "bf16-head"), ("int4", "int4-head"), ("int4", "int4-head")]
    ):
        row = {k: v for k, v in template.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
        row.update(
            run_id=f"prof{n:012d}", arm=arm, pass_index=n % 2, order_index=6 + n, profiled=True, decode_tok_s=1.0
        )
        writing.write_side_table(tmp_path, "ops", row, ops.torch_trace_records(fixture(trace)))
        writing.write_run(tmp_path, row)
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
    writing.write_run(tmp_path, lie)
    from omni.report.markdown import summary_markdown

    voided = summarize_sweep(tmp_path, "sw")
    assert set(voided.void) == {"int4"} and any(w.startswith("void arm int4:") for w in voided.warnings)
    shown = summary_markdown(voided)
    assert "| int4 (VOID) | decode_tok_s | 3 |" in shown and "VOID (bf16 head)" in shown
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "omni.cli.main",
            "ops",
            "sw",
            "--results",
            str(tmp_path),
            "--steps",
            "all",
            "--by-shape",
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    # the ops table's rows: the arm column, then two spaces (a failed run's line is "int4 pass 2: ...")
    int4_lines = [x for x in lines if x.startswith("int4  ")]
    bf16_lines = [x for x in lines if x.startswith("bf16  ")]
    assert any("_weight_int4pack_mm_for_cpu" in x for x in int4_lines) and not any("aten::mm" in x for x in int4_lines)
    assert any("aten::mm [[2, 256], [256, 32000]]" in x for x in bf16_lines)  # the head's GEMM, in bf16
    assert "int4 against bf16, per op" in done.stdout and "only in" in done.stdout
