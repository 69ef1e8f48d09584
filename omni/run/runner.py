"""One run: check its slot, run its engine, and turn what happened into a row.

The engine process itself (its command line, subprocess tree and log) is
:mod:`omni.run.engine_process`. Here: the row's identity and placement, the busy
check, the outcome and metrics read from what the engine wrote, the binding
seen, and the validity rules that mark a run's numbers as not to be trusted.
Whatever happened becomes one row: a failed run is a row too.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from omni.cpulist import format_cpulist
from omni.engines.llamacpp import crash_hint, weight_buffers
from omni.engines.vllm import compile_cache_state, fallback_notes
from omni.envs.resources import ArmResources, env_name
from omni.errors import naming
from omni.host.conditions import host_conditions
from omni.host.placement import INTERFERENCE_BOUND_PCT, REMOTE_WARN_LOCAL, explain_busy, measure_busy, verify_binding
from omni.host.provenance import behaviour_env, merge_engine_provenance
from omni.measure.audit import audit_repeats, audit_tokens
from omni.measure.heads import DENSE_HEAD, HEAD_UNCHECKED, check_head
from omni.measure.iterations import partial_step_counts, run_metrics
from omni.measure.kv import kv_overprovisioned
from omni.measure.mempolicy import describe_nodes, node_list
from omni.measure.ops import head_rule, read_torch_trace
from omni.measure.sampler import MIN_WINDOW_S, TreeSampler, summarize, summarize_interference, summarize_telemetry
from omni.models.factory import PRESETS
from omni.run.engine_process import (
    RUNS,
    EngineProcess,
    RunInterrupted,
    describe_exit,
    engine_argv,
    engine_env,
    failure_reason,
)
from omni.run.plan import PlanItem, SlotOverride
from omni.run.progress import BOARD
from omni.serving.run import LEVELS_KEY, REQUESTS_KEY, run_serving, server_provenance
from omni.spec import Arm, arm_hash, canonical_arm_json
from omni.store.objstore import ResultsPath, local_scratch
from omni.vllm_plugin import names as vllm_names

# what the engine reports as metrics; the timed ones come as raw iterations (omni.measure.iterations)
# (load_s is timed by the orchestrator, fill_load; the engine's own figure goes to engine_config)
ENGINE_METRICS = ("kv_cache_bytes_effective", "kv_cache_bytes_needed", "profile_overhead")
# a row's side-table records, taken off by run_and_store into results/<table>
ITERATIONS_KEY = "_iterations"
OPS_KEY = "_ops"
SIDE_KEYS = {"iterations": ITERATIONS_KEY, "ops": OPS_KEY, "levels": LEVELS_KEY, "requests": REQUESTS_KEY}


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


def read_result(path: Path) -> dict | None:
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) else None


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
        "engine_env": env_name(arm),
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


KV_ENGINES = ("vllm", "llamacpp")
# VLLM_CPU_KVCACHE_SPACE's default, in GiB: vLLM's pool when the arm sets no kv_cache_bytes
VLLM_DEFAULT_KV_GIB = 4


def validity_rules(arm: Arm) -> list[tuple[str, str]]:
    """Named reasons to doubt an arm's numbers before it even runs (the KV
    pool against the workload's need is checked after, :func:`kv_rules`)."""
    found = []
    if arm.engine in KV_ENGINES and arm.context_len is None:
        found.append(
            (
                "context_len_unset",
                "context_len is unset: the engine sizes its KV cache by its own default, "
                "allocated and never touched, so memory numbers mean nothing; set context_len",
            )
        )
    if arm.engine == "vllm" and not arm.kv_cache_bytes and "VLLM_CPU_KVCACHE_SPACE" not in arm.env:
        found.append(
            (
                "kv_cache_default",
                f"kv_cache_bytes is unset: vLLM allocates its default {VLLM_DEFAULT_KV_GIB} GiB KV pool "
                "(VLLM_CPU_KVCACHE_SPACE) whatever the workload needs, so its memory is mostly that pool; "
                "set kv_cache_bytes near batch_size x context_len x the model's KV bytes per token",
            )
        )
    if arm.prompt_len <= 1:
        found.append(
            (
                "prompt_len_le_1",
                f"prompt_len={arm.prompt_len}: a profile of an empty attention cache, "
                "not of attention over a prompt; use prompt_len >= 2",
            )
        )
    return found


def kv_rules(row: dict) -> list[tuple[str, str]]:
    """The run's KV pool against its workload's need, once the engine reported both."""
    why = kv_overprovisioned(row.get("kv_cache_bytes_needed"), row.get("kv_cache_bytes_effective"))
    return [("kv_overprovisioned", f"kv_overprovisioned: {why}")] if why else []


KERNEL_FALLBACK = "kernel_fallback"


def warn(row: dict, rule: str, message: str) -> None:
    row["warnings"].append(message)
    row["warning_rules"].append(rule)


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


def fill_outcome(row: dict, proc: EngineProcess, finished_in_time: bool, timeout_s: float, workdir: Path) -> None:
    """Status, error and metrics from how the engine ended and what it wrote."""
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
    if not finished_in_time:
        row.update(status="timeout", error=f"no result within timeout_s={timeout_s:g}; killed the run's processes")
    elif proc.proc.returncode != 0 and result is not None and "done" in proc.sampler.phase_names():
        # The measurement finished and was written; the crash came in teardown
        # (vLLM 0.32 sometimes aborts at exit: "terminate called without an
        # active exception"). The numbers stand; the row says what happened.
        row["status"] = "ok"
        fill_metrics(row, proc, result)
        fill_load(row, proc, result)
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
    if result is not None and row["status"] in ("ok", "invalid"):
        fill_head(row, result.get("head"))


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
    row.update(summarize(proc.sampler))
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


def fill_audits(row: dict, per_iteration: list[dict], fresh: dict | None) -> None:
    """The run's own audits (omni.measure.audit): a sequence that generated other than
    max_tokens makes the run ``invalid`` (its rates assume max_tokens); timed
    repeats faster than their first sight beyond noise are a warning, unless
    the arm turned a prefix cache on, when they are what it asked for; steps
    that served only part of the batch are a warning (not_lock_step)."""
    tokens = audit_tokens(row["max_tokens"], per_iteration)
    row["tokens_mismatch_iterations"] = tokens.mismatched
    if tokens.mismatched:
        iteration, asked, got = tokens.first
        message = (
            f"tokens_mismatch: in {tokens.mismatched} of {len(per_iteration)} timed iteration(s) a sequence "
            f"generated other than max_tokens; first in iteration {iteration}: asked {asked} per sequence, "
            f"got {list(got)}"
        )
        warn(row, "tokens_mismatch", message)
        if row["status"] == "ok":
            row.update(status="invalid", error=message)
    partial, steps, iterations = partial_step_counts(per_iteration)
    if partial:
        warn(
            row,
            "not_lock_step",
            f"not_lock_step: {partial} of {steps} engine steps, in {iterations} of {len(per_iteration)} timed "
            "iteration(s), gave a token to fewer than all sequences not yet done (a prefill chunked over steps: "
            "vLLM's max_num_batched_tokens below batch x prompt_len?): the per-request TTFT, TPOT and ITL are "
            "exact; ttft_ms is the last sequence's first token, and decode_tok_s spans steps that also prefilled",
        )
    fresh_ms = fresh["ttft_s"] * 1000 if fresh and fresh.get("ttft_s") else None
    repeats = audit_repeats([p["ttft_ms"] for p in per_iteration], fresh_ms)
    row["audit_fresh_ttft_ms"] = fresh_ms
    row["audit_repeat_ttft_ratio"], row["audit_repeat_ttft_cv"] = repeats.ratio, repeats.cv
    if repeats.faster and not (row.get("engine_params") or {}).get("prefix_caching"):
        warn(
            row,
            "repeat_faster",
            f"repeat_faster: timed iterations 1..{len(per_iteration) - 1} took x{repeats.ratio:.2f} "
            f"the time to first token of their first sight (iteration 0, or fresh prompts after them; below "
            f"x{repeats.threshold:.2f}, noise {repeats.cv:.1%}): a cache served the repeats, so TTFT and prefill "
            "rates measure cache hits",
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


def fill_head(row: dict, head: dict | None) -> None:
    """The output head as the engine loaded it, what was claimed about it and
    by whom (omni.measure.heads): a quantized claim met by a dense head makes the run
    ``invalid`` (dense_head), profiled or not. An engine that reports no head
    (synthetic) leaves the columns null."""
    if not head:
        return
    params = row.get("engine_params") or {}  # a dict here: base_row's, before the store dumps it to JSON
    check = check_head(row["engine"], row.get("quantization"), params, row.get("model") in PRESETS, head)
    row["head_weight_type"] = check.weight_type
    row["head_claim"] = check.claim.describe() if check.claim else None
    row["quantization_seen"] = check.quantization_seen
    if check.unchecked:
        warn(row, HEAD_UNCHECKED, check.unchecked)
    if check.contradiction:
        warn(row, DENSE_HEAD, check.contradiction)
        if row["status"] == "ok":
            row.update(status="invalid", error=check.contradiction)


def fill_binding(row: dict, proc: EngineProcess, item: PlanItem, method: str) -> None:
    """The binding the tree actually had, its memory per node, and the
    interference it met. Memory per node is trusted from a steady-state
    ``numa_maps`` read of every process only: an earlier read may predate the
    engine touching its memory, so without one the per-node columns are null
    and ``memory_binding_verified`` false, and no rule reads them."""
    sampler = proc.sampler
    seen = {**sampler.seen, **{f"{pid}/{tid}": t for (pid, tid), t in sampler.threads_seen.items()}}
    check = verify_binding(seen, item.slot, membind_expected=method == "numactl", numa=sampler.numa_seen)
    unread = sampler.numa_not_steady()
    steady = unread == [] and bool(sampler.numa_seen)
    row.update(
        binding_method=method,
        binding_ok=check.ok,
        binding_procs_checked=check.procs_checked,
        cpus_allowed_seen=check.cpus_seen,
        mems_allowed_seen=check.mems_seen,
        threads_checked=len(sampler.threads_seen),
        mempolicies_seen=check.policies_seen,
        mem_anon_kib_by_node=node_list(check.anon_kib_by_node) if steady else None,
        mem_file_kib_by_node=node_list(check.file_kib_by_node) if steady else None,
        mem_local_fraction=check.local_fraction if steady else None,
        mem_file_local_fraction=check.file_local_fraction if steady else None,
        memory_binding_verified=check.memory_checked and steady,
        numa_by_proc=check.per_process,
        numa_maps_reads=sampler.numa_reads,
        numa_maps_cpu_ms=sampler.numa_cpu_s * 1000,
    )
    if method == "numactl" and not check.memory_checked and row["status"] == "ok":
        warn(
            row,
            "memory_policy_unverified",
            "no /proc/PID/numa_maps could be read for the run's processes: "
            "the memory binding was applied by numactl but not verified (kernel without CONFIG_NUMA?)",
        )
    if steady and check.local_fraction is not None and check.local_fraction < REMOTE_WARN_LOCAL:
        warn(
            row,
            "remote_memory",
            f"only {check.local_fraction:.0%} of the tree's anonymous memory sits on the slot's "
            f"node(s) {format_cpulist(item.slot.mems)} ({describe_nodes(check.anon_kib_by_node)}): its memory "
            "mostly lives off its node, so its speed is that of remote memory",
        )
    row["numa_steady_missing"] = None if unread is None else len(unread)
    if unread:
        names = ", ".join(f"{p.name} ({p.pid})" for p in unread)
        warn(
            row,
            "numa_not_steady",
            f"{len(unread)} process(es) got no numa_maps read in steady state ({names}): "
            "their memory per node may predate their touching it, so mem_anon_kib_by_node, mem_local_fraction "
            "and the remote_memory rule are left out and memory_binding_verified is false; the steady "
            "window (params.hold_s) was too short for this host to read them",
        )
    fill_interference(row, sampler, item)
    if sampler.error and row["status"] == "ok":
        row.update(status="invalid", error=sampler.error)
    if check.violations and row["status"] == "ok":
        row.update(status="invalid", error="process ran outside its slot: " + "; ".join(check.violations))


def fill_interference(row: dict, sampler: TreeSampler, item: PlanItem) -> None:
    """What else ran on the slot's CPUs (and its idle SMT siblings) during the
    timed part, and how long the run's threads waited for a CPU; a neighbour
    above :data:`INTERFERENCE_BOUND_PCT` of one CPU is warning ``interference``."""
    found = summarize_interference(sampler.interference, (*item.slot.cpus, *item.slot.siblings))
    row.update(
        foreign_cpu_peak_pct=found.peak_pct,
        foreign_cpu_mean_pct=found.mean_pct,
        run_delay_ms=found.run_delay_ms,
        run_delay_ms_per_s=found.run_delay_ms_per_s,
        interference_samples=found.samples,
        interference_cpu_ms=sampler.interference_cpu_s * 1000,
    )
    fill_telemetry(row, sampler, item)
    if found.peak_pct is not None and found.peak_pct > INTERFERENCE_BOUND_PCT:
        sibling = " (an idle SMT sibling of the slot)" if found.peak_cpu in item.slot.siblings else ""
        warn(
            row,
            "interference",
            f"interference: during the timed part, CPU {found.peak_cpu}{sibling} spent {found.peak_pct:.0f}% of "
            f"a {MIN_WINDOW_S:g} s+ window on work not the run's (bound {INTERFERENCE_BOUND_PCT:g}%; "
            f"{found.mean_pct:.1f}% of the slot's CPUs over {found.window_s:.1f} s; the run's threads waited "
            f"{found.run_delay_ms_per_s:.0f} ms/s for a CPU): a thread an OpenMP barrier waits on was slowed, "
            "so every thread was",
        )


def fill_telemetry(row: dict, sampler: TreeSampler, item: PlanItem) -> None:
    """What else moved during the timed part: switches, migrations, faults,
    steal, irq, frequency and energy, over the same window as the interference."""
    found = summarize_telemetry(
        sampler.interference,
        (*item.slot.cpus, *item.slot.siblings),
        list(sampler.threads.values()),
        sampler.rapl_wraps(),
    )
    power = found.energy_j / found.window_s if found.energy_j is not None and found.window_s else None
    tokens = (row.get("batch_size") or 0) * (row.get("max_tokens") or 0)
    row.update(
        telemetry_window_s=found.window_s,
        ctx_switches_voluntary=found.nvcsw,
        ctx_switches_involuntary=found.nivcsw,
        cpu_migrations=found.migrations,
        minor_faults=found.minflt,
        major_faults=found.majflt,
        steal_pct=found.steal_pct,
        irq_pct=found.irq_pct,
        cpu_freq_mhz=found.freq_mhz,
        cpu_freq_min_mhz=found.freq_min_mhz,
        energy_j=found.energy_j,
        power_w=power,
        joules_per_token=power * row["e2e_s"] / tokens if power and row.get("e2e_s") and tokens else None,
        thread_sched=found.threads or None,
    )


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
    if row["status"] in ("ok", "invalid"):
        row.update(summarize(proc.sampler))
        fill_engine_log(row, proc)
        for rule, message in kv_rules(row):
            warn(row, rule, message)
        fill_head(row, row.pop("_head", None))
    row.pop("_head", None)
    fill_binding(row, proc, item, method)
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
        model_digest=res.model_digest, engine_env_key=res.env_key, engine_env_freeze_sha256=res.env_freeze_sha256
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
    env = engine_env(item)
    row["env_vars"] = behaviour_env(env)  # what omni passed; the engine's own report replaces it
    BOARD.phase(item.run_id, "starting the engine")
    with EngineProcess(argv, env, item.run_id, workdir / "engine.log", item.slot.cpus) as proc:
        finished = proc.wait(ctx.timeout_s)
        BOARD.phase(item.run_id, "reaping")
    fill_outcome(row, proc, finished, ctx.timeout_s, workdir)
    if not ctx.simulate_placement:
        fill_binding(row, proc, item, method)
    else:
        row["binding_method"] = method
    row["finished_at"] = now_utc()
    return row
