"""A run's roof columns: the model's traffic at the run's shape against the
slot's measured limits (:mod:`omni.measure.roofline`), filled once the
engine's figures are in the row. What the sweep prepared for it
(:class:`RoofInputs`, :mod:`omni.sweep.roofs`) is a layout per arm and a
limits record per binding, or for each the reason there is none, which the
row's ``roof_note`` then carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omni.measure.roofline import ROOF_EXCEEDED, roof_columns
from omni.measure.traffic import Layout, compute_dtype, run_traffic
from omni.run.plan import PlanItem
from omni.run.validity import warn

KV_ELEMENT_BYTES = {"float32": 4}  # else 2: llama.cpp's f16 cache, vLLM's bf16 (the model's dtype)


@dataclass(frozen=True)
class RoofInputs:
    layouts: dict[str, Layout | str] = field(default_factory=dict)  # arm name -> layout, or why none
    limits: dict[tuple[int, int], dict | str] = field(default_factory=dict)  # (slot, threads) -> record, or why none


def arm_compute_dtype(item: PlanItem, layout: Layout) -> str:
    if item.arm.engine == "vllm" and item.arm.dtype in ("float32", "bfloat16") and not item.arm.quantization:
        return "fp32" if item.arm.dtype == "float32" else "bf16"
    return compute_dtype(layout.body_dtype)


def fill_roofs(row: dict, item: PlanItem, inputs: RoofInputs, threads: int) -> None:
    """The roof columns of an ok row; a note saying why when they stay null."""
    if row.get("status") != "ok":
        return
    layout = inputs.layouts.get(item.arm.name, "no layout prepared for this arm")
    limits = inputs.limits.get((item.slot.index, threads), "no limits measured for this slot")
    if isinstance(layout, str) or isinstance(limits, str):
        row["roof_note"] = layout if isinstance(layout, str) else limits
        return
    kv_bytes = KV_ELEMENT_BYTES.get(item.arm.dtype or "", 2)
    traffic = run_traffic(layout, item.arm.prompt_len, item.arm.max_tokens, item.arm.batch_size, kv_bytes)
    columns, findings = roof_columns(
        traffic, limits, arm_compute_dtype(item, layout), row.get("prefill_tok_s"), row.get("decode_tok_s")
    )
    row.update(columns)
    for finding in findings:
        warn(row, ROOF_EXCEEDED, finding)
    if findings:
        row["roof_note"] = "; ".join(findings)
