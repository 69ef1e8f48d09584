"""Turning what happened into a row: the outcome and metrics read from what
the engine wrote and how it ended, its load time, what its log said, a
profiled run's ops, and what the sampler found (:func:`fill_sampled`: every
source's columns and rules, :mod:`omni.measure.sources`). Whatever happened
becomes one row: a failed run is a row too.
"""

from __future__ import annotations

import json
from pathlib import Path

from omni.engines.llamacpp import crash_hint, weight_buffers
from omni.engines.vllm import compile_cache_state, fallback_notes
from omni.host.provenance import merge_engine_provenance
from omni.measure.iterations import run_metrics
from omni.measure.ops import head_rule, read_torch_trace
from omni.measure.sampler import RunView
from omni.run.engine_process import EngineProcess, describe_exit, failure_reason
from omni.run.plan import PlanItem
from omni.run.validity import fill_audits, fill_head, kv_rules, warn
from omni.serving.run import LEVELS_KEY, REQUESTS_KEY

# what the engine reports as metrics; the timed ones come as raw iterations (omni.measure.iterations)
# (load_s is timed by the orchestrator, fill_load; the engine's own figure goes to engine_config)
ENGINE_METRICS = ("kv_cache_bytes_effective", "kv_cache_bytes_needed", "profile_overhead")
# a row's side-table records, taken off by run_and_store into results/<table>
ITERATIONS_KEY = "_iterations"
OPS_KEY = "_ops"
SIDE_KEYS = {"iterations": ITERATIONS_KEY, "ops": OPS_KEY, "levels": LEVELS_KEY, "requests": REQUESTS_KEY}
KERNEL_FALLBACK = "kernel_fallback"


def read_result(path: Path) -> dict | None:
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def fill_outcome(row: dict, proc: EngineProcess, finished_in_time: bool, timeout_s: float, workdir: Path) -> bool:
    """Status, error and metrics from how the engine ended and what it wrote;
    True when the engine's figures are in the row."""
    row["exit_code"] = proc.proc.returncode
    row["stderr_tail"] = "\n".join(proc.reader.tail)
    row["wall_s"] = proc.wall_s
    if proc.leftovers:
        pids = ", ".join(map(str, sorted(proc.leftovers)))
        warn(row, "leftover_processes", f"engine left process(es) {pids} behind; killed them")
    if proc.reader.write_error is not None:
        error = proc.reader.write_error
        warn(
            row,
            "log_incomplete",
            f"the engine's log {proc.log_path} is incomplete ({error.strerror or error}); "
            "its last lines are in stderr_tail",
        )
    result = read_result(workdir / "result.json")
    figures = False
    if not finished_in_time:
        row.update(status="timeout", error=f"no result within timeout_s={timeout_s:g}; killed the run's processes")
    elif proc.proc.returncode != 0 and result is not None and "done" in proc.sampler.phase_names():
        # The measurement finished and was written; the crash came in teardown
        # (vLLM 0.32 sometimes aborts at exit: "terminate called without an
        # active exception"). The numbers stand; the row says what happened.
        row["status"] = "ok"
        fill_metrics(row, proc, result)
        fill_load(row, proc, result)
        figures = True
        warn(
            row,
            "teardown_crash",
            f"{describe_exit(proc.proc.returncode)} after writing its result: {failure_reason(list(proc.reader.tail))}",
        )
    elif proc.proc.returncode != 0:
        reason = failure_reason(list(proc.reader.tail))
        row.update(status="failed", error=f"{describe_exit(proc.proc.returncode)}: {reason}".rstrip(": "))
        if hint := crash_hint(proc.proc.returncode, proc.reader.buffer_lines):
            row["error"] += f"; {hint}"
    elif result is None:
        row.update(status="failed", error=f"engine exited 0 but wrote no valid JSON to {workdir / 'result.json'}")
    else:
        row["status"] = "ok"
        fill_metrics(row, proc, result)
        fill_load(row, proc, result)
        figures = True
    if result is not None and row["status"] in ("ok", "invalid"):
        fill_head(row, result.get("head"))
    return figures


def loaded_after(proc: EngineProcess) -> float | None:
    """Seconds from the engine process's start to its first ``loaded`` mark, as
    the orchestrator saw them: the same span for every engine, whatever each
    imports before or after its own clock starts (vLLM's clock included
    ``import torch, vllm``, llama.cpp's not ``import llama_cpp``)."""
    marks = [t for t, phase in proc.sampler.phase_marks if phase == "loaded"]
    return marks[0] - proc.started if marks else None


def fill_load(row: dict, proc: EngineProcess, result: dict) -> None:
    """load_s from outside; the KV pool against the workload's need."""
    row["load_s"] = loaded_after(proc)
    engine_load = result.get("metrics", {}).get("load_s")
    if engine_load is not None:  # the engine's own clock, kept to compare
        row["engine_config"] = {**(row.get("engine_config") or {}), "engine_load_s": engine_load}
    for rule, message in kv_rules(row):
        warn(row, rule, message)


def fill_metrics(row: dict, proc: EngineProcess, result: dict) -> None:
    row.update({k: v for k, v in result.get("metrics", {}).items() if k in ENGINE_METRICS})
    raws = result.get("iterations") or []
    if raws:
        metrics, per_iteration = run_metrics(row["batch_size"], row["prompt_len"], row["max_tokens"], raws)
        row.update(metrics)
        row[ITERATIONS_KEY] = per_iteration
        fill_audits(row, per_iteration, result.get("fresh"))
    else:
        row.update(status="invalid", error="the engine reported no timed iteration (result.json has no 'iterations')")
    if row["max_tokens"] > 1 and raws and not any(raw.get("step_s") for raw in raws):
        warn(row, "steps_missing", "the engine timed no decode step: no inter-token latency for this run")
    row["patch_report"] = result.get("patch_report")
    fill_engine_log(row, proc)
    row["engine_config"] = result.get("config")
    if row["engine"] == "llamacpp" and row["engine_config"] is not None:
        row["engine_config"]["weight_buffers"] = weight_buffers(proc.reader.buffer_lines)
    row["engine_perf"] = result.get("perf")
    merge_engine_provenance(row, result.get("provenance", {}))
    if row.get("profiled") and row["status"] == "ok":
        fill_profile(row, result.get("profile") or {})


def fill_engine_log(row: dict, proc: EngineProcess) -> None:
    """What the engine's log said of how it ran: how a compiled vLLM start
    got its graph, and each kernel that fell back to a slower one."""
    if row["engine"] == "vllm":
        row["compile_cache"] = compile_cache_state(proc.reader.compile_lines)
    for note in fallback_notes(proc.reader.fallback_lines):
        warn(
            row,
            KERNEL_FALLBACK,
            f"kernel_fallback: the engine said '{note[:300]}': its figures are the fallback path's, "
            "not those of the kernel it meant to use on this CPU (engine.log has the line)",
        )


def fill_profile(row: dict, profile: dict) -> None:
    """A profiled run's ops (one record per step, op and shapes), and the rules
    that read them: a run whose profile is missing, or that shows a bf16
    output head its arm says is quantized, is ``invalid``."""
    try:
        records = read_torch_trace(Path(profile["trace_dir"])) if profile.get("trace_dir") else profile.get("records")
    except (OSError, ValueError) as err:
        row.update(status="invalid", error=f"profiled run: {err}")
        return
    if not records:
        row.update(status="invalid", error="profiled run: the engine traced no step (result.json has no profile)")
        return
    row[OPS_KEY] = records
    row["profile_steps"] = len({r["step"] for r in records})
    head = profile.get("head_shape")  # [vocab, hidden], as the engine loaded the model
    why = head_rule(row, records, *head) if head else None
    if why:
        row.update(status="invalid", error=why)


def fill_sampled(row: dict, proc: EngineProcess, item: PlanItem, method: str, figures: bool, placed: bool) -> None:
    """What the sampler found, merged into the row as each source found it:
    its columns and warnings, in the sources' order, then the first reason
    to doubt the numbers makes an ``ok`` row ``invalid``. ``figures``: the
    engine's own figures are in the row (the tree's memory goes beside
    them); ``placed``: the placement was applied, so binding and
    neighbours are checked (not when planned from another host's topology)."""
    found = proc.sampler.found(RunView(item.slot, method, dict(row), figures, placed))
    for one in found:
        row.update(one.columns)
        for rule, message in one.warnings:
            warn(row, rule, message)
    for one in found:
        if one.invalid and row["status"] == "ok":
            row.update(status="invalid", error=one.invalid)
