"""Prefect flow ``sweep``: a thin recipe over omni's plain functions.

Runs go to the sweep's slots concurrently (one run per slot, plan order,
:func:`omni.schedule.dispatch`) as tasks on Prefect's thread-pool runner. A
flow run in which any run did not end ``ok`` ends Failed, with what failed in
its message; its good rows are stored all the same.
"""

from __future__ import annotations

import os
from dataclasses import asdict

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE
from prefect.runtime import flow_run
from prefect.states import Completed, Failed

from omni.compaction import CONSOLIDATE_AT, compact_sweep, consolidate
from omni.compare import Change, nightly_changes, sweep_history
from omni.errors import OmniError, disk_full
from omni.objstore import results_root
from omni.reaper import watch_parent
from omni.report import summary_markdown, write_outputs
from omni.report_html import html_report
from omni.request import SweepRequest, request_parameters
from omni.runner import RUNS, PlanItem, RunContext
from omni.schedule import dispatch
from omni.summary import summarize_sweep
from omni.sweep import (
    SKIPPED,
    item_outcome,
    prepare_sweep,
    row_outcome,
    run_and_store,
    take_over,
    write_manifest,
)


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
    else:
        log.info("%s, decode %.1f tok/s", message, row.get("decode_tok_s") or float("nan"))
    return row_outcome(row)


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


def run_items(prepared) -> list[dict]:
    """Every item of a prepared sweep on this host's slots, as Prefect tasks; their outcomes.

    Interrupted meanwhile (a Prefect cancel or crash arrives here as a
    TerminationSignal, Ctrl-C as KeyboardInterrupt), it stops every run still
    going before it lets go: their engines are reaped and they store no row,
    before Prefect records the state, within the worker's grace
    (omni.runner.LiveRuns says what happened without it).
    """
    RUNS.reopen()
    try:
        submitted = dispatch(prepared.items, prepared.slots, lambda item: run_arm_task.submit(prepared.context, item))
        return [_outcome(future, item) for item, future in submitted]
    except BaseException:
        # no log line first: after a worker's death the first one to its pipe raises SystemExit (rich)
        RUNS.interrupt()
        raise


def watch_worker() -> None:
    """A flow run a worker started ends when its worker dies, Crashed, its engines
    reaped (omni.reaper.watch_parent). Prefect sets PREFECT__FLOW_RUN_ID in the
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


def publish_artifacts(sweep_id: str, results: str, outcomes: list[dict], failed: list[dict]) -> None:
    """The noise-aware summary (also written to results/summaries/) as Markdown,
    each arm's verdicts against the baseline and every run's outcome as tables."""
    key = "".join(c if c.isalnum() else "-" for c in sweep_id.lower())
    rows_dir = results_root(results) / "runs" / f"sweep={sweep_id}"
    text = [f"{len(outcomes)} run(s) in this flow run, {len(failed)} not ok; rows in `{rows_dir}`", ""]
    if failed:
        text += [failure_summary(failed, len(outcomes)), ""]
    try:
        summary = summarize_sweep(results, sweep_id)
        paths = write_outputs(results, summary, html_report(summary, sweep_history(results, summary)))
    except (OmniError, OSError) as error:  # nothing stored, a full disk: say so, the flow's state says the rest
        create_markdown_artifact("\n".join(text + [disk_full(error) or str(error)]), key=f"summary-{key}")
        return
    text += [summary_markdown(summary), f"Report: `{paths['html']}`"]
    create_markdown_artifact("\n".join(text), key=f"summary-{key}", description=f"summary of {sweep_id}")
    create_link_artifact(paths["html"].resolve().as_uri(), link_text=f"HTML report of {sweep_id}", key=f"report-{key}")
    verdicts = [
        {
            "arm": arm,
            "metric": metric,
            "verdict": j.refused or (j.comparison.verdict if j.comparison else "-"),
            "ratio": j.comparison.ratio if j.comparison else None,
            "ci_low": j.comparison.ci_low if j.comparison else None,
            "ci_high": j.comparison.ci_high if j.comparison else None,
        }
        for (arm, metric), j in summary.judged.items()
    ]
    if verdicts:
        create_table_artifact(verdicts, key=f"verdicts-{key}", description=f"arms against {summary.baseline}")
    create_table_artifact(outcomes, key=f"runs-{key}", description=f"every run of {sweep_id}")


def compact(results: str, sweep_id: str) -> None:
    """The sweep's rows into one compacted file, so later reads open one file,
    not one per run; a failure costs speed only (omni compact retries it)."""
    log = get_run_logger()
    try:
        part = compact_sweep(results, sweep_id)
        merged = consolidate(results)
    except (OmniError, OSError) as error:  # OSError: a full disk, say; the run files are the results
        log.warning("sweep %s not compacted (its run files stay complete; run omni compact): %s", sweep_id, error)
        return
    if part is not None:
        log.info("sweep %s compacted into %s", sweep_id, part)
    if merged is not None:
        log.info("the compacted parts of %d sweeps or more consolidated into %s", CONSOLIDATE_AT, merged)


def newest_regressions(results: str, sweep_name: str, sweep_id: str) -> list[Change]:
    """This sweep's regressions against the earlier sweeps of its spec
    (``omni regressions``' rule); none while the history is too short."""
    try:
        changes, _ = nightly_changes(results, sweep_name)
    except OmniError:  # no ok runs at all: the flow's state already says so
        return []
    return [c for c in changes if c.sweep_id == sweep_id and c.kind == "regression"]


def regression_summary(regressions: list[Change]) -> str:
    lines = [f"{len(regressions)} regression(s) against the earlier sweeps of this spec:"]
    lines += [
        f"- {c.arm} {c.metric}: x{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}] of the history; "
        f"runs {', '.join(c.run_ids)}; history runs {', '.join(c.history_run_ids)}"
        for c in regressions
    ]
    return "\n".join(lines)


def publish_regressions(sweep_id: str, regressions: list[Change]) -> None:
    key = "".join(c if c.isalnum() else "-" for c in sweep_id.lower())
    rows = [
        {
            "arm": c.arm,
            "metric": c.metric,
            "ratio": c.ratio,
            "ci_low": c.ci_low,
            "ci_high": c.ci_high,
            "median": c.median,
            "history_median": c.history_median,
            "drift": c.drift,
            "run_ids": ", ".join(c.run_ids),
            "history_run_ids": ", ".join(c.history_run_ids),
        }
        for c in regressions
    ]
    create_table_artifact(rows, key=f"regressions-{key}", description=f"regressions of {sweep_id}")


@flow(name="sweep", log_prints=False, validate_parameters=False)  # SweepRequest validates them
@request_parameters
def sweep(request: SweepRequest):
    """Load the spec, plan it, run every (arm, pass) on the free slots, tabulate.

    The parameters are :class:`omni.request.SweepRequest`'s fields, as
    ``omni sweep``'s options: a resume runs only that sweep's runs not stored
    yet; a sysfs root other than ``/`` plans slots on a fixture host's
    topology (placement recorded, not applied); ``fail_on_regression`` (the
    nightly deployment sets it) ends the flow run Failed when this sweep
    regressed against the earlier sweeps of its spec. A spec with ``hosts:``
    sends each host its part as a ``sweep-shard`` flow run (flows/fleet.py).
    """
    watch_worker()
    prepared = take_over(request) or prepare_sweep(request)
    log = get_run_logger()
    write_manifest(prepared)
    where = (
        f"hosts {', '.join(prepared.fleet['hosts'])} ({prepared.fleet['mode']})"
        if prepared.fleet
        else f"{len(prepared.slots)} slot(s): " + "; ".join(s.describe() for s in prepared.slots)
    )
    log.info("sweep %s: %d of %d run(s) to go on %s", prepared.sweep_id, len(prepared.items), prepared.planned, where)
    results = request.results
    if prepared.fleet:
        from flows.fleet import run_fleet

        outcomes, lost = run_fleet(prepared)
    else:
        outcomes, lost = run_items(prepared), []
    failed = [o for o in outcomes if o["status"] not in ("ok", SKIPPED)]
    compact(results, prepared.sweep_id)
    log.info("sweep %s: %d run(s), %d not ok", prepared.sweep_id, len(outcomes), len(failed))
    publish_artifacts(prepared.sweep_id, results, outcomes, failed)
    regressions = (
        newest_regressions(results, prepared.loaded.sweep.name, prepared.sweep_id) if request.fail_on_regression else []
    )
    summary = {
        "sweep_id": prepared.sweep_id,
        "runs": outcomes,
        "failed": failed,
        "regressions": [asdict(c) for c in regressions],
        "lost": lost,
    }
    if regressions:
        publish_regressions(prepared.sweep_id, regressions)
        log.warning("%s", regression_summary(regressions))
    if failed or regressions:
        parts = (
            lost
            + ([failure_summary(failed, len(outcomes))] if failed else [])
            + ([regression_summary(regressions)] if regressions else [])
        )
        return Failed(message="\n".join(parts), data=summary)
    skipped = sum(o["status"] == SKIPPED for o in outcomes)
    taken = f", {skipped} skipped (another process ran them)" if skipped else ""
    return Completed(message=f"{len(outcomes) - skipped} run(s) ok{taken}", data=summary)
