"""A sweep as plain functions: prepare it, run one item, tabulate the result.

The Prefect flow in ``flows/sweep.py`` calls these; so do tests that need no
Prefect at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from omni import REPO_ROOT
from omni.errors import OmniError
from omni.objstore import ResultsPath, S3Path, local_copy, results_root, write_text_once
from omni.plan import SlotOverride, new_sweep_id, plan_sweep, sweep_slots
from omni.progress import BOARD
from omni.provenance import collect_host_provenance
from omni.resources import resolve_all
from omni.runner import SIDE_KEYS, PlanItem, RunContext, run_arm
from omni.schedule import claim_run, hold_cpus, run_concurrently
from omni.spec import LoadedSpec, load_spec
from omni.store import load_runs, run_path, stored_run_ids, write_run, write_side_table
from omni.store import profiled as is_profiled
from omni.topology import Slot, format_cpulist

if TYPE_CHECKING:
    from omni.stats import ArmTable

SKIPPED = "skipped"  # an outcome, never a row: the run was another process's
TABLE_METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms", "load_s", "rss_anon_tree_mb", "rss_anon_steady_mb")


@dataclass(frozen=True)
class PreparedSweep:
    loaded: LoadedSpec
    sweep_id: str
    context: RunContext
    items: list[PlanItem]  # what is left to run: all of it, or on resume the missing runs
    slots: list[Slot]
    passes: int
    planned: int  # runs in the whole plan
    # a fleet sweep's coordinator (spec hosts:): no slots here, each shard runs
    # on its host; {"mode", "hosts", "runs": {plan host: run ids}, "shards": [...]}
    fleet: dict | None = None


@dataclass(frozen=True)
class Shard:
    """The part of a fleet sweep one host runs: run ids of ``plan_host``'s plan
    (a replicated plan has run ids per host; a replacement host runs another's)."""

    plan_host: str
    run_ids: tuple[str, ...]


def manifest_dir(results: str | Path | ResultsPath, sweep_id: str) -> ResultsPath:
    return results_root(results) / "sweeps" / sweep_id


def read_manifest(results: str | Path | ResultsPath, sweep_id: str) -> dict:
    path = manifest_dir(results, sweep_id) / "manifest.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        known = sorted(p.parent.name for p in (results_root(results) / "sweeps").glob("*/manifest.json"))
        raise OmniError(
            f"cannot resume sweep {sweep_id!r}: no {path} (a sweep writes it when it starts). "
            f"Sweeps under {results}: {', '.join(known[-5:]) or 'none'}"
        ) from None


def write_manifest(prepared: PreparedSweep) -> Path:
    """What resume needs, written once when the sweep starts: the spec's own
    bytes (the file may change later), passes, seed and the planned run ids."""
    folder = manifest_dir(prepared.context.results_dir, prepared.sweep_id)
    path = folder / "manifest.json"
    if path.exists():
        return path  # a resumed sweep keeps the manifest it started with
    spec_copy = folder / f"spec{prepared.loaded.path.suffix.lower()}"
    write_text_once(spec_copy, prepared.loaded.text)
    manifest = {
        "sweep_id": prepared.sweep_id,
        "spec_path": str(prepared.loaded.path),
        "spec_copy": spec_copy.name,
        "spec_sha256": prepared.loaded.sha256,
        "passes": prepared.passes,
        "seed": prepared.loaded.sweep.seed,
        "slots": [s.describe() for s in prepared.slots],
        "slots_override": _override_fields(prepared.context.slots_override),
        "run_ids": [item.run_id for item in prepared.items],
        **(
            {"fleet": {k: prepared.fleet[k] for k in ("mode", "hosts", "runs", "force_hosts")}}
            if prepared.fleet
            else {}
        ),
        "created_at": datetime.now(UTC).isoformat(),
    }
    write_text_once(path, json.dumps(manifest, indent=1) + "\n")
    return path


def _override_fields(override: SlotOverride | None) -> dict | None:
    return {"cores": list(override.cores), "node": override.node, "straddle": override.straddle} if override else None


def _resume_override(manifest: dict, given: SlotOverride | None) -> SlotOverride | None:
    """A resumed sweep runs on the slots it started with: --cores/--node given
    again must match them (or be left out)."""
    fields = manifest.get("slots_override")
    kept = SlotOverride(tuple(fields["cores"]), fields["node"], fields["straddle"]) if fields else None
    if given and given != kept:
        started = kept.describe() if kept else "the spec's slots"
        raise OmniError(
            f"sweep {manifest['sweep_id']} started on {started}; resume it without {given.describe()} "
            "(it keeps its slots) or start a new sweep"
        )
    return kept


def _resume_source(results: ResultsPath, resume: str, spec: str | Path | None) -> tuple[Path, int]:
    """The spec copy and passes a sweep started with; a spec given too must match."""
    manifest = read_manifest(results, resume)
    if spec is not None:
        given = load_spec(spec)
        if given.sha256 != manifest["spec_sha256"]:
            raise OmniError(
                f"{spec} has changed since sweep {resume} started (sha256 {given.sha256[:12]} vs "
                f"{manifest['spec_sha256'][:12]}): resuming would mix two configurations. "
                "Resume without the spec argument (the sweep's own copy is used) or start a new sweep"
            )
    return local_copy(results, manifest_dir(results, resume) / manifest["spec_copy"]), manifest["passes"]


def prepare_sweep(
    spec: str | Path | None,
    *,
    passes: int | None = None,
    results: str | Path = "results",
    force: bool = False,
    sweep_id: str | None = None,
    resume: str | None = None,
    sysfs_root: str | Path = "/",
    build: bool = True,
    slots_override: SlotOverride | None = None,
    busy_wait: float | None = None,
    shard: Shard | None = None,
    force_hosts: bool = False,
    replace_hosts: dict[str, str] | None = None,
) -> PreparedSweep:
    """Load and validate everything a sweep needs before anything runs.

    ``resume`` (a sweep id) replans that sweep from the spec copy and passes it
    started with and keeps only the runs not stored yet. ``build`` makes missing
    engine envs and models (minutes, once); a dry run passes False and shows
    where they would be. A ``sysfs_root`` other than ``/`` plans placement on
    that (fixture) host's topology and does not apply it. ``slots_override``
    (``--cores``/``--node``) replaces the spec's slot request. ``busy_wait``
    (``--busy-wait``, seconds) replaces the spec's ``busy_wait_s``.

    A spec with ``hosts:`` prepares the fleet's coordinator (which hosts, which
    runs each; ``force_hosts`` splits over hosts that differ, ``replace_hosts``
    sends a host's missing runs to another on resume) unless ``shard`` says this
    is one host's part, which is prepared here like a sweep of its own.
    """
    results = results_root(results)
    if isinstance(results, S3Path):
        results.require_bucket()  # before anything runs: a typo must not file results elsewhere
    if resume:
        if passes is not None:
            raise OmniError(f"--passes cannot change on resume: sweep {resume} keeps the passes it started with")
        if sweep_id not in (None, resume):
            raise OmniError(f"resume {resume!r} and sweep_id {sweep_id!r} differ; give one of them")
        spec, passes = _resume_source(results, resume, spec)
        slots_override = _resume_override(read_manifest(results, resume), slots_override)
        sweep_id = resume
    elif spec is None:
        raise OmniError("give a sweep spec (e.g. arms/smoke.yaml), or --resume SWEEP_ID")
    loaded = load_spec(spec)
    passes = passes or loaded.sweep.passes
    sweep_id = sweep_id or new_sweep_id(loaded.sweep.name)
    if loaded.sweep.hosts is not None and shard is None:
        if slots_override or Path(sysfs_root).resolve() != Path("/"):
            raise OmniError(
                f"{loaded.path} names hosts: each host plans its own slots from the spec's slots: "
                "(and its worker's --sysfs-root); --cores, --node and --sysfs-root are for one host"
            )
        return prepare_fleet(
            loaded,
            sweep_id,
            passes,
            results,
            resume=resume,
            force=force,
            busy_wait=busy_wait,
            force_hosts=force_hosts,
            replace_hosts=replace_hosts or {},
        )
    if shard is None and (force_hosts or replace_hosts):
        raise OmniError(f"--force-hosts and --replace-host are for fleet sweeps; {loaded.path} names no hosts:")
    slots_override = slots_override or None
    slots = sweep_slots(loaded, sysfs_root, slots_override)
    replicated = shard is not None and loaded.sweep.hosts.mode == "replicate"
    items = plan_sweep(loaded, sweep_id, slots, passes, host=shard.plan_host if replicated else None)
    if shard is not None:
        asked = set(shard.run_ids)
        foreign = asked - {item.run_id for item in items}
        if foreign:
            raise OmniError(
                f"{len(foreign)} run id(s) sent to this host are not in sweep {sweep_id}'s plan for "
                f"host {shard.plan_host} (e.g. {sorted(foreign)[0]}): this host's omni plans differently "
                f"(its commit: {collect_host_provenance().get('harness_git_sha')}); run one omni on every host"
            )
        items = [item for item in items if item.run_id in asked]
    planned = len(items)
    if resume:
        stored = stored_run_ids(results, sweep_id)
        left = [item for item in items if item.run_id not in stored]
        # plan_sweep predicted slots for the whole plan; predict again for what is left
        items = [replace(item, slot=slots[i % len(slots)]) for i, item in enumerate(left)]
    provenance = collect_host_provenance(root=sysfs_root)
    provenance.update(spec_path=str(loaded.path), spec_sha256=loaded.sha256)
    context = RunContext(
        results_dir=results,
        timeout_s=loaded.sweep.timeout_s,
        busy_threshold_pct=loaded.sweep.busy_threshold_pct,
        busy_wait_s=loaded.sweep.busy_wait_s if busy_wait is None else busy_wait,
        force=force,
        provenance=provenance,
        repo_root=REPO_ROOT,
        resources=resolve_all(REPO_ROOT, list(loaded.sweep.arms), build=build),
        simulate_placement=Path(sysfs_root).resolve() != Path("/"),
        slots_override=slots_override,
    )
    return PreparedSweep(loaded, sweep_id, context, items, slots, passes, planned)


def prepare_fleet(
    loaded: LoadedSpec,
    sweep_id: str,
    passes: int,
    results: ResultsPath,
    *,
    resume: str | None,
    force: bool,
    busy_wait: float | None,
    force_hosts: bool,
    replace_hosts: dict[str, str],
) -> PreparedSweep:
    """A fleet sweep's coordinator: the hosts (alive; identical for split), each
    one's run ids, and the shards to send: every host's whole part, or on
    resume each host's missing runs (to its replacement, if one is given).
    Nothing is built or placed here: each host does that for its part."""
    from prefect.client.orchestration import get_client

    from omni import fleet

    fleet.require_server()
    spec_hosts = loaded.sweep.hosts
    with get_client(sync_client=True) as client:
        states = fleet.read_hosts(client)
    if resume:
        started = read_manifest(results, resume).get("fleet")
        if started is None:
            raise OmniError(f"sweep {resume} did not start as a fleet sweep; resume it without hosts:")
        mode, hosts, runs = started["mode"], started["hosts"], started["runs"]
        unknown = sorted(set(replace_hosts) - set(hosts))
        if unknown:
            raise OmniError(f"--replace-host {', '.join(unknown)}: sweep {resume} ran on {', '.join(hosts)} only")
        force_hosts = force_hosts or started.get("force_hosts", False)
    else:
        if replace_hosts:
            raise OmniError("--replace-host is for --resume: a new sweep names its hosts in hosts:")
        mode = spec_hosts.mode
        hosts = fleet.choose_hosts(spec_hosts.names, mode, states, force_hosts)
        runs = fleet.assign(loaded, sweep_id, passes, hosts, mode)
    if not isinstance(results, S3Path):  # each host writes its rows where it runs: one store for all of them
        import platform

        elsewhere = sorted(
            {
                f"{h} ({states[h].facts.get('hostname')})"
                for h in [*hosts, *replace_hosts.values()]
                if h in states and (states[h].facts or {}).get("hostname") != platform.node()
            }
        )
        if elsewhere:
            raise OmniError(
                f"results {results} is a directory of this machine, and hosts {', '.join(elsewhere)} "
                "run elsewhere: their rows would land on their own disks. Give the fleet one store: "
                "--results s3://BUCKET/PREFIX (the stack's S3, or any S3)"
            )
    stored = stored_run_ids(results, sweep_id) if resume else set()
    shards = [
        {"host": replace_hosts.get(h, h), "plan_host": h, "run_ids": [r for r in ids if r not in stored]}
        for h, ids in runs.items()
    ]
    shards = [s for s in shards if s["run_ids"]]
    if resume and shards:
        fleet.choose_hosts(sorted({s["host"] for s in shards}), "replicate", states)  # alive, each of them
        if mode == "split" and replace_hosts:
            kept = [h for h in hosts if h not in replace_hosts] + list(replace_hosts.values())
            fleet.check_identical({h: (states[h].facts or {}) for h in dict.fromkeys(kept) if h in states}, force_hosts)
    # the plan's items (for labels and the manifest): a placeholder slot, each host places its own
    from omni.plan import plan_sweep

    by_id = {}
    for host in hosts:
        planned_for = plan_sweep(loaded, sweep_id, [fleet.NO_SLOT], passes, host=host if mode == "replicate" else None)
        by_id.update({item.run_id: item for item in planned_for})
    every = [by_id[r] for ids in runs.values() for r in ids]
    todo = {r for s in shards for r in s["run_ids"]}
    context = RunContext(
        results_dir=results,
        timeout_s=loaded.sweep.timeout_s,
        busy_threshold_pct=loaded.sweep.busy_threshold_pct,
        busy_wait_s=loaded.sweep.busy_wait_s if busy_wait is None else busy_wait,
        force=force,
        provenance={"spec_path": str(loaded.path), "spec_sha256": loaded.sha256},
        repo_root=REPO_ROOT,
    )
    info = {
        "mode": mode,
        "hosts": hosts,
        "runs": runs,
        "shards": shards,
        "force_hosts": force_hosts,
        "facts": {h: states[h].facts for h in hosts if h in states},
    }
    return PreparedSweep(
        loaded, sweep_id, context, [i for i in every if i.run_id in todo], [], passes, len(every), info
    )


# Sweeps prepared in this process, waiting for the flow that runs them: the
# CLI prepares (so a bad spec is one line, before Prefect starts) and hands
# over; the flow, run in this process by `omni sweep`, takes it instead of
# preparing again. A deployment's flow runs in a worker and prepares itself.
_HANDED_OVER: dict[str, PreparedSweep] = {}


def hand_over(prepared: PreparedSweep) -> None:
    _HANDED_OVER[prepared.sweep_id] = prepared


def take_over(sweep_id: str | None, **asked) -> PreparedSweep | None:
    """The sweep handed over under ``sweep_id`` when it was prepared with what
    the flow is asked now (force, results, busy wait); else None."""
    prepared = _HANDED_OVER.pop(sweep_id, None) if sweep_id else None
    if prepared is None:
        return None
    have = {
        "force": prepared.context.force,
        "results": prepared.context.results_dir,
        "busy_wait": prepared.context.busy_wait_s,
    }
    want = {
        "force": asked["force"],
        "results": results_root(asked["results"]),
        "busy_wait": prepared.context.busy_wait_s if asked["busy_wait"] is None else asked["busy_wait"],
    }
    return prepared if have == want else None


def item_outcome(item: PlanItem, status: str, error: str) -> dict:
    """The outcome of a run that has no row of its own (skipped, or not stored)."""
    return {
        "run_id": item.run_id,
        "arm": item.arm.name,
        "pass_index": item.pass_index,
        "slot_index": item.slot.index,
        "status": status,
        "error": error,
    }


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
            with hold_cpus(item.slot.cpus):
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


def run_sweep_items(prepared: PreparedSweep) -> list[dict]:
    """Every item of a prepared sweep on its slots, concurrently, without Prefect."""
    write_manifest(prepared)
    return run_concurrently(prepared.items, prepared.slots, lambda item: run_and_store(prepared.context, item))


def sweep_table(results: str | Path, sweep_id: str) -> ArmTable:
    # here, not at the top: scipy (via stats) and pandas cost seconds, and the
    # run path (prepare, run, store) needs neither, e.g. in a slow test guest
    from omni.stats import describe_arms

    frame = load_runs(results, sweep_id=sweep_id).sort_values("order_index")
    frame = frame[~is_profiled(frame)]  # the timed runs: profiled ones are for omni ops
    return describe_arms(frame.to_dict("records"), TABLE_METRICS)


def format_table(table: ArmTable) -> str:
    """A plain-text per-arm table: n, median, min, max per metric."""
    lines = [f"{'arm':<20} {'metric':<20} {'n':>3}/{'runs':<4} {'median':>12} {'min':>12} {'max':>12}"]
    for arm in table.arms:
        for metric in table.metrics:
            cell = table.cells[(arm, metric)]
            nums = [f"{v:12.3f}" if v is not None else f"{'-':>12}" for v in (cell.median, cell.min, cell.max)]
            lines.append(f"{arm:<20} {metric:<20} {cell.n:>3}/{table.runs[arm]:<4} {' '.join(nums)}")
    return "\n".join(lines)
