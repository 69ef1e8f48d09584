"""``omni bisect``: the first engine version whose metric differs from the
first one's (omni.sweep.bisect); ``omni.cli.main`` adds it to the ``omni`` command."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from omni.cli.console import show
from omni.cli.options import directory_to_make, results_location
from omni.errors import OmniError


def bisect(
    spec: Path = typer.Argument(..., exists=True, dir_okay=False, help="the sweep spec whose arm is bisected"),
    arm: str = typer.Option(..., "--arm", help="the arm, as the spec names it"),
    metric: str = typer.Option(..., "--metric", help="the metric, e.g. decode_tok_s, ttft_ms, rss_anon_steady_mb"),
    releases: tuple[str, str] | None = typer.Option(
        None, "--releases", help="FIRST LAST: every release between them on the package index, the arm env's package"
    ),
    package: str | None = typer.Option(
        None, "--package", help="with --releases: the package (default: the env's first requirement)"
    ),
    commits: tuple[str, str] | None = typer.Option(
        None, "--commits", help="FIRST LAST: every commit between them in the arm env's llama.cpp source tree"
    ),
    envs: list[str] = typer.Option([], "--env", help="a version as an env's name, oldest first (repeatable)"),
    max_passes: int = typer.Option(10, "--max-passes", min=3, max=100, help="passes per probe at most"),
    results: str = typer.Option(
        "results", "--results", callback=results_location, help="results store; every probe's rows are kept there"
    ),
    force: bool = typer.Option(False, "--force", help="run on busy cores instead of refusing (as omni sweep --force)"),
    as_json: bool = typer.Option(False, "--json", help="print the path as JSON"),
) -> None:
    """Find the first version whose metric differs from the first version's
    beyond min_effect: probe the last, then halve the range. Each probe is a
    sweep (first version against the probed one, interleaved, A/A control,
    passes: auto up to --max-passes), its rows kept; an undecided probe stops
    the search with the bracket it had."""
    from omni.envs.releases import commits_between, releases_between
    from omni.spec import load_spec
    from omni.spec.envs import declared_envs, requirement_name
    from omni.sweep import bisect as b

    if sum(x is not None and x != [] for x in (releases, commits, envs or None)) != 1:
        raise OmniError("give the versions one way: --releases FIRST LAST, --commits FIRST LAST, or --env NAME ...")
    from omni.store.columns import metric_columns

    if metric not in metric_columns():
        raise OmniError(f"--metric {metric!r} is no judged metric; use one of {', '.join(sorted(metric_columns()))}")
    loaded = load_spec(spec)
    from omni import REPO_ROOT

    declared = declared_envs(REPO_ROOT, loaded.sweep.envs)
    chosen = next((a for a in loaded.sweep.arms if a.name == arm), None)
    if chosen is None:
        raise OmniError(f"no arm of {spec} is named {arm!r}; its arms: {', '.join(a.name for a in loaded.sweep.arms)}")
    base_env = chosen.engine_env or declared.defaults.get(chosen.engine)
    if envs:
        unknown = [e for e in envs if e not in declared.envs]
        if unknown:
            raise OmniError(f"--env {', '.join(unknown)}: not declared (declared: {', '.join(sorted(declared.envs))})")
        versions = [b.Version(e, e) for e in envs]
    elif base_env is None:
        raise OmniError(f"arm {arm!r} runs in omni's own python: it has no versions to bisect; name envs with --env")
    elif releases:
        package = package or requirement_name(declared.spec(base_env).requirements[0])
        versions = b.release_versions(declared, base_env, package, releases_between(package, *releases))
    else:
        source = declared.spec(base_env).source
        if source is None:
            raise OmniError(f"--commits: env {base_env!r} builds no llama.cpp source tree (give it source:)")
        versions = b.commit_versions(declared, base_env, commits_between(source.repo, *commits))
    b.require_range(versions)  # before a line is printed: a refusal is one line
    local = Path("results") if "://" in results else Path(results)  # probe specs are files omni sweep reads
    try:
        directory_to_make(local)
    except typer.BadParameter as err:
        raise OmniError(f"--results: {err.message}") from None
    work = local / "bisect" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())  # made by the first probe
    show(f"bisect of {metric} over {len(versions)} versions: {', '.join(v.label for v in versions)}")
    search = b.bisect(loaded, arm, metric, versions, results, work, max_passes, force=force, log=show)
    record = b.as_record(search, versions, metric, arm)
    if not search.probes:  # nothing ran: nothing to record
        raise OmniError(f"no probe ran over {versions[0].label} .. {versions[-1].label}; nothing was written")
    work.mkdir(parents=True, exist_ok=True)
    (work / "bisect.json").write_text(json.dumps(record, indent=1))
    show(json.dumps(record, indent=1) if as_json else b.describe(search, versions, metric))
    show(f"probe specs and this record: {work}")
    if any(p.outcome == "undecided" for p in search.probes):
        raise typer.Exit(1)  # found nothing it could stand by; "nothing to find" is an answer
