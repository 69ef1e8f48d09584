"""A prepared sweep's runs on this host's slots as Prefect tasks, for the
``sweep`` flow and a fleet host's ``sweep-shard`` flow.

Runs go to the slots concurrently (one run per slot, plan order,
:func:`omni.run.schedule.dispatch`) as tasks on Prefect's thread-pool runner.
"""

from __future__ import annotations

import json
import os

from prefect import get_run_logger, task
from prefect.cache_policies import NONE
from prefect.runtime import flow_run

from omni.errors import disk_full
from omni.host.conditions import check, moving_conditions
from omni.run.engine_process import RUNS
from omni.run.plan import PlanItem
from omni.run.reaper import watch_parent
from omni.run.runner import RunContext
from omni.run.schedule import dispatch
from omni.sweep.execute import SKIPPED, item_outcome, row_outcome, run_and_store


@task(name="run-arm", cache_policy=NONE, task_run_name="{item.arm.name}-pass{item.pass_index}-slot{item.slot.index}")
def run_arm_task(context: RunContext, item: PlanItem) -> dict:
    """Run one (arm, pass) and store its row; a bad run is a row, not an exception."""
    row = run_and_store(context, item, {"prefect_flow_run_id": flow_run.get_id()})
    log = get_run_logger()
    message = f"{item.arm.name} pass {item.pass_index} on {item.slot.describe()}: {row['status']}"
    if row["status"] == SKIPPED:
        log.info("%s: %s", message, row.get("error"))
    elif row["status"] != "ok":
        log.warning("%s: %s", message, row.get("error"))
    elif row.get("load_levels") is not None:  # a serving run: levels, not one batch
        log.info("%s, %d load level(s), %s", message, row["load_levels"], capacity_text(row))
    else:
        log.info("%s, decode %.1f tok/s", message, row.get("decode_tok_s") or float("nan"))
    return row_outcome(row)


def capacity_text(row: dict) -> str:
    """A serving run's capacity per kind of level, a figure or its bound."""
    bounds = row.get("capacity_bounds") or {}
    bounds = json.loads(bounds) if isinstance(bounds, str) else bounds
    parts = []
    for kind in ("concurrency", "rate"):
        value = row.get(f"capacity_{kind}")
        if value is not None:
            parts.append(f"capacity {value:.3g} ({kind})")
        elif bounds.get(kind) == "not_established":
            parts.append(f"capacity not established ({kind}: too few requests a level for the SLO's percentile)")
        elif kind in bounds:
            parts.append(f"capacity {bounds[kind]} the {kind} levels")
    return ", ".join(parts) or "no capacity"


def _outcome(future, item: PlanItem) -> dict:
    """A task that raised (say, the results disk is full) is a failed outcome too."""
    try:
        return future.result()
    except Exception as error:  # noqa: BLE001 - reported, and the flow ends Failed
        return error_outcome(item, error)


def error_outcome(item: PlanItem, error: BaseException) -> dict:
    """The outcome of a run whose row could not be stored: nothing of it is in
    the results, so ``--resume`` runs it again."""
    full = disk_full(error)
    why = f"{full}: not stored, free space and --resume" if full else f"{type(error).__name__}: {error}"
    return item_outcome(item, "error", why)


def run_items(prepared, items: list[PlanItem] | None = None) -> list[dict]:
    """Every item of a prepared sweep (or ``items`` of it: a round of a
    ``passes: auto`` sweep) on this host's slots, as Prefect tasks; their outcomes.

    Interrupted meanwhile (a Prefect cancel or crash arrives here as a
    TerminationSignal, Ctrl-C as KeyboardInterrupt), it stops every run still
    going before it lets go: their engines are reaped and they store no row,
    before Prefect records the state, within the worker's grace
    (omni.run.engine_process.LiveRuns says what happened without it).
    """
    RUNS.reopen()
    try:
        items = prepared.items if items is None else items
        submitted = dispatch(items, prepared.slots, lambda item: run_arm_task.submit(prepared.context, item))
        return [_outcome(future, item) for item, future in submitted]
    except BaseException:
        # no log line first: after a worker's death the first one to its pipe raises SystemExit (rich)
        RUNS.interrupt()
        raise


def start_warnings(prepared) -> list[str]:
    """This host's settings that would move the sweep's numbers (omni.host.conditions),
    the slots' CPUs asked about; none for a fleet's coordinator (each host
    warns of its own) or a fixture topology (not this host's)."""
    if prepared.fleet or prepared.context.simulate_placement:
        return []
    cpus = sorted({cpu for slot in prepared.slots for cpu in (*slot.cpus, *slot.siblings, *slot.client)})
    return moving_conditions(check("/", cpus))


def warn_host_conditions(prepared) -> None:
    log = get_run_logger()
    for line in start_warnings(prepared):
        log.warning("host condition that can move this sweep's numbers: %s", line)


def watch_worker() -> None:
    """A flow run a worker started ends when its worker dies, Crashed, its engines
    reaped (omni.run.reaper.watch_parent). Prefect sets PREFECT__FLOW_RUN_ID in the
    process a worker (or ``omni serve``) starts; ``omni sweep`` runs its flow in
    its own process, where a watchdog per run does that job."""
    if not os.environ.get("PREFECT__FLOW_RUN_ID"):
        return
    log = get_run_logger()
    watch_parent(
        lambda ppid: log.error(
            "the worker that started this flow run (pid %d) is gone: stopping its runs (SIGTERM to this process, pid %d); "
            "this flow run ends Crashed, --resume runs what it did not store",
            ppid,
            os.getpid(),
        )
    )


def failure_summary(failed: list[dict], total: int) -> str:
    lines = [f"{len(failed)} of {total} run(s) did not end ok:"]
    lines += [f"- {o['arm']} pass {o['pass_index']} ({o['run_id']}): {o['status']}: {o['error']}" for o in failed]
    return "\n".join(lines)
