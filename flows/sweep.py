"""Prefect flow ``sweep``: a thin recipe over omni's plain functions.

Runs go to the sweep's slots concurrently (:mod:`flows.runs`), or for a spec
with ``hosts:`` to the fleet's hosts (:mod:`flows.fleet`). A flow run in which
any run did not end ``ok`` ends Failed, with what failed in its message; its
good rows are stored all the same.
"""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, get_run_logger
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.states import Completed, Failed

from flows.fleet import run_fleet
from flows.runs import failure_summary, run_items, warn_host_conditions, watch_worker
from omni.errors import OmniError, disk_full
from omni.history.compare import Change, nightly_changes, release_regressions, sweep_history
from omni.report.html import html_report
from omni.report.markdown import summary_markdown
from omni.report.summary import summarize_sweep
from omni.report.summary_json import write_outputs
from omni.report.units import ratio_interval
from omni.store.compaction import CONSOLIDATE_AT, compact_sweep, consolidate
from omni.store.objstore import results_root
from omni.sweep.execute import SKIPPED, run_sweep_rounds
from omni.sweep.prepare import prepare_sweep, write_manifest
from omni.sweep.request import SweepRequest, request_parameters


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
    """This sweep's regressions against the earlier sweeps of its spec on the
    same hardware and engine env (``omni regressions``' rule); none while
    that history is too short."""
    try:
        changes = nightly_changes(results, sweep_name).changes
    except OmniError:  # no ok runs at all: the flow's state already says so
        return []
    return [c for c in changes if c.sweep_id == sweep_id and c.kind == "regression"]


def newest_release_regressions(results: str, sweep_id: str) -> list:
    """Arms on an env following the newest release, worse than the pinned
    baseline in this sweep (omni.history.compare.release_regressions)."""
    try:
        return release_regressions(results, sweep_id)
    except OmniError:  # no ok runs at all: the flow's state already says so
        return []


def regression_summary(regressions: list[Change]) -> str:
    lines = [f"{len(regressions)} regression(s) against the earlier sweeps of this spec:"]
    lines += [
        f"- {c.arm} {c.metric}: x{c.ratio:.3f} {ratio_interval(c.ci_low, c.ci_high)} of the history; "
        f"runs {', '.join(c.run_ids)}; history runs {', '.join(c.history_run_ids)}"
        for c in regressions
    ]
    return "\n".join(lines)


def release_summary(releases) -> str:
    lines = [f"{len(releases)} regression(s) of the newest release against the pinned one, in this sweep:"]
    return "\n".join([*lines, *(c.describe() for c in releases)])


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

    The parameters are :class:`omni.sweep.request.SweepRequest`'s fields, as
    ``omni sweep``'s options: a resume runs only that sweep's runs not stored
    yet; a sysfs root other than ``/`` plans slots on a fixture host's
    topology (placement recorded, not applied); ``fail_on_regression`` (the
    nightly deployment sets it) ends the flow run Failed when this sweep
    regressed against the earlier sweeps of its spec. A spec with ``hosts:``
    sends each host its part as a ``sweep-shard`` flow run (flows/fleet.py).
    """
    watch_worker()
    prepared = prepare_sweep(request)
    log = get_run_logger()
    write_manifest(prepared)
    where = (
        f"hosts {', '.join(prepared.fleet['hosts'])} ({prepared.fleet['mode']})"
        if prepared.fleet
        else f"{len(prepared.slots)} slot(s): " + "; ".join(s.describe() for s in prepared.slots)
    )
    log.info("sweep %s: %d of %d run(s) to go on %s", prepared.sweep_id, len(prepared.items), prepared.planned, where)
    warn_host_conditions(prepared)
    results = request.results
    if prepared.fleet:
        outcomes, lost = run_fleet(prepared)
    else:
        outcomes = run_sweep_rounds(prepared, lambda items: run_items(prepared, items), log.info)
        lost = []
    failed = [o for o in outcomes if o["status"] not in ("ok", SKIPPED)]
    compact(results, prepared.sweep_id)
    log.info("sweep %s: %d run(s), %d not ok", prepared.sweep_id, len(outcomes), len(failed))
    publish_artifacts(prepared.sweep_id, results, outcomes, failed)
    regressions = (
        newest_regressions(results, prepared.loaded.sweep.name, prepared.sweep_id) if request.fail_on_regression else []
    )
    releases = newest_release_regressions(results, prepared.sweep_id) if request.fail_on_regression else []
    summary = {
        "sweep_id": prepared.sweep_id,
        "runs": outcomes,
        "failed": failed,
        "regressions": [asdict(c) for c in regressions],
        "release_regressions": [asdict(c) for c in releases],
        "lost": lost,
    }
    if regressions:
        publish_regressions(prepared.sweep_id, regressions)
        log.warning("%s", regression_summary(regressions))
    if releases:
        log.warning("%s", release_summary(releases))
    if failed or regressions or releases:
        parts = (
            lost
            + ([failure_summary(failed, len(outcomes))] if failed else [])
            + ([regression_summary(regressions)] if regressions else [])
            + ([release_summary(releases)] if releases else [])
        )
        return Failed(message="\n".join(parts), data=summary)
    skipped = sum(o["status"] == SKIPPED for o in outcomes)
    taken = f", {skipped} skipped (another process ran them)" if skipped else ""
    return Completed(message=f"{len(outcomes) - skipped} run(s) ok{taken}", data=summary)
