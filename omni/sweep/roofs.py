"""What a sweep prepares for its runs' roof columns (:mod:`omni.run.roofs`):
each arm's model layout (:func:`omni.measure.traffic.model_layout`) and the
limits of every (slot, thread count) its real-engine arms run on, measured
now when the host has none stored that still fit it
(:func:`omni.host.limits.ensure_limits`; about a minute a binding, once).

Measured before the first run and between none: the limits kernels load the
slot's cores and memory as an engine does, so they never overlap a run.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omni.envs.resources import ArmResources
from omni.errors import OmniError
from omni.host.limits import Binding, ensure_limits, torch_python
from omni.measure.traffic import Layout, as_cpu_int4, model_layout
from omni.run.plan import PlanItem
from omni.run.roofs import RoofInputs
from omni.run.runner import compute_threads

log = logging.getLogger(__name__)
REAL_ENGINES = ("vllm", "llamacpp")


def arm_layout(item: PlanItem, res: ArmResources) -> Layout | str:
    """The arm's model as its engine holds it, or why it is not modelled."""
    arm = item.arm
    if arm.engine not in REAL_ENGINES:
        return f"engine {arm.engine}: no model to count bytes of"
    if arm.load is not None:
        return "a serving arm: its requests' lengths vary, so no one shape's traffic fits it"
    if not res.model_path:
        return "the arm's model was not resolved"
    try:
        layout = model_layout(res.model_path)
    except (OmniError, KeyError) as e:
        return f"the bytes model cannot read {res.model_path}: {e}"
    if arm.engine == "vllm" and arm.quantization == "cpu_int4":
        params = arm.engine_params()
        return as_cpu_int4(layout, params.int4_group_size, params.int4_lm_head)
    if arm.engine == "vllm" and arm.quantization:
        return f"quantization {arm.quantization}: the bytes model knows cpu_int4 only"
    return layout


def binding_of(item: PlanItem) -> Binding | str:
    slot = item.slot
    if len(slot.mems) != 1:
        return f"the slot is bound to nodes {list(slot.mems)}: one DRAM roof does not fit a straddling run"
    return Binding(slot.cpus, slot.mems[0], compute_threads(item.arm, slot))


def torch_env(items: list[PlanItem], resources: dict[str, ArmResources], repo_root: Path) -> str | Path | None:
    for item in items:
        res = resources.get(item.arm.name)
        if item.arm.engine == "vllm" and res and res.python:
            return res.python
    return torch_python(repo_root)


def prepare_roofs(
    items: list[PlanItem], resources: dict[str, ArmResources], repo_root: Path, busy_wait_s: float = 0.0
) -> RoofInputs:
    """Layouts of the items' arms and limits of their bindings (measured when missing or stale)."""
    layouts: dict[str, Layout | str] = {}
    limits: dict[tuple[int, int], dict | str] = {}
    python = None
    for item in items:
        res = resources.get(item.arm.name) or ArmResources()
        if item.arm.name not in layouts:
            layouts[item.arm.name] = arm_layout(item, res)
        if isinstance(layouts[item.arm.name], str):
            continue
        binding = binding_of(item)
        key = (item.slot.index, compute_threads(item.arm, item.slot))
        if key in limits:
            continue
        if isinstance(binding, str):
            limits[key] = binding
            continue
        python = python or torch_env(items, resources, repo_root)
        try:
            record, measured = ensure_limits(binding, python, busy_wait_s=busy_wait_s)
        except OmniError as e:
            limits[key] = f"the slot's limits could not be measured: {e}"
            continue
        if measured:
            log.info("measured the limits of %s (omni host limits shows them)", binding.label())
        limits[key] = record
    return RoofInputs(layouts, limits)
