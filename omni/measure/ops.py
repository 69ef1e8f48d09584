"""Per-op profiles: from an engine's trace to one row per (run, step, op),
the op table of a sweep, and the bf16-head rule.

A profiled run (an arm's ``profile:`` passes) traces ``steps`` engine steps
after its timed iterations. vLLM's own torch profiler writes a Chrome trace
(``*.pt.trace.json``) in which the worker wraps each step in a
``record_function`` named ``execute_context_N(T)_generation_M(U)``; every
``cpu_op`` event inside one is that step's. An op's self time is its
duration less that of the ops it called, on its thread. llama.cpp's profile
comes from ggml's eval callback (``omni.engines.llamacpp``), already per
step and node; each node is computed and synchronized on its own there, so
those times are labelled ``distorting`` and are for shares, not absolutes.

Pure but for reading a trace (and keeping it gzipped): traces in, rows and
verdicts out; omni.report.ops.sweep_ops reads a sweep's stored ops.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni.engines.common import GGML_EVAL_CALLBACK  # noqa: F401 - the llama.cpp engine's method name
from omni.measure.heads import arm_claim

TORCH_PROFILER = "torch.profiler"

_STEP = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")

# ops that multiply by a dense (unquantized) weight, by the names traces give them
DENSE_GEMM_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::matmul",
        "aten::linear",
        "aten::bmm",
        "_C::onednn_mm",
        "_C::weight_packed_linear",
        "zentorch::zentorch_linear_unary",
        "MUL_MAT",  # ggml's matmul node, when the weight is F16/BF16/F32
    }
)
# the half-precision and full-precision input types of a dense GEMM
DENSE_TYPES = ("BFloat16", "Half", "float", "double", "bf16", "f16", "f32", "f64")


@dataclass(frozen=True)
class Step:
    index: int
    kind: str  # prefill, decode or mixed
    ms: float
    start_us: float
    end_us: float


def step_kind(name: str) -> str:
    match = _STEP.match(name)
    if not match:
        return "unknown"
    context_requests, generation_requests = int(match.group(1)), int(match.group(3))
    if generation_requests == 0:
        return "prefill"
    return "decode" if context_requests == 0 else "mixed"


def torch_trace_records(trace: Mapping[str, Any]) -> list[dict]:
    """One record per (step, op, input shapes, input types) of a torch
    profiler Chrome trace: calls and self ms."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    annotated = sorted(
        (e for e in events if e.get("cat") == "user_annotation" and _STEP.match(e.get("name", ""))),
        key=lambda e: e["ts"],
    )
    steps = [
        Step(i, step_kind(e["name"]), e["dur"] / 1000, e["ts"], e["ts"] + e["dur"]) for i, e in enumerate(annotated)
    ]
    starts = [s.start_us for s in steps]
    totals: dict[tuple, list] = {}
    for event, self_us in _self_times([e for e in events if e.get("cat") == "cpu_op"]):
        at = bisect.bisect_right(starts, event["ts"]) - 1
        if at < 0 or event["ts"] >= steps[at].end_us:
            continue  # outside every traced step (before the first, between steps)
        args = event.get("args") or {}
        key = (
            at,
            event["name"],
            json.dumps(args.get("Input Dims")),
            ",".join(t for t in args.get("Input type") or [] if t),
        )
        entry = totals.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += self_us / 1000
    return [
        {
            "step": at,
            "step_kind": steps[at].kind,
            "step_ms": steps[at].ms,
            "op": op,
            "shapes": shapes,
            "dtypes": dtypes,
            "calls": calls,
            "self_ms": self_ms,
            "method": TORCH_PROFILER,
            "distorting": False,
        }
        for (at, op, shapes, dtypes), (calls, self_ms) in sorted(totals.items())
    ]


def _self_times(ops: list[dict]) -> Iterable[tuple[dict, float]]:
    """Each op with its duration less that of the ops directly inside it (same thread)."""
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for event in ops:
        by_thread[(event.get("pid"), event.get("tid"))].append(event)
    for events in by_thread.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        children_us = [0.0] * len(events)
        stack: list[int] = []
        for i, event in enumerate(events):
            while stack and events[stack[-1]]["ts"] + events[stack[-1]]["dur"] <= event["ts"]:
                stack.pop()
            if stack:
                children_us[stack[-1]] += event["dur"]
            stack.append(i)
        for event, inside in zip(events, children_us):
            yield event, max(event["dur"] - inside, 0.0)


def read_torch_trace(profile_dir: Path) -> list[dict]:
    """The records of the worker trace a profiled vLLM run writes, which is
    then kept gzipped beside the run's logs (a tenth of the size)."""
    traces = sorted(Path(profile_dir).glob("*.pt.trace.json"))
    if not traces:
        raise ValueError(f"no torch profiler trace (*.pt.trace.json) in {profile_dir}")
    records: list[dict] = []
    for path in traces:  # one per worker: tensor parallel 1 on CPU writes one
        text = path.read_bytes()
        records += torch_trace_records(json.loads(text))
        with gzip.open(path.with_name(path.name + ".gz"), "wb") as packed:
            packed.write(text)
        path.unlink()
    return records


# --- the bf16-head rule ---

# Where each dense GEMM takes its weight, by input position: the head's type
# is that operand's, never the activations'. ggml's MUL_MAT multiplies src0
# (the weight, any type) by src1 (activations, always f32), so "any input is
# f32" would flag every honest quantized head; torch's mm/matmul take the
# transposed weight second, linear (x, W, bias) second, addmm (bias, x, W^T)
# third. onednn_mm is absent: its weight is a packed handle, no operand, and
# it runs dense weights only, so the op itself is the signature.
WEIGHT_OPERAND = {
    "aten::mm": 1,
    "aten::matmul": 1,
    "aten::linear": 1,
    "aten::bmm": 1,
    "aten::addmm": 2,
    "_C::weight_packed_linear": 1,
    "zentorch::zentorch_linear_unary": 1,
    "MUL_MAT": 0,
}


def _dims(shapes: str) -> list:
    try:
        dims = json.loads(shapes or "null") or []
    except json.JSONDecodeError:
        return []
    return dims if isinstance(dims, list) else []


def _mentions_head(dims: list, vocab: int, hidden: int) -> bool:
    """Whether an op's input shapes hold the output head's vocab x hidden GEMM:
    some tensor has a vocab-sized dimension and some tensor ends in hidden
    (weight [vocab, hidden], its transpose, or onednn_mm's [tokens, vocab] output)."""
    dims = [d for d in dims if isinstance(d, list) and d]
    return any(vocab in d for d in dims) and any(d[-1] == hidden or d[0] == hidden for d in dims)


def _is_head_weight(dims: list, vocab: int, hidden: int) -> bool:
    """A [vocab, hidden] matrix, either way round (ggml lists ne innermost first)."""
    return isinstance(dims, list) and len(dims) == 2 and sorted(dims) == sorted([vocab, hidden])


def dense_head_gemm(record: Mapping, vocab: int, hidden: int) -> bool:
    """Whether one op record is a GEMM by a dense weight of the head's shape.

    The weight operand is found by position (:data:`WEIGHT_OPERAND`); its
    type by the same position in the record's types. A trace that records no
    types leaves a dense-only op (torch's mm family) dense; MUL_MAT always
    names its types.
    """
    op = record["op"]
    if op not in DENSE_GEMM_OPS:
        return False
    dims = _dims(record.get("shapes") or "")
    at = WEIGHT_OPERAND.get(op)
    if at is None:
        return _mentions_head(dims, vocab, hidden)
    if at >= len(dims) or not _is_head_weight(dims[at], vocab, hidden):
        return False
    types = [t for t in (record.get("dtypes") or "").split(",") if t]
    if not types:
        return op != "MUL_MAT"
    # torch drops the type of a None input (a missing bias), which comes after the weight
    return at < len(types) and types[at].rsplit("::", 1)[-1] in DENSE_TYPES


def head_signature(records: Sequence[Mapping], vocab: int, hidden: int) -> dict | None:
    """The heaviest GEMM of the head's shape by a dense (bf16/f16/f32) weight in
    a profile: op, ms per step and shapes; ``None`` when the head runs no such GEMM."""
    steps = len({r["step"] for r in records}) or 1
    found: dict[tuple[str, str], float] = defaultdict(float)
    for r in records:
        if dense_head_gemm(r, vocab, hidden):
            found[(r["op"], r.get("shapes") or "")] += r["self_ms"]
    if not found:
        return None
    (op, shapes), ms = max(found.items(), key=lambda item: item[1])
    return {"op": op, "ms_per_step": ms / steps, "shapes": shapes, "vocab": vocab, "hidden": hidden}


HEAD_RULE = "bf16 head"  # how a row invalid under the rule begins its error


def claims_quantized_head(arm: Mapping[str, Any]) -> str | None:
    """What the arm claims about its output head, when it claims it is quantized
    (omni.measure.heads.arm_claim: cpu_int4's int4_lm_head, a quantized GGUF)."""
    params = arm.get("engine_params") or arm.get("params") or {}
    engine = arm.get("engine") or ("vllm" if arm.get("quantization") else "llamacpp")
    claim = arm_claim(engine, arm.get("quantization"), params, preset=True)
    return claim.what if claim and claim.quantized else None


def head_rule(arm: Mapping[str, Any], records: Sequence[Mapping], vocab: int, hidden: int) -> str | None:
    """Why a run is invalid under the bf16-head rule, or ``None``.

    An arm that claims a quantized output head, but whose profile shows a
    GEMM by a dense weight of the head's shape, did not run what it claims:
    the signature of a checkpoint whose head was left in bf16 (origin notes:
    ``_C::onednn_mm`` at about 2.97 ms/step), and every number of the run is
    void. The profile says which op the head cost and how much; every run,
    profiled or not, is also checked against the head the engine reports
    loading (omni.measure.heads).
    """
    claim = claims_quantized_head(arm)
    signature = head_signature(records, vocab, hidden) if claim else None
    if signature is None:
        return None
    return (
        f"{HEAD_RULE}: the arm claims a quantized output head ({claim}) but its profile shows a dense GEMM of "
        f"the head's shape (vocab {vocab} x hidden {hidden}): {signature['op']} "
        f"{signature['ms_per_step']:.3f} ms/step, input shapes {signature['shapes']}"
    )


# --- per run and per arm ---


def per_run(frame) -> dict[tuple[str, str, str], dict]:
    """Per (arm, run, op): ms per step (total self ms / steps traced), the
    share of the step, and the within-run log sd over the steps that ran it."""
    import numpy as np  # here: the run path imports this module for its rules only

    out = {}
    for (arm, run_id), run in frame.groupby(["arm", "run_id"], sort=False):
        steps = run.drop_duplicates("step")
        n_steps, step_ms = len(steps), float(steps["step_ms"].sum())
        for op, rows in run.groupby("op", sort=False):
            by_step = rows.groupby("step")["self_ms"].sum()
            logs = np.log(by_step[by_step > 0].to_numpy())
            total = float(rows["self_ms"].sum())
            out[(arm, run_id, op)] = {
                "ms_per_step": total / n_steps,
                "share": total / step_ms if step_ms else math.nan,
                "sd_log": float(logs.std(ddof=1)) if logs.size > 1 else None,
                "k": int(logs.size),
                "calls_per_step": float(rows["calls"].sum()) / n_steps,
                "distorting": bool(rows["distorting"].any()),
            }
    return out


@dataclass(frozen=True)
class OpLine:
    """One op of one arm over its profiled runs."""

    arm: str
    op: str
    runs: int
    ms_per_step: float  # median over runs of the op's self ms per traced step
    share: float  # median over runs of the op's share of the step time
    calls_per_step: float
    noise: float | None  # sd of log ms/step between runs: the op-level A/A noise, measured
    distorting: bool  # ggml's eval callback: for shares, not absolute times


def op_lines(frame) -> list[OpLine]:
    """Per arm and op, over the arm's profiled runs, heaviest first within each arm."""
    import statistics

    runs = per_run(frame)
    by_arm_op: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for (arm, _run, op), value in runs.items():
        by_arm_op[(arm, op)].append(value)
    lines = []
    for (arm, op), values in by_arm_op.items():
        ms = [v["ms_per_step"] for v in values]
        positive = [m for m in ms if m > 0]
        noise = statistics.stdev([math.log(m) for m in positive]) if len(positive) > 1 else None
        lines.append(
            OpLine(
                arm,
                op,
                len(values),
                statistics.median(ms),
                statistics.median(v["share"] for v in values),
                statistics.median(v["calls_per_step"] for v in values),
                noise,
                any(v["distorting"] for v in values),
            )
        )
    return sorted(lines, key=lambda line: (line.arm, -line.ms_per_step))


@dataclass(frozen=True)
class OpComparison:
    op: str
    base_ms: float | None
    other_ms: float | None
    comparison: Any  # omni.stats.verdicts.Comparison; None where the op ran on one side only


def compare_ops(frame, base: str, other: str, min_effect: float) -> list[OpComparison]:
    """Each op of ``other`` against ``base``: the ratio of ms per step over the
    profiled runs, judged by the rule every metric gets (omni.stats.verdicts.compare),
    its noise measured between runs and floored by the spread over steps."""
    import statistics

    from omni.stats.verdicts import compare

    runs = per_run(frame)
    sides: dict[str, dict[str, list[dict]]] = {base: defaultdict(list), other: defaultdict(list)}
    for (arm, _run, op), value in runs.items():
        if arm in sides:
            sides[arm][op].append(value)
    out = []
    for op in sorted(set(sides[base]) | set(sides[other])):
        b, o = sides[base].get(op, []), sides[other].get(op, [])
        b_ms, o_ms = [v["ms_per_step"] for v in b], [v["ms_per_step"] for v in o]
        judged = None
        if b and o:
            judged = compare(b_ms, o_ms, better="lower", min_effect=min_effect, within=(_within(b), _within(o)))
        out.append(
            OpComparison(op, statistics.median(b_ms) if b else None, statistics.median(o_ms) if o else None, judged)
        )
    return sorted(out, key=lambda c: -max(c.base_ms or 0, c.other_ms or 0))


def _within(values: list[dict]) -> float:
    """The variance of a run's log ms/step its steps imply: sd^2 / steps, averaged over runs."""
    parts = [v["sd_log"] ** 2 / v["k"] for v in values if v["sd_log"] is not None and v["k"] >= 2]
    return sum(parts) / len(parts) if parts else 0.0


STEP_KINDS = ("decode", "prefill", "mixed", "all")
