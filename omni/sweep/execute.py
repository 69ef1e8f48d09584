"""Executing a prepared sweep: one item run on its slot and its row stored
the moment it ends, every item on the slots (pass by pass with the
``passes: auto`` rule's looks), what a flow reports of each run, the printed
table of the result, and a one-run sweep for the peer benchmarks.

The sweep is prepared in :mod:`omni.sweep.prepare`; the Prefect flow in
``flows/sweep.py`` calls both, and so do tests that need no Prefect at all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from omni.cpulist import format_cpulist
from omni.errors import OmniError
from omni.run.plan import PlanItem
from omni.run.progress import BOARD
from omni.run.row import SIDE_KEYS
from omni.run.runner import RunContext, run_arm
from omni.run.schedule import claim_run, hold_cpus, run_concurrently
from omni.store.layout import run_path
from omni.store.reading import load_runs
from omni.store.reading import profiled as is_profiled
from omni.store.writing import write_run, write_side_table
from omni.sweep.prepare import PreparedSweep, prepare_sweep, record_stop, write_manifest
from omni.sweep.request import SweepRequest

if TYPE_CHECKING:
    from omni.stats.sequential import Decision
    from omni.stats.verdicts import ArmTable


SKIPPED = "skipped"  # an outcome, never a row: the run was another process's
TABLE_METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms", "load_s", "rss_anon_tree_mb", "rss_anon_steady_mb")


OUTCOME_KEYS = ("run_id", "arm", "pass_index", "slot_index", "status", "error")


def row_outcome(row: dict, **more) -> dict:
    """What a flow reports of a run: its identity, status and error (from its row)."""
    return {key: row.get(key) for key in OUTCOME_KEYS} | more


def item_outcome(item: PlanItem, status: str, error: str, **more) -> dict:
    """The outcome of a run that has no row of its own (skipped, or not stored)."""
    fields = {"run_id": item.run_id, "arm": item.arm.name, "pass_index": item.pass_index}
    return row_outcome({**fields, "slot_index": item.slot.index, "status": status, "error": error}, **more)


def run_and_store(context: RunContext, item: PlanItem, extra: dict | None = None) -> dict:
    """Run one item on its slot, held exclusively on this host, and write its
    row the moment it ends (STYLE.md 5). A run claimed by another process, or
    already stored, is skipped: an outcome with status ``skipped``, no row."""
    label = f"{item.arm.name} profiled" if item.profiled else item.arm.name
    BOARD.begin(item.run_id, label, item.pass_index, item.slot.index, format_cpulist(item.slot.cpus))
    status = "failed"
    try:
        # claimed until its row is written, then checked: a run another process
        # holds or has stored is not run again (two resumes, a deployment run racing a CLI run)
        with claim_run(item.run_id) as mine:
            taken = None if mine else "another process on this host is running it"
            if taken is None and run_path(context.results_dir, item.sweep_id, item.run_id).exists():
                taken = "another process has stored it"
            if taken:
                status = SKIPPED
                return item_outcome(item, SKIPPED, f"skipped: {taken}")
            with hold_cpus(item.slot.owned):  # its idle SMT siblings too (Slot.siblings)
                row = run_arm(context, item)
            row.update(extra or {})
            BOARD.phase(item.run_id, "storing")
            for kind, key in SIDE_KEYS.items():
                records = row.pop(key, None)
                if records:
                    write_side_table(context.results_dir, kind, row, records)
            write_run(context.results_dir, row)
        status = row["status"]
        return row
    finally:
        BOARD.end(item.run_id, status)


def run_sweep_items(prepared: PreparedSweep, log: Callable[[str], None] = lambda line: None) -> list[dict]:
    """Every item of a prepared sweep on its slots, concurrently, without Prefect
    (``passes: auto``: pass by pass, :func:`run_sweep_rounds`, each look to ``log``)."""
    write_manifest(prepared)
    return run_sweep_rounds(
        prepared,
        lambda items: run_concurrently(items, prepared.slots, lambda item: run_and_store(prepared.context, item)),
        log,
    )


def run_sweep_rounds(
    prepared: PreparedSweep, run: Callable[[list[PlanItem]], list[dict]], log: Callable[[str], None]
) -> list[dict]:
    """Run a prepared sweep's items with ``run`` (on the slots, with or
    without Prefect); the outcomes. A fixed sweep: every item at once.

    ``passes: auto``: pass by pass (a round: one pass of every arm, in plan
    order; the plan holds max_passes of them), and after each round from the
    third on a look: the sweep's summary at that look's levels
    (omni.stats.sequential), stopping when every primary verdict of every arm
    against the baseline is conclusive, at max_passes, or when the next
    round would overrun the budget (measured from this start: a resume has
    its budget anew). Each look is logged; the stop is recorded
    (:func:`record_stop`). A resume continues the rule from the stored rows.
    Profiled passes run after the timed ones.
    """
    sweep = prepared.loaded.sweep
    if not sweep.auto:
        return run(prepared.items)
    outcomes: list[dict] = []
    started, last_round = time.monotonic(), 0.0
    timed = [item for item in prepared.items if not item.profiled]
    first = min((item.pass_index for item in timed), default=prepared.passes)
    for pass_index in range(first, prepared.passes):
        began = time.monotonic()
        outcomes += run([item for item in timed if item.pass_index == pass_index])
        last_round = time.monotonic() - began
        if pass_index + 1 < FIRST_LOOK:
            continue
        out_of_time = sweep.budget is not None and time.monotonic() - started + last_round > sweep.budget
        decision = look(prepared, pass_index + 1, out_of_time)
        if decision is None:  # rows of later passes are stored already (a resume): their look comes
            continue
        log(decision.describe())
        for line in decision.lines:
            log(f"  {line}")
        if decision.stop:
            record_stop(prepared, decision)
            break
    return outcomes + run([item for item in prepared.items if item.profiled])


FIRST_LOOK = 3  # omni.stats.sequential.FIRST_LOOK (imported late: scipy costs seconds on the run path)


def look(prepared: PreparedSweep, passes: int, out_of_time: bool) -> Decision | None:
    """The rule's decision on the stored rows after ``passes`` passes (the
    summary :func:`omni.report.summary.summarize_sweep` gives, at that look's
    levels); None when rows of a later pass are stored too."""
    from omni.report.summary import summarize_sweep
    from omni.stats.sequential import decide

    summary = summarize_sweep(prepared.context.results_dir, prepared.sweep_id)
    if summary.adjustment is None or summary.adjustment.look is None or summary.adjustment.look[0] != passes:
        return None
    keys = [
        (arm, metric)
        for arm in summary.arms
        if arm not in (summary.baseline, summary.control)
        for metric in summary.primary
    ]
    judged = {key: summary.judged.get(key) for key in keys}
    return decide(
        {key: j.comparison if j else None for key, j in judged.items()},
        passes,
        prepared.passes,
        out_of_time,
        {key: j.refused or "no verdict" for key, j in judged.items() if j is None or j.comparison is None},
    )


def sweep_table(results: str | Path, sweep_id: str, primary: tuple[str, ...] = ()) -> ArmTable:
    """The printed table's cells: the ``primary`` metrics, then TABLE_METRICS' others."""
    # here, not at the top: scipy (via stats) and pandas cost seconds, and the
    # run path (prepare, run, store) needs neither, e.g. in a slow test guest
    from omni.stats.verdicts import describe_arms

    frame = load_runs(results, sweep_id=sweep_id).sort_values("order_index")
    frame = frame[~is_profiled(frame)]  # the timed runs: profiled ones are for omni ops
    return describe_arms(frame.to_dict("records"), tuple(dict.fromkeys([*primary, *TABLE_METRICS])))


def run_once(spec: dict, work: Path) -> tuple[dict, str]:
    """A one-run sweep of ``spec`` (a spec as data, one arm, one pass) run in
    this process without Prefect, its results under ``work/results``: the
    row and the sweep's id. What the peer benchmarks run omni's side with."""
    path = work / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    prepared = prepare_sweep(SweepRequest(spec=path, results=work / "results"))
    (item,) = prepared.items
    row = run_and_store(prepared.context, item)
    if row["status"] != "ok":
        raise OmniError(f"omni's run of {spec['name']} ended {row['status']}: {row.get('error')}")
    return row, prepared.sweep_id
