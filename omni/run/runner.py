"""Running one item: check its slot, run its engine (or a serving arm's
server and load), and hand what happened to :mod:`omni.run.row`.

The engine process itself (its command line, subprocess tree and log) is
:mod:`omni.run.engine_process`. Here: what every run of a sweep shares
(:class:`RunContext`), the arm as the engine reads it, the row's identity and
placement, the busy check that refuses a run on a busy slot, and the order
of it all (:func:`run_arm`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from omni.envs.resources import ArmResources
from omni.errors import naming
from omni.host.conditions import host_conditions
from omni.host.placement import explain_busy, measure_busy
from omni.host.provenance import behaviour_env, merge_engine_provenance
from omni.run.engine_process import RUNS, EngineProcess, RunInterrupted, engine_argv, engine_env
from omni.run.plan import PlanItem, SlotOverride
from omni.run.progress import BOARD
from omni.run.roofs import RoofInputs, fill_roofs
from omni.run.row import fill_engine_log, fill_outcome, fill_sampled
from omni.run.validity import fill_head, kv_rules, validity_rules, warn
from omni.serving.run import run_serving, server_provenance
from omni.spec import Arm, arm_hash, canonical_arm_json
from omni.store.objstore import ResultsPath, local_scratch
from omni.vllm_plugin import names as vllm_names


@dataclass(frozen=True)
class RunContext:
    """What every run of a sweep shares."""

    results_dir: Path | ResultsPath  # a directory or s3://bucket/prefix (omni.store.objstore)
    timeout_s: float
    busy_threshold_pct: float
    force: bool = False
    busy_wait_s: float = 0.0  # wait this long for busy slot CPUs to calm down, then refuse
    provenance: dict = field(default_factory=dict)
    repo_root: Path = Path(".")
    resources: dict[str, ArmResources] = field(default_factory=dict)
    # Placement planned from another host's sysfs (a fixture): recorded, not
    # applied, since this host lacks those CPUs; no busy check, no binding check.
    simulate_placement: bool = False
    slots_override: SlotOverride | None = None  # --cores/--node
    recorded: dict = field(default_factory=dict)  # the request's fields every row records (SweepRequest.recorded)
    seed: int = 0  # the sweep's: it shuffles a serving run's levels as it shuffles the arms
    roofs: RoofInputs = field(default_factory=RoofInputs)  # layouts and slot limits (omni.sweep.roofs)


def engine_arm_payload(item: PlanItem, res: ArmResources, workdir: Path) -> dict:
    """The arm as the engine reads it: every field (also those the identity
    leaves out at their defaults, omni.spec LATE_ARM_FIELDS) plus where it runs."""
    payload = item.arm.model_dump(mode="json")
    payload["model_path"] = res.model_path
    payload["workdir"] = str(workdir)
    payload["run_id"] = item.run_id
    payload["slot"] = {"cpus": list(item.slot.cpus), "node": item.slot.node, "mems": list(item.slot.mems)}
    payload["threads_effective"] = compute_threads(item.arm, item.slot)
    payload["profiled"] = item.profiled
    return payload


def run_workdir(results_dir: Path | ResultsPath, item: PlanItem) -> Path:
    """Where a run's arm.json, result.json and engine.log are kept, for good
    (on local disk, also when the results go to S3)."""
    return local_scratch(results_dir) / "logs" / f"sweep={item.sweep_id}" / item.run_id


def now_utc() -> datetime:
    return datetime.now(UTC)


def patches_list(arm: Arm) -> list[str]:
    if arm.patches == "none":
        return []
    if arm.patches == "all":
        return list(vllm_names.PATCHES)  # the names, as this omni knows them: "all" changes meaning over time
    return list(arm.patches)


def compute_threads(arm, slot) -> int:
    """The run's compute (OpenMP) threads: the arm's ``threads``, else one
    per slot CPU, but for vLLM one CPU fewer when the slot has two or more.

    vLLM runs its scheduler in a process of its own (EngineCore) that polls
    for work between steps, and reserves it a core in its own binding
    (``VLLM_CPU_NUM_OF_RESERVED_CPU``, one per rank on x86). With an OpenMP
    thread on every slot CPU that process waits on a run queue behind them:
    measured on a 2-CPU slot, its thread waited 2.7-3.3 s of a 3 s timed
    window and the tree 1.2-1.3 s a second (docs/noise.md). The slot's last
    CPU is left to it and vLLM's other Python threads."""
    if arm.threads:
        return arm.threads
    cpus = len(slot.cpus)
    return cpus - 1 if arm.engine == "vllm" and cpus >= 2 else cpus


def base_row(ctx: RunContext, item: PlanItem) -> dict:
    """Identity, arm parameters, placement request and host provenance."""
    arm = item.arm
    params = arm.engine_params()
    return {
        **ctx.provenance,
        "run_id": item.run_id,
        "sweep_id": item.sweep_id,
        "sweep_name": item.sweep_name,
        "arm": arm.name,
        "pass_index": item.pass_index,
        "order_index": item.order_index,
        "attempt": item.attempt,
        "forced": False,
        "profiled": item.profiled,
        "engine": arm.engine,
        "engine_env": (ctx.resources.get(arm.name) or ArmResources()).env,
        "model": arm.model,
        # vLLM reads its weights into anonymous memory: not mapped, and a memory
        # comparison must see it so (omni.measure.kv), not as unknown
        "mmap": False if arm.engine == "vllm" else params.model_dump().get("mmap"),
        "dtype": arm.dtype,
        "quantization": arm.quantization,
        "kv_cache_bytes": arm.kv_cache_bytes,
        "context_len": arm.context_len,
        "prompt_len": arm.prompt_len,
        "max_tokens": arm.max_tokens,
        "batch_size": arm.batch_size,
        "prompt_seed": arm.prompt_seed,
        "threads": compute_threads(arm, item.slot),
        "compile_mode": arm.compile_mode,
        "patches": patches_list(arm),
        "env_overrides": dict(arm.env),
        "engine_params": params.model_dump(mode="json"),
        "arm_json": canonical_arm_json(arm),
        "arm_hash": arm_hash(arm),
        "slot_index": item.slot.index,
        "numa_node": item.slot.node,
        "cpus": list(item.slot.cpus),
        "membind": list(item.slot.mems),
        "straddle": len(item.slot.mems) > 1,
        **ctx.recorded,
        "warnings": [],
        "warning_rules": [],
    }


BUSY_RECHECK_S = 2.0


def check_busy(ctx: RunContext, item: PlanItem, row: dict) -> bool:
    """Measure the slot's load; ``False`` (and a refused row) when too busy.

    A busy slot is measured again every ``BUSY_RECHECK_S`` for up to
    ``ctx.busy_wait_s`` (not with ``--force``, which runs at once); the row
    records how long the run waited (``busy_waited_s``). The slot's idle SMT
    siblings are checked with its CPUs: a neighbour there shares their cores.
    """
    row["smt_mode"] = item.slot.smt
    row["smt_siblings"] = list(item.slot.siblings)
    started = time.monotonic()
    report = measure_busy(list(item.slot.owned))
    while report.max_pct > ctx.busy_threshold_pct and not ctx.force:
        left = ctx.busy_wait_s - (time.monotonic() - started)
        if left <= 0:
            break
        if RUNS.stopping.wait(min(BUSY_RECHECK_S, left)):
            raise RunInterrupted(f"run {item.run_id} not started: this process is going down")
        report = measure_busy(list(item.slot.owned))
    row["busy_max_pct"] = report.max_pct
    row["busy_waited_s"] = time.monotonic() - started if ctx.busy_wait_s and not ctx.force else 0.0
    if report.max_pct <= ctx.busy_threshold_pct:
        return True
    report = explain_busy(report, ctx.busy_threshold_pct)
    message = report.describe(ctx.busy_threshold_pct)
    if ctx.force:
        row["forced"] = True
        warn(row, "forced_busy", f"ran with --force although {message.split('. ')[0]}")
        return True
    if ctx.busy_wait_s:
        message += f" (waited {row['busy_waited_s']:.0f} s of busy_wait_s={ctx.busy_wait_s:g} for them)"
    row.update(status="refused", error=message)
    return False


def serving_row(ctx: RunContext, item: PlanItem, res: ArmResources, row: dict, workdir: Path) -> dict:
    """A serving arm's run (omni.serving.run): levels, capacity, and the server's
    memory and binding checked as an offline engine's are."""
    row["client_cpus"] = list(item.slot.client)
    payload = engine_arm_payload(item, res, workdir)
    proc, method = run_serving(item, res, row, workdir, payload, ctx.timeout_s, ctx.seed)
    merge_engine_provenance(row, server_provenance(item.arm.engine, res.python))
    if proc.leftovers:
        pids = ", ".join(map(str, sorted(proc.leftovers)))
        warn(row, "leftover_processes", f"the server left process(es) {pids} behind; killed them")
    figures = row["status"] in ("ok", "invalid")
    if figures:
        fill_engine_log(row, proc)
        for rule, message in kv_rules(row):
            warn(row, rule, message)
        fill_head(row, row.pop("_head", None))
    row.pop("_head", None)
    fill_sampled(row, proc, item, method, figures, placed=True)
    row["finished_at"] = now_utc()
    return row


def run_arm(ctx: RunContext, item: PlanItem) -> dict:
    """Run one planned item and return its row (never raises for a bad run)."""
    row = base_row(ctx, item)
    row["started_at"] = now_utc()
    row["host_conditions"] = host_conditions()  # this host's, also when placement is simulated
    for rule, message in validity_rules(item.arm):
        warn(row, rule, message)
    res = ctx.resources.get(item.arm.name) or ArmResources(error=f"arm {item.arm.name!r} was never resolved")
    row.update(
        model_digest=res.model_digest,
        engine_env_key=res.env_key,
        engine_env_freeze_sha256=res.env_freeze_sha256,
        engine_env_pins=res.env_pins,
        engine_env_declaration=res.env_declaration,
        model_recipe=res.model_recipe,
    )
    if res.error:
        row.update(status="invalid", error=res.error, finished_at=now_utc())
        return row
    if ctx.simulate_placement:
        warn(
            row, "placement_simulated", "placement planned from another host's topology (a sysfs fixture): not applied"
        )
    elif not check_busy(ctx, item, row):
        row["finished_at"] = now_utc()
        return row
    workdir = run_workdir(ctx.results_dir, item)
    workdir.mkdir(parents=True, exist_ok=True)
    with naming(workdir / "arm.json"):
        (workdir / "arm.json").write_text(json.dumps(engine_arm_payload(item, res, workdir), sort_keys=True))
    if item.arm.load is not None and not ctx.simulate_placement:
        return serving_row(ctx, item, res, row, workdir)
    argv, method = engine_argv(item, workdir, res.python, ctx.simulate_placement)
    row["command"] = json.dumps(argv)
    env = engine_env(item, res.env_vars)
    row["env_vars"] = behaviour_env(env)  # what omni passed; the engine's own report replaces it
    BOARD.phase(item.run_id, "starting the engine")
    with EngineProcess(argv, env, item.run_id, workdir / "engine.log", item.slot.cpus) as proc:
        finished = proc.wait(ctx.timeout_s)
        BOARD.phase(item.run_id, "reaping")
    figures = fill_outcome(row, proc, finished, ctx.timeout_s, workdir)
    fill_sampled(row, proc, item, method, figures, placed=not ctx.simulate_placement)
    fill_roofs(row, item, ctx.roofs, compute_threads(item.arm, item.slot))
    row["finished_at"] = now_utc()
    return row
