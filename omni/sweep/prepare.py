"""Preparing a sweep and previewing it: from a request to a
:class:`PreparedSweep` (one host's runs, or a fleet's coordinator and its
shards), the records beside it under ``sweeps/<id>/`` (the manifest a resume
reads, the stops the ``passes: auto`` rule writes), and every planned run's
command line, placement and environment (the dry run).

Running the prepared items is :mod:`omni.sweep.execute`; the Prefect flow in
``flows/sweep.py`` calls both, and so do tests that need no Prefect at all.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from omni import REPO_ROOT
from omni.envs.resources import ArmResources, resolve_all
from omni.errors import OmniError
from omni.host.provenance import collect_host_provenance
from omni.host.topology import Slot
from omni.run.engine_process import engine_argv
from omni.run.plan import PlanItem, SlotOverride, new_sweep_id, plan_sweep, sweep_slots
from omni.run.runner import RunContext, engine_arm_payload, run_workdir
from omni.serving.run import planned_commands
from omni.spec import LoadedSpec, load_spec
from omni.spec.envs import declared_envs
from omni.store.layout import stored_run_ids
from omni.store.objstore import ResultsPath, S3Path, local_copy, results_root, write_text_once
from omni.sweep.request import SweepRequest
from omni.sweep.roofs import prepare_roofs

if TYPE_CHECKING:
    from omni.stats.sequential import Decision


@dataclass(frozen=True)
class PreparedSweep:
    loaded: LoadedSpec
    sweep_id: str
    context: RunContext
    items: list[PlanItem]  # what is left to run: all of it, or on resume the missing runs
    slots: list[Slot]
    passes: int
    planned: int  # runs in the whole plan
    request: SweepRequest  # as the flow is asked for it (its sweep id set): what hand-over compares
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
        **({"passes_rule": "auto", "max_passes": prepared.passes} if prepared.loaded.sweep.auto else {}),
        "seed": prepared.loaded.sweep.seed,
        "slots": [s.describe() for s in prepared.slots],
        "slots_override": _override_fields(prepared.context.slots_override),
        "request": prepared.request.flow_parameters(),
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


def record_stop(prepared: PreparedSweep, decision: Decision) -> None:
    """The rule's stop, beside the manifest (written once per stop; a resume
    past a budget stop records its own): which pass, why, the verdicts."""
    record = {
        "sweep_id": prepared.sweep_id,
        "passes": decision.passes,
        "max_passes": prepared.passes,
        "reason": decision.reason,
        "describe": decision.describe(),
        "verdicts": list(decision.lines),
        "pending": list(decision.pending),
        "at": datetime.now(UTC).isoformat(),
    }
    folder = manifest_dir(prepared.context.results_dir, prepared.sweep_id)
    write_text_once(folder / f"stop-{decision.passes:04d}.json", json.dumps(record, indent=1) + "\n")


def read_stops(results: str | Path | ResultsPath, sweep_id: str) -> dict:
    """The latest stop :func:`record_stop` wrote for the sweep, or {}."""
    stops = sorted(manifest_dir(results, sweep_id).glob("stop-*.json"), key=lambda p: p.name)
    return json.loads(stops[-1].read_text()) if stops else {}


def _spec_copy(results: ResultsPath, request: SweepRequest, manifest: dict) -> Path:
    """The spec copy a sweep started with; a spec given too must match it."""
    if request.spec is not None:
        given = load_spec(request.spec)
        if given.sha256 != manifest["spec_sha256"]:
            raise OmniError(
                f"{request.spec} has changed since sweep {request.resume} started (sha256 {given.sha256[:12]} vs "
                f"{manifest['spec_sha256'][:12]}): resuming would mix two configurations. "
                "Resume without the spec argument (the sweep's own copy is used) or start a new sweep"
            )
    return local_copy(results, manifest_dir(results, request.resume) / manifest["spec_copy"])


def run_context(
    request: SweepRequest,
    loaded: LoadedSpec,
    results: ResultsPath,
    provenance: dict,
    resources: dict[str, ArmResources] | None = None,
) -> RunContext:
    """What every run of the sweep shares: the spec's limits, the request's overrides."""
    return RunContext(
        results_dir=results,
        timeout_s=loaded.sweep.timeout_s,
        busy_threshold_pct=loaded.sweep.busy_threshold_pct,
        busy_wait_s=loaded.sweep.busy_wait_s if request.busy_wait is None else request.busy_wait,
        force=request.force,
        provenance=provenance,
        repo_root=REPO_ROOT,
        resources=resources or {},
        simulate_placement=request.simulated,
        slots_override=request.slots_override,
        recorded=request.recorded(),
        seed=loaded.sweep.seed,
    )


def prepare_sweep(request: SweepRequest, *, shard: Shard | None = None) -> PreparedSweep:
    """Load and validate everything a sweep needs before anything runs.

    ``request.resume`` (a sweep id) replans that sweep from the spec copy,
    passes and slots it started with and keeps only the runs not stored yet.
    Missing engine envs and models are built (minutes, once) unless it is a
    dry run, which shows where they would be. A ``sysfs_root`` other than
    ``/`` plans placement on that (fixture) host's topology and does not apply it.

    A spec with ``hosts:`` prepares the fleet's coordinator (which hosts, which
    runs each) unless ``shard`` says this is one host's part, which is
    prepared here like a sweep of its own.
    """
    results = results_root(request.results)
    if isinstance(results, S3Path):
        results.require_bucket()  # before anything runs: a typo must not file results elsewhere
    asked = request
    base = None  # the spec's relative paths (load.prompts) are its folder's
    if request.resume:
        manifest = read_manifest(results, request.resume)
        request = request.resumed(manifest, _spec_copy(results, request, manifest))
        base = Path(manifest["spec_path"]).parent  # the copy's are the original's, not the copy's folder's
    loaded = load_spec(request.spec, base=base)
    if loaded.sweep.auto and asked.passes is not None and not asked.resume:
        raise OmniError(
            f"--passes {asked.passes}: {loaded.path} has passes: auto, which stops by the sequential rule; "
            "set max_passes in the spec, or give the spec a number of passes"
        )
    passes = request.passes or loaded.sweep.planned_passes
    sweep_id = request.sweep_id or new_sweep_id(loaded.sweep.name)
    asked = asked.with_sweep_id(sweep_id)
    if loaded.sweep.hosts is not None and shard is None:
        if request.slots_override or request.simulated:
            raise OmniError(
                f"{loaded.path} names hosts: each host plans its own slots from the spec's slots: "
                "(and its worker's --sysfs-root); --cores, --node and --sysfs-root are for one host"
            )
        return prepare_fleet(loaded, request, asked, passes, results)
    if shard is None and (request.force_hosts or request.replace_hosts):
        raise OmniError(f"--force-hosts and --replace-host are for fleet sweeps; {loaded.path} names no hosts:")
    slots = sweep_slots(loaded, request.sysfs_root, request.slots_override)
    replicated = shard is not None and loaded.sweep.hosts.mode == "replicate"
    items = plan_sweep(loaded, sweep_id, slots, passes, host=shard.plan_host if replicated else None)
    if shard is not None:
        asked_ids = set(shard.run_ids)
        foreign = asked_ids - {item.run_id for item in items}
        if foreign:
            raise OmniError(
                f"{len(foreign)} run id(s) sent to this host are not in sweep {sweep_id}'s plan for "
                f"host {shard.plan_host} (e.g. {sorted(foreign)[0]}): this host's omni plans differently "
                f"(its commit: {collect_host_provenance().get('harness_git_sha')}); run one omni on every host"
            )
        items = [item for item in items if item.run_id in asked_ids]
    planned = len(items)
    if shard is None and request.run_ids is not None:
        # the runs the CLI prepared, whatever another process stored since: those become skipped outcomes
        chosen = set(request.run_ids)
        items = [item for item in items if item.run_id in chosen]
    elif request.resume:
        stored = stored_run_ids(results, sweep_id)
        # each run keeps its planned slot: the arms' rotation over slots stays balanced
        items = [item for item in items if item.run_id not in stored]
        if loaded.sweep.auto and read_stops(results, sweep_id).get("reason") == "conclusive":
            items = [item for item in items if item.profiled]  # the rule has answered: no timed pass is missing
    provenance = collect_host_provenance(root=request.sysfs_root)
    provenance.update(spec_path=str(loaded.path), spec_sha256=loaded.sha256, spec_text=loaded.text)
    declared = declared_envs(REPO_ROOT, loaded.sweep.envs)
    held = held_releases(results, sweep_id) if request.resume else {}
    resources = resolve_all(REPO_ROOT, list(loaded.sweep.arms), not request.dry_run, declared, held)
    context = run_context(request, loaded, results, provenance, resources)
    if not (request.dry_run or request.simulated):
        context = replace(context, roofs=prepare_roofs(items, resources, REPO_ROOT, context.busy_wait_s))
    return PreparedSweep(loaded, sweep_id, context, items, slots, passes, planned, asked)


def held_releases(results: ResultsPath, sweep_id: str) -> dict[str, str]:
    """env -> the pins its stored rows ran with: a resumed sweep keeps the
    release an env following the newest one resolved to when it started."""
    from omni.store.reading import load_runs

    try:
        rows = load_runs(results, sweep_id=sweep_id, columns=["engine_env", "engine_env_pins"]).dropna()
    except OmniError:
        return {}
    return dict(zip(rows["engine_env"], rows["engine_env_pins"]))


def prepare_fleet(
    loaded: LoadedSpec, request: SweepRequest, asked: SweepRequest, passes: int, results: ResultsPath
) -> PreparedSweep:
    """A fleet sweep's coordinator: the hosts (alive; identical for split), each
    one's run ids, and the shards to send: every host's whole part, or on
    resume each host's missing runs (to its replacement, if one is given:
    ``request.replacements``; ``force_hosts`` splits over hosts that differ).
    Nothing is built or placed here: each host does that for its part."""
    from omni.fleet import hosts as fleet

    spec_hosts = loaded.sweep.hosts
    sweep_id, resume, force_hosts = asked.sweep_id, request.resume, request.force_hosts
    replace_hosts = request.replacements
    states = fleet.read_fleet()
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
    by_id = {}
    for host in hosts:
        planned_for = plan_sweep(loaded, sweep_id, [fleet.NO_SLOT], passes, host=host if mode == "replicate" else None)
        by_id.update({item.run_id: item for item in planned_for})
    every = [by_id[r] for ids in runs.values() for r in ids]
    todo = {r for s in shards for r in s["run_ids"]}
    provenance = {"spec_path": str(loaded.path), "spec_sha256": loaded.sha256}
    context = run_context(request, loaded, results, provenance)
    info = {
        "mode": mode,
        "hosts": hosts,
        "runs": runs,
        "shards": shards,
        "force_hosts": force_hosts,
        "facts": {h: states[h].facts for h in hosts if h in states},
    }
    items = [i for i in every if i.run_id in todo]
    return PreparedSweep(loaded, sweep_id, context, items, [], passes, len(every), asked, info)


def describe_plan(
    items: list[PlanItem],
    slots: list[Slot],
    results_dir: Path,
    resources: dict[str, ArmResources],
    simulate: bool = False,
    seed: int = 0,
) -> list[dict]:
    """The exact command line, placement and environment of every planned run
    (``seed``: the sweep's, which orders a serving run's levels).

    ``wave``: runs of one wave start together, one per slot, if runs took equal
    time: the k-th run of a slot (each run has its slot, omni.run.plan) is in wave k.
    """
    rows = []
    on_slot: dict[int, int] = {}
    for item in items:
        wave = on_slot[item.slot.index] = on_slot.get(item.slot.index, -1) + 1
        res = resources[item.arm.name]
        workdir = run_workdir(results_dir, item)
        argv, method = engine_argv(item, workdir, res.python or "<unresolved>", simulate)
        clients = []
        if item.arm.load is not None and not res.error and not simulate:
            payload = engine_arm_payload(item, res, workdir)
            argv, method, clients = planned_commands(item, res, workdir, payload, seed)
        rows.append(
            {
                "order": item.order_index,
                "wave": wave,
                "slot": item.slot.index,
                "pass": item.pass_index,
                "profiled": item.profiled,
                "arm": item.arm.name,
                "run_id": item.run_id,
                "node": item.slot.node,
                "cpus": list(item.slot.cpus),
                "membind": list(item.slot.mems),
                "method": method,
                "env": {"OMNI_RUN_ID": item.run_id, **item.arm.env},
                "command": shlex.join(argv),
                "client_commands": [shlex.join(c) for c in clients],
                "search": item.arm.load.search.levels if item.arm.load and item.arm.load.search else None,
                "model_path": res.model_path,
                "problem": res.error,
            }
        )
    return rows
