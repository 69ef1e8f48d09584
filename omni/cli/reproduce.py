"""``omni reproduce``: rerun a stored result from its own record and judge
the new runs against it (omni.sweep.reproduce); ``omni.cli.main`` adds it
to the ``omni`` command."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import typer

from omni.cli.console import show
from omni.cli.options import results_location
from omni.errors import OmniError


def reproduce(
    target: str = typer.Argument(
        ...,
        help="a sweep id or run id (under --results), a Parquet file of omni's rows, or a summary JSON; local or s3://",
    ),
    results: str = typer.Option(
        "results", "--results", callback=results_location, help="where ids are looked up and the rerun's rows go"
    ),
    passes: int | None = typer.Option(
        None, "--passes", min=1, max=1000, help="passes of the rerun (default: the target's)"
    ),
    across_hardware: bool = typer.Option(
        False, "--across-hardware", help="rerun and judge on other hardware (every verdict then says so)"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="print the plan (env, model, host differences, arms, passes)"
    ),
    force: bool = typer.Option(False, "--force", help="run on busy cores instead of refusing (as omni sweep --force)"),
    as_json: bool = typer.Option(False, "--json", help="print the reproduction as JSON"),
) -> None:
    """Rerun TARGET as its record says (spec, seed, slots, passes, env, model)
    and say per metric: reproduced (equivalent within min_effect), not
    reproduced (ratio, interval, direction) or undecided (the passes that
    would decide). Exit 1 when a metric is not reproduced."""
    from omni import REPO_ROOT
    from omni.spec import load_spec
    from omni.spec.envs import declared_envs
    from omni.store.objstore import local_scratch
    from omni.sweep import reproduce as r

    found = r.read_target(target, results)
    differences = r.host_differences(r.host_facts(found.rows), r.this_host())
    hardware = [d for d in differences if d.hardware]
    if hardware and not across_hardware:
        raise OmniError(
            f"refused: {target} ran on other hardware ({'; '.join(d.describe() for d in hardware)}); "
            f"a rerun here would measure the hardware too ({r.FLAG} reruns and judges it anyway)"
        )
    with tempfile.TemporaryDirectory(prefix="omni-reproduce-") as scratch:
        recorded = Path(scratch) / f"spec{found.spec_suffix}"
        recorded.write_text(found.require_spec())
        spec_envs = load_spec(recorded, read_files=False).sweep.envs
        envs = r.choose_envs(found.rows, declared_envs(REPO_ROOT, spec_envs))
        text, suffix, changes = r.rerun_spec(found, envs)
        rerun = Path(scratch) / f"rerun{suffix}"
        rerun.write_text(text)
        loaded = load_spec(rerun)
        declared = declared_envs(REPO_ROOT, loaded.sweep.envs)
        arms = [a for a in loaded.sweep.arms if a.name in set(found.arms)] or list(loaded.sweep.arms)
        missing = sorted(set(found.arms) - {a.name for a in loaded.sweep.arms})
        if missing:
            raise OmniError(f"{target}: arm(s) {', '.join(missing)} of its rows are not in its spec; nothing to rerun")
        rerun_passes = passes if passes is not None else (None if loaded.sweep.auto else found.passes)
        if passes is None and rerun_passes is not None and found.manifest is None:  # a file need not hold every pass
            rerun_passes = max(rerun_passes, loaded.sweep.planned_passes)
        override = r.slot_override(found, bool(hardware))
        plan = _plan_lines(found, differences, envs, changes, arms, rerun_passes, loaded, override)
        if dry_run:
            show("\n".join(plan))
            return
        from omni.envs.resources import resolve_all

        resources = resolve_all(REPO_ROOT, arms, True, declared)
        made = {name: (res.model_digest, res.error) for name, res in resources.items()}
        problems = r.check_models(found.rows, made)
        if problems:
            raise OmniError("refused: " + "; ".join(problems))
        show("\n".join(plan))
        work = local_scratch(results) / "reproductions" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        work.mkdir(parents=True, exist_ok=True)
        spec_path = work / f"spec{suffix}"
        spec_path.write_text(text)
    new_sweep = _run(spec_path, rerun_passes, results, force, found.sweep_id, override)
    from omni.history.compare import compare_sweeps
    from omni.store.objstore import results_root, write_text_once

    comparison = compare_sweeps(
        results_root(results),
        found.sweep_id,
        new_sweep,
        across_hardware=across_hardware,
        before_rows=found.sweep_rows(),
    )
    outcomes = r.outcomes(comparison)
    record = r.as_record(found, new_sweep, differences, envs, changes, outcomes, across_hardware)
    folder = results_root(results) / "reproductions" / new_sweep
    folder.mkdir(parents=True, exist_ok=True)
    if found.kind in ("file", "summary"):  # what was compared stays beside the verdicts
        copy = folder / f"target{Path(target).suffix}"
        copy.write_bytes(results_root(target).read_bytes())
        record["target_copy"] = str(copy)
    write_text_once(folder / "reproduction.json", json.dumps(record, indent=1) + "\n")
    markdown = r.as_markdown(record)
    write_text_once(folder / "reproduction.md", markdown)
    show(json.dumps(record, indent=1) if as_json else markdown + f"\nreproduction record: {folder}")
    if any(o.verdict == "not reproduced" for o in outcomes):
        raise typer.Exit(1)


def _run(spec_path: Path, passes, results: str, force: bool, reproduces: str, override) -> str:
    from omni.cli.flowrun import run_request
    from omni.sweep.request import SweepRequest

    fields = {"cores": override.cores or None, "node": override.node, "straddle": override.straddle} if override else {}
    request = SweepRequest(spec=spec_path, passes=passes, results=results, force=force, reproduces=reproduces, **fields)
    return run_request(request)


def _plan_lines(found, differences, envs, changes, arms, passes, loaded, override) -> list[str]:
    kinds = found.rows["status"].value_counts().to_dict()
    lines = [f"reproduce {found.given} ({found.kind}): sweep {found.sweep_id}, {len(found.rows)} row(s) {kinds}"]
    lines += [f"  retracted: {line}" for line in found.retracted]
    lines += [f"  host: {d.describe()}{' (hardware)' if d.hardware else ''}" for d in differences] or [
        "  host: every recorded fact is this host's"
    ]
    lines += [f"  env {name}: {choice.how}" for name, choice in envs.items()]
    digests = found.rows.groupby("arm")["model_digest"].first().dropna().to_dict()
    lines += [f"  model of {arm}: made or found here, checked against digest {d[:16]}" for arm, d in digests.items()]
    lines += [f"  spec: {c}" for c in changes] or ["  spec: the target's own text, unchanged"]
    shown = "passes: auto" if passes is None else f"{passes} pass(es)"
    slots = override.describe() if override else "the spec's slots"
    everything = ", ".join(a.name for a in loaded.sweep.arms)
    lines.append(f"  rerun: {everything}; {shown}; seed {loaded.sweep.seed}; {slots}")
    if len(arms) < len(loaded.sweep.arms):
        lines.append(f"  judged: {', '.join(a.name for a in arms)} (the arms the target holds)")
    return lines
