"""``omni`` command line. User errors (OmniError) are caught here, once."""

from __future__ import annotations

import atexit
import gc
import os
import sys
from pathlib import Path

import typer

from flows.prefect_server import start_ephemeral_server, temporary_api_url
from omni import REPO_ROOT
from omni.cli import render
from omni.cli.bisect import bisect
from omni.cli.console import err, out, show
from omni.cli.fleet import hosts, serve, worker
from omni.cli.flowrun import flow_on, prefect_defaults, quiet_prefect, run_local_sweep
from omni.cli.host import host_app
from omni.cli.options import (
    ACROSS_HARDWARE_OPT,
    METRIC_OPT,
    RESULTS_OPT,
    RETRACTED_OPT,
    SWEEP_ID_ARG,
    run_or_file,
    stored_id,
    stored_ids,
    sweep_name,
    sysfs_option,
    usage_line,
    words,
)
from omni.cli.reproduce import reproduce
from omni.cli.setup import env_app, models_app, stack_app
from omni.cli.simulate import simulate
from omni.errors import OmniError, causes, disk_full
from omni.store.objstore import results_root

app = typer.Typer(add_completion=False, no_args_is_help=True, help="NUMA-pinned benchmark sweeps of CPU LLM inference.")

EXIT_RUNS_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_INFRASTRUCTURE = 3  # the machinery failed (Prefect API, disk), not the runs or the input
DEBUG = {"traceback": False}


@app.callback()
def _global_options(
    debug: bool = typer.Option(False, "--debug", help="show the traceback of an infrastructure failure"),
) -> None:
    DEBUG["traceback"] = debug


def infrastructure_problem(error: BaseException) -> str | None:
    """One line saying what failed and what to do, for failures of the
    machinery around the runs; None for anything else (a bug: traceback)."""
    full = disk_full(error)
    if full:
        return f"{full}: free space there, then `omni sweep --resume SWEEP_ID` runs what is not stored (stored rows are kept)"
    for link in causes(error):
        text = f"{type(link).__module__}.{type(link).__name__}: {link}"
        if "httpx" in text or "ephemeral Prefect API" in text or "PrefectHTTPStatusError" in text:
            ours = temporary_api_url()  # PREFECT_API_URL names it, but the user did not set that
            api = f"Prefect's ephemeral server at {ours}" if ours else os.environ.get("PREFECT_API_URL")
            api = api or "Prefect's ephemeral server"
            return (
                f"cannot reach the Prefect API ({api}): {str(link).splitlines()[0][:200]}. Start the server "
                "(omni stack up) or unset PREFECT_API_URL to run without one; on a slow machine raise "
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
            )
    return None


@app.command()
def validate(
    spec: Path = typer.Argument(..., exists=True, dir_okay=False, help="sweep spec, YAML or JSON"),
    as_json: bool = typer.Option(False, "--json", help="the settings and resolved arms as one JSON object"),
) -> None:
    """Validate SPEC and print its settings and every arm it expands to, with
    the defaults omni fills in (marked) and the patches each arm applies."""
    from omni.spec import load_spec

    loaded = load_spec(spec)
    print(render.arms_json(loaded)) if as_json else show(render.arms(loaded))


def print_plan(prepared, results: str) -> None:
    from omni.sweep.prepare import describe_plan

    ctx = prepared.context
    rows = describe_plan(
        prepared.items, prepared.slots, results_root(results), ctx.resources, ctx.simulate_placement, ctx.seed
    )
    show(render.plan(prepared, rows))


def print_arm_table(sweep_id: str, results: str) -> None:
    """Per arm and metric: n (of all runs), median, min, max over ok runs;
    the spec's primary metrics first, a VOID arm marked."""
    from omni.report.summary import sweep_primary_and_void
    from omni.sweep.execute import sweep_table

    primary, void = sweep_primary_and_void(results, sweep_id)
    show(render.arm_table(sweep_id, sweep_table(results, sweep_id, primary), primary, void))


def print_verdicts(sweep_id: str, results: str) -> None:
    """Each arm against the baseline on the headline metrics, and the control."""
    from omni.report.markdown import serving_markdown, verdicts_markdown
    from omni.report.summary import summarize_sweep

    summary = summarize_sweep(results, sweep_id)
    if summary.judged:
        show(verdicts_markdown(summary))
    if summary.serving is not None:
        show("\n".join(serving_markdown(summary.serving)))


@app.command("sweep")
def sweep_command(
    spec: Path | None = typer.Argument(None, help="sweep spec, YAML or JSON (optional with --resume)"),
    passes: int | None = typer.Option(None, help="override the spec's passes"),
    results: str = RESULTS_OPT,
    resume: str | None = typer.Option(None, help="SWEEP_ID: run only that sweep's runs not stored yet"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan (commands, placements) and run nothing"),
    force: bool = typer.Option(False, "--force", help="run even when the slot's cores are busy (recorded)"),
    sysfs_root: Path = sysfs_option(
        "read the topology under this root (a fixture of another host): placement planned, not applied"
    ),
    cores: list[str] | None = typer.Option(
        None, "--cores", help="CPU list of one slot, e.g. 56-79 (repeat for more slots): replaces the spec's slots"
    ),
    node: int | None = typer.Option(None, "--node", help="put the spec's slots on this NUMA node"),
    straddle: bool = typer.Option(False, "--straddle", help="allow a --cores list across nodes (memory bound to all)"),
    busy_wait: float | None = typer.Option(
        None,
        "--busy-wait",
        help="seconds a run waits for busy slot cores before it is refused (spec: busy_wait_s)",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="no live progress and no tables: the rows' path and failures"),
    as_json: bool = typer.Option(
        False, "--json", help="print one JSON object (sweep, runs, statuses) and nothing else"
    ),
    force_hosts: bool = typer.Option(False, "--force-hosts", help="fleet: split over hosts that differ (recorded)"),
    replace_host: list[str] | None = typer.Option(
        None, "--replace-host", help="fleet, with --resume: OLD=NEW runs host OLD's missing runs on host NEW"
    ),
    note: str | None = typer.Option(None, "--note", help="free text recorded in every row of the sweep"),
) -> None:
    """Run a sweep locally (Prefect ephemeral mode, no server needed): live
    progress per slot, then the per-arm table and the verdicts against the baseline.
    A spec with hosts: runs on those fleet hosts through PREFECT_API_URL's server."""
    if quiet or as_json:
        quiet_prefect()
    prefect_defaults()
    server = None if dry_run else start_ephemeral_server()  # boots on another core while omni loads and plans
    from omni.sweep.prepare import prepare_sweep
    from omni.sweep.request import SweepRequest

    request = SweepRequest(
        spec=spec,
        passes=passes,
        results=results,
        resume=resume,
        dry_run=dry_run,
        force=force,
        sysfs_root=sysfs_root,
        cores=cores,
        node=node,
        straddle=straddle,
        busy_wait=busy_wait,
        quiet=quiet,
        as_json=as_json,
        force_hosts=force_hosts,
        replace_hosts=replace_host,
        note=note,
    )
    prepared = prepare_sweep(request)
    if why := render.unbalanced(prepared):
        err.print(why)
    if dry_run:
        print_fleet_plan(prepared) if prepared.fleet else print_plan(prepared, results)
        return
    if not prepared.items:
        if as_json:  # the same object as a sweep's, with no run in it
            import json

            rows = results_root(results) / "runs" / f"sweep={prepared.sweep_id}"
            print(json.dumps({"sweep_id": prepared.sweep_id, "rows": str(rows), "runs": [], "failed": 0}))
            return
        out.print(f"sweep {prepared.sweep_id}: all {prepared.planned} run(s) are stored; nothing to resume")
        if not quiet:
            print_arm_table(prepared.sweep_id, results)
        return
    run_sweep_flow(prepared, server)


def print_fleet_plan(prepared) -> None:
    show(render.fleet_plan(prepared))


def run_sweep_flow(prepared, server) -> None:
    """The flow on the prepared sweep, then what its request asks to see:
    live (progress, the per-arm table once, the verdicts), quiet (the rows'
    path and failures) or json (one object on stdout)."""
    request = prepared.request
    results = request.results
    mode = "json" if request.as_json else "quiet" if request.quiet else "live"
    # a fleet's runs are on its hosts: their progress is in each host's flow run
    summary = flow_on(prepared, server, mode == "live" and not prepared.fleet)
    rows = results_root(results) / "runs" / f"sweep={summary['sweep_id']}"
    if mode == "json":
        import json

        # the flow's outcomes carry exactly run_id, arm, pass_index, slot_index, status, error
        print(
            json.dumps(
                {
                    "sweep_id": summary["sweep_id"],
                    "rows": str(rows),
                    "runs": summary["runs"],
                    "failed": len(summary["failed"]),
                }
            )
        )
    else:
        if mode == "live":
            print_arm_table(summary["sweep_id"], results)
            print_verdicts(summary["sweep_id"], results)
        out.print(f"rows in {rows}")
        for failed in summary["failed"]:
            err.print(f"run {failed['run_id']} ({failed['arm']}) {failed['status']}: {failed['error']}", markup=False)
    # what a lost host left undone and how to finish it, in every mode: with
    # --json or --quiet Prefect's own INFO line carrying it is not shown
    for line in summary.get("lost", []):
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    if summary["failed"]:
        raise typer.Exit(EXIT_RUNS_FAILED)


@app.command()
def topology(
    sysfs_root: Path = sysfs_option("read sysfs under this root (a fixture of another host)"),
    window: float = typer.Option(0.5, min=0.05, max=60, help="seconds over which current load is measured"),
) -> None:
    """NUMA nodes, their CPUs, SMT siblings, memory, offline CPUs and current load."""
    from omni.host.placement import cpu_load
    from omni.host.topology import read_topology

    topo = read_topology(sysfs_root)
    show(render.topology(topo, cpu_load(window) if sysfs_root.resolve() == Path("/") else {}))


for command in (serve, worker, hosts):  # the commands that work through a Prefect server
    app.command()(command)


@app.command()
def table(
    sweep_id: str = SWEEP_ID_ARG,
    results: str = RESULTS_OPT,
) -> None:
    """Print the per-arm table (n, median, min, max) of a stored sweep."""
    from omni.store.layout import stored_run_ids

    if not stored_run_ids(results, sweep_id):
        raise OmniError(
            f"no rows for sweep {sweep_id!r} under {results_root(results) / 'runs'}; its sweep=… folders are the ids"
        )
    print_arm_table(sweep_id, results)


@app.command()
def summary(
    sweep_id: str = SWEEP_ID_ARG,
    results: str = RESULTS_OPT,
    include_retracted: bool = RETRACTED_OPT,
    metric: list[str] | None = METRIC_OPT,
    against: str | None = typer.Option(
        None, "--against", help="judge every arm against this arm, not the baseline (printed only, no files)"
    ),
) -> None:
    """Per arm and metric: n, median, MAD, CV, interval, and the verdict
    against the baseline; writes results/summaries/SWEEP.{md,json,html}
    (always every metric: --metric focuses what is printed)."""
    from omni.history.compare import sweep_history
    from omni.report.html import html_report
    from omni.report.markdown import summary_markdown
    from omni.report.summary import focus, summarize_sweep
    from omni.report.summary_json import write_outputs

    result = summarize_sweep(results, sweep_id, include_retracted, against)
    show(summary_markdown(focus(result, metric)))
    if against is not None:  # the sweep's own summary files stay the baseline's
        return
    paths = write_outputs(results, result, html_report(result, sweep_history(results, result, include_retracted)))
    show(f"written: {paths['md']}, {paths['json']}, {paths['html']}")


@app.command()
def ops(
    sweep_id: str = SWEEP_ID_ARG,
    results: str = RESULTS_OPT,
    arm: list[str] | None = typer.Option(None, "--arm", help="only this arm (repeatable)"),
    top: int = typer.Option(20, min=1, max=10**6, help="ops shown per arm, heaviest first"),
    steps: str = typer.Option("decode", help="which engine steps: decode, prefill, mixed or all"),
    against: str | None = typer.Option(None, help="judge each arm's ops against this arm's (default: the baseline)"),
    min_effect: float = typer.Option(0.05, min=0.001, max=0.99, help="smallest per-op change that matters"),
    by_shape: bool = typer.Option(False, "--by-shape", help="one line per op and input shapes (the head's GEMM apart)"),
    include_retracted: bool = RETRACTED_OPT,
) -> None:
    """Per arm and op, over the profiled passes: median self ms per step, share
    of the step, calls, and the op's noise between runs; then each arm's ops
    against the baseline's, with the verdict rule of every metric."""
    from omni.measure.ops import compare_ops, op_lines
    from omni.report.ops import sweep_ops
    from omni.report.spec_copy import baseline_of, sweep_spec

    frame, runs = sweep_ops(results, sweep_id, steps, include_retracted)
    if by_shape:
        frame = frame.assign(op=frame["op"] + " " + frame["shapes"].fillna(""))
    show(render.bad_runs(runs[runs["status"] != "ok"].itertuples()))
    arms = [a for a in dict.fromkeys(runs["arm"]) if not arm or a in arm]
    show(render.ops_table(sweep_id, steps, arms, [line for line in op_lines(frame) if line.arm in arms], top))
    ok = frame[frame["status"] == "ok"]
    base = against or baseline_of(sweep_spec(results, sweep_id), list(dict.fromkeys(runs["arm"])))
    if base not in set(ok["arm"]):
        show(f"no per-op verdicts: {base!r} has no ok profiled run (--against names another arm)")
        return
    for other in [a for a in arms if a != base and a in set(ok["arm"])]:
        show(render.op_verdicts(base, other, compare_ops(ok, base, other, min_effect), min_effect, top))


@app.command()
def compare(
    before: str = typer.Argument(..., callback=stored_id, help="sweep id of the reference"),
    after: str = typer.Argument(..., callback=stored_id, help="sweep id compared with it, arm by arm (same names)"),
    results: str = RESULTS_OPT,
    include_retracted: bool = RETRACTED_OPT,
    metric: list[str] | None = METRIC_OPT,
    across_hardware: bool = ACROSS_HARDWARE_OPT,
) -> None:
    """Each arm of AFTER against the same arm of BEFORE: ratio, interval,
    verdict; none for an arm whose runs differ in CPU model, cores per slot
    or engine version between the sweeps (unless --across-hardware)."""
    from omni.history.compare import compare_sweeps
    from omni.report.across import comparison_markdown

    show(comparison_markdown(compare_sweeps(results, before, after, include_retracted, metric, across_hardware)))


@app.command()
def regressions(
    sweep_name: str = typer.Argument(
        ..., callback=sweep_name, help="spec name shared by the repeated sweeps, e.g. nightly"
    ),
    results: str = RESULTS_OPT,
    window: int = typer.Option(10, min=2, max=10**6, help="earlier sweeps each one is compared with"),
    min_history: int = typer.Option(3, min=1, max=10**6, help="earlier sweeps needed before a sweep is judged"),
    include_retracted: bool = RETRACTED_OPT,
    across_hardware: bool = ACROSS_HARDWARE_OPT,
) -> None:
    """Regressions and improvements of repeated sweeps of one spec: each
    sweep's runs against the earlier sweeps' runs on the same hardware and
    engine env, with the verdict rule and the between-sweep drift; exit 1
    when the newest sweep regressed."""
    from omni.history.compare import nightly_changes, void_in_history
    from omni.report.across import changes_markdown

    nightly = nightly_changes(results, sweep_name, window, min_history, include_retracted, across_hardware)
    show(changes_markdown(sweep_name, nightly, void_in_history(results, sweep_name, include_retracted)))
    if any(c.kind == "regression" and c.sweep_id == nightly.order[-1] for c in nightly.changes):
        raise typer.Exit(EXIT_RUNS_FAILED)


@app.command()
def calibrate(
    spec: Path = typer.Argument(
        REPO_ROOT / "arms" / "calibrate-synthetic.yaml",
        exists=True,
        dir_okay=False,
        help="the spec whose workloads to calibrate",
    ),
    passes: int | None = typer.Option(None, min=3, max=1000, help="override the spec's passes"),
    sweeps: int = typer.Option(
        3, min=1, max=100, help="sweeps to run: 3 or more also measure a drift between sweeps that compare uses"
    ),
    results: str = RESULTS_OPT,
    from_sweep: list[str] | None = typer.Option(
        None, "--from", callback=stored_ids, help="measure these stored sweeps (repeatable), run nothing"
    ),
    force: bool = typer.Option(False, "--force", help="run even when the slot's cores are busy (recorded)"),
) -> None:
    """Measure the noise of each workload (arm configuration) of SPEC within a
    sweep, and its drift between sweeps, on this host. Summaries say which
    calibration applies; cross-sweep compare and regressions add its drift."""
    import json

    from omni.history.calibration import calibrate_from

    ids = list(from_sweep or [])
    for k in range(0 if ids else sweeps):
        show(f"calibration sweep {k + 1} of {sweeps}: {spec}")
        ids.append(run_local_sweep(spec, passes, results, force))
    path = calibrate_from(results, ids)
    show(render.calibration(json.loads(path.read_text()), ids, path))


@app.command()
def compact(
    sweep_ids: list[str] | None = typer.Argument(
        None, callback=stored_ids, help="sweeps to compact; none: every sweep"
    ),
    results: str = RESULTS_OPT,
) -> None:
    """Copy finished sweeps' rows into one file per sweep (results/compacted/),
    so reads open a file per sweep, not per run, and the parts of 20 sweeps
    or more into one consolidated file. Run files stay; rows stored after a
    compaction go into the sweep's next part. Sweeps compact themselves when
    they end; this catches up older ones."""
    from omni.store.compaction import compact_all, compact_sweep, consolidate
    from omni.store.layout import stored_run_ids

    if sweep_ids:
        unknown = [s for s in sweep_ids if not stored_run_ids(results, s)]
        if unknown:
            raise OmniError(f"no rows for sweep(s) {', '.join(unknown)} under {results_root(results) / 'runs'}")
        parts = [p for s in sweep_ids if (p := compact_sweep(results, s)) is not None]
        parts += [f for f in [consolidate(results)] if f is not None]
    else:
        parts = compact_all(results)
    show("\n".join(f"wrote {part}" for part in parts))
    show(f"{len(parts)} file(s) written; every other sweep was compacted already")


@app.command()
def retract(
    target: str = typer.Argument(..., callback=run_or_file, help="a run id, a sweep id, or a run file under results/"),
    reason: str = typer.Option(..., "--reason", callback=words, help="what is wrong with it"),
    superseded_by: str | None = typer.Option(
        None, "--superseded-by", callback=run_or_file, help="run, sweep or file that replaces it"
    ),
    results: str = RESULTS_OPT,
) -> None:
    """Withdraw a result with a reason; nothing is deleted or rewritten."""
    from omni.store.retract import load_retractions
    from omni.store.retract import retract as do_retract

    path = do_retract(results, target, reason, superseded_by)
    if path is None:
        from omni.store.retract import resolve_target, retracted_runs

        known = retracted_runs(results)
        reasons = sorted({known[r] for r in resolve_target(results, target)[2]})
        show(f"{target} is retracted already ({'; '.join(reasons)}): nothing recorded")
        return
    row = load_retractions(results).set_index("retraction_id").loc[path.stem]
    show(render.retraction(row, path))


@app.command()
def provenance(
    target: str = typer.Argument(..., callback=run_or_file, help="a run id or a run file"),
    results: str = RESULTS_OPT,
) -> None:
    """Where a run's numbers come from: versions, commits, host, ISA, placement, spec."""
    from pyarrow import ArrowException

    from omni.store.columns import COLUMNS
    from omni.store.layout import run_file_of
    from omni.store.reading import read_parquet
    from omni.store.retract import retracted_runs
    from omni.store.upgrades import upgrade_table

    given = results_root(target) if target.startswith("s3://") else Path(target)
    path = given if given.is_file() else run_file_of(results, target)
    if path is None:
        raise OmniError(
            f"{target!r} is no run id under {results_root(results) / 'runs'} and no file; find ids with omni table SWEEP_ID"
        )
    try:
        rows = upgrade_table(read_parquet(path)).to_pylist()
    except (ArrowException, OSError):
        rows = []
    if not rows or not rows[0].get("run_id"):
        raise OmniError(f"{path}: no run file of omni's (Parquet, one run row); give a run id or a file under runs/")
    show(render.provenance(rows[0], path, retracted_runs(results).get(rows[0]["run_id"]), COLUMNS))


app.add_typer(stack_app, name="stack")
app.add_typer(env_app, name="env")
app.add_typer(models_app, name="models")
app.add_typer(host_app, name="host")
app.command()(simulate)
app.command()(bisect)
app.command()(reproduce)


def main() -> None:
    # Registered first, so it runs last at exit: the interpreter's final garbage collection over what
    # Prefect, pandas and scipy allocated takes 0.4-0.9 s, after every file and row is written and closed.
    atexit.register(gc.freeze)
    try:
        code = app(prog_name="omni", standalone_mode=False)
        # without standalone mode click returns a typer.Exit's code instead of exiting with it
        if isinstance(code, int) and code:
            sys.exit(code)
    except OmniError as error:
        show(f"error: {error}", err)
        sys.exit(EXIT_USER_ERROR)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except typer.TyperException as error:  # click's usage errors (typer's own click), not raised in standalone mode
        if type(error).__name__ != "NoArgsIsHelpError":  # that one printed the help already
            show(f"error: {usage_line(error)}", err)
        sys.exit(EXIT_USER_ERROR)
    except Exception as error:
        problem = infrastructure_problem(error)
        if problem is None or DEBUG["traceback"]:
            raise
        err.print(f"error: {problem} (--debug shows the traceback)", markup=False, highlight=False, soft_wrap=True)
        sys.exit(EXIT_INFRASTRUCTURE)


if __name__ == "__main__":
    main()
