"""Prefect flow ``sweep``: a thin recipe over omni's plain functions."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE
from prefect.runtime import flow_run

from omni.runner import PlanItem, RunContext
from omni.sweep import format_table, prepare_sweep, run_and_store, sweep_table


@task(name="run-arm", cache_policy=NONE, task_run_name="{item.arm.name}-pass{item.pass_index}")
def run_arm_task(context: RunContext, item: PlanItem) -> dict:
    """Run one (arm, pass) and store its row; a bad run is a row, not an exception."""
    row = run_and_store(context, item, {"prefect_flow_run_id": flow_run.get_id()})
    log = get_run_logger()
    message = f"{item.arm.name} pass {item.pass_index}: {row['status']}"
    if row["status"] != "ok":
        log.warning("%s: %s", message, row.get("error"))
    else:
        log.info("%s, decode %.1f tok/s", message, row.get("decode_tok_s") or float("nan"))
    return {k: row.get(k) for k in ("run_id", "arm", "pass_index", "status", "error")}


@flow(name="sweep", log_prints=False)
def sweep(
    spec: str,
    passes: int | None = None,
    results: str = "results",
    force: bool = False,
    sweep_id: str | None = None,
) -> dict:
    """Load the spec, plan it, run every (arm, pass) in order, tabulate."""
    prepared = prepare_sweep(spec, passes=passes, results=results, force=force, sweep_id=sweep_id)
    outcomes = [run_arm_task(prepared.context, item) for item in prepared.items]
    table = format_table(sweep_table(results, prepared.sweep_id))
    get_run_logger().info("sweep %s\n%s", prepared.sweep_id, table)
    return {
        "sweep_id": prepared.sweep_id,
        "runs": outcomes,
        "failed": [o for o in outcomes if o["status"] != "ok"],
        "table": table,
    }
