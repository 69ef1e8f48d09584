"""Fleet sweeps: benchmark hosts are Prefect workers, one work queue each.

``omni worker --host NAME`` runs a Prefect process worker named ``host-NAME``
on pool ``omni`` that polls only the work queue ``host-NAME``; a sweep whose
spec names ``hosts:`` sends each host its part of the plan as a flow run of
the ``sweep-shard/fleet`` deployment routed to that queue (flows/fleet.py).
Prefect is the only scheduler: omni adds no queue, daemon or task runner.

Where a host's state lives, decided:

- **Facts** (topology, ISA, CPU model, kernel, engine envs built, omni
  commit, lock directory) are a Prefect Variable ``omni_host_NAME`` holding
  JSON, written by the worker when it starts. Any client (a sweep, ``omni
  hosts``) reads it by name in one call, with no block type to register on
  the server; work-pool labels hold no structured data.
- **Liveness** is Prefect's own worker heartbeat: the server marks the worker
  offline after three missed heartbeats, comparing with its own clock, so a
  host whose clock is off is still judged right. ``--heartbeat`` sets the
  interval (default 10 s: a dead host is seen within 30 s).

The pure parts (facts, the split check, assignment) are here; the Prefect
calls are the functions taking a client.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omni import REPO_ROOT
from omni.cpulist import format_cpulist
from omni.errors import OmniError
from omni.host.provenance import collect_host_provenance
from omni.host.topology import Slot
from omni.run.schedule import lock_dir

POOL = "omni"  # omni.fleet.stack.POOL; prefect.yaml's pool
QUEUE_PREFIX = "host-"
VARIABLE_PREFIX = "omni_host_"
SHARD_DEPLOYMENT = "sweep-shard/fleet"
# flows/fleet.py sweep_shard's parameters: a deployment registered by another
# omni (other names) would refuse every part, so it is registered again
SHARD_PARAMETERS = ("request", "host", "run_ids", "plan_host")
SYSFS_VAR = "OMNI_SYSFS_ROOT"  # a worker's --sysfs-root, for the shards it runs
HEARTBEAT_S = 10
# what split mode needs to be equal across hosts: one plan's passes must be interchangeable
SPLIT_MUST_MATCH = ("cpu_model", "isa", "topology")
# a placeholder slot: the coordinator plans run ids, each host places them on its own slots
NO_SLOT = Slot(index=0, node=0, cpus=(), mems=())


def queue_name(host: str) -> str:
    return f"{QUEUE_PREFIX}{host}"


def variable_name(host: str) -> str:
    return f"{VARIABLE_PREFIX}{host}"


def host_facts(host: str, sysfs_root: str | Path = "/", locks: Path | None = None) -> dict[str, Any]:
    """What a sweep needs to know of a host before sending it runs (JSON, < 5000 characters)."""
    from omni.envs.build import env_info
    from omni.spec.envs import declared_envs

    meta = collect_host_provenance(root=sysfs_root)
    topology = {str(node): format_cpulist(cpus) for node, cpus in sorted((meta.get("numa_topology") or {}).items())}
    envs = {}
    for name, spec in sorted(declared_envs(REPO_ROOT).envs.items()):
        info = None if spec.newest or not spec.venv else env_info(REPO_ROOT, name, spec)
        if info is not None:
            envs[name] = info.freeze_sha256[:12]
    return {
        "host": host,
        "hostname": platform.node(),
        "kernel": meta.get("kernel"),
        "cpu_model": meta.get("cpu_model"),
        "isa": sorted(meta.get("cpu_flags") or []),
        "topology": topology,
        "envs": envs,
        "harness_git_sha": meta.get("harness_git_sha"),
        "repo_root": str(REPO_ROOT),
        "lock_dir": str(locks or lock_dir()),
        "sysfs_root": str(sysfs_root),
        "pid": os.getpid(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


@dataclass(frozen=True)
class HostState:
    name: str
    facts: dict | None  # None: a worker heartbeats under this name but never published facts
    online: bool
    last_heartbeat: datetime | None

    def describe_absence(self) -> str:
        if self.facts is None and self.last_heartbeat is None:
            return f"host {self.name} is unknown: no omni worker --host {self.name} has registered with this Prefect server"
        if self.last_heartbeat is None:
            return f"host {self.name} has published its facts but its worker never sent a heartbeat"
        ago = (datetime.now(UTC) - self.last_heartbeat).total_seconds()
        return (
            f"host {self.name} is offline: its worker's last heartbeat was {ago:.0f} s ago "
            f"({self.last_heartbeat.isoformat(timespec='seconds')})"
        )


def read_hosts(client, pool: str = POOL) -> dict[str, HostState]:
    """Every host that published facts or whose worker heartbeats, by name
    (a sync Prefect client)."""
    facts = {}
    for variable in client.read_variables():
        if variable.name.startswith(VARIABLE_PREFIX):
            facts[variable.name.removeprefix(VARIABLE_PREFIX)] = variable.value
    workers = {}
    try:
        for worker in client.read_workers_for_work_pool(pool):
            if worker.name.startswith(QUEUE_PREFIX):
                workers[worker.name.removeprefix(QUEUE_PREFIX)] = worker
    except Exception as error:  # noqa: BLE001 - no pool yet: no worker either
        if "404" not in str(error) and "not found" not in str(error).lower():
            raise
    states = {}
    for name in sorted(set(facts) | set(workers)):
        worker = workers.get(name)
        online = worker is not None and str(getattr(worker.status, "value", worker.status)).upper() == "ONLINE"
        beat = worker.last_heartbeat_time if worker is not None else None
        states[name] = HostState(name, facts.get(name), online and name in facts, beat)
    return states


def split_differences(facts: dict[str, dict]) -> list[str]:
    """What differs between hosts that split mode needs equal, one line per fact."""
    problems = []
    for key in SPLIT_MUST_MATCH:
        values = {host: f.get(key) for host, f in facts.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) <= 1:
            continue
        if key == "isa":
            every = set.intersection(*(set(v or []) for v in values.values()))
            shown = {h: sorted(set(v or []) - every) or ["(none beyond the common ones)"] for h, v in values.items()}
            problems.append("isa: " + "; ".join(f"{h} has {', '.join(flags)}" for h, flags in shown.items()))
        elif key == "topology":
            problems.append(
                "topology: "
                + "; ".join(
                    f"{h} " + (", ".join(f"node {n} cpus {c}" for n, c in (v or {}).items()) or "unknown")
                    for h, v in values.items()
                )
            )
        else:
            problems.append(f"{key}: " + "; ".join(f"{h} {v!r}" for h, v in values.items()))
    return problems


def choose_hosts(names: list[str] | str, mode: str, states: dict[str, HostState], force: bool = False) -> list[str]:
    """The hosts a sweep runs on, every one alive; for split, identical unless forced."""
    if names == "all":
        chosen = [name for name, state in sorted(states.items()) if state.online]
        if not chosen:
            known = ", ".join(f"{n} (offline)" for n in states) or "none"
            raise OmniError(
                f"hosts: all, but no host is alive (known: {known}). Start omni worker --host NAME "
                "on each benchmark host, with PREFECT_API_URL set to this server; omni hosts lists them"
            )
    else:
        chosen = list(names)
        absent = [states.get(n, HostState(n, None, False, None)) for n in chosen]
        absent = [s.describe_absence() for s in absent if not s.online]
        if absent:
            alive = ", ".join(n for n, s in states.items() if s.online) or "none"
            raise OmniError(
                "; ".join(absent) + f". Alive hosts: {alive}. Start omni worker --host NAME there "
                "(with PREFECT_API_URL set to this server), or name other hosts"
            )
    if mode == "split" and len(chosen) > 1:
        check_identical({n: states[n].facts for n in chosen}, force)
    return chosen


def check_identical(facts: dict[str, dict], force: bool) -> None:
    differ = split_differences(facts)
    if differ and not force:
        raise OmniError(
            "mode: split spreads one plan's passes over hosts that must be identical, and these differ: "
            + " | ".join(differ)
            + ". Use mode: replicate to run the plan on each host and compare them, or --force-hosts to split anyway"
        )


def assign(loaded, sweep_id: str, passes: int, hosts: list[str], mode: str) -> dict[str, list[str]]:
    """Each host's run ids, in plan order: replicate gives every host the whole
    plan (run ids of its own); split gives pass p to host p mod n, so each host
    runs whole passes (every arm, interleaved) and arms stay comparable on it."""
    from omni.run.plan import plan_sweep

    if mode == "replicate":
        return {h: [i.run_id for i in plan_sweep(loaded, sweep_id, [NO_SLOT], passes, host=h)] for h in hosts}
    items = plan_sweep(loaded, sweep_id, [NO_SLOT], passes)
    return {h: [i.run_id for i in items if i.pass_index % len(hosts) == k] for k, h in enumerate(hosts)}


def require_server() -> None:
    if not os.environ.get("PREFECT_API_URL"):
        raise OmniError(
            "this sweep names hosts: (a fleet sweep): it runs through a Prefect server and omni worker --host NAME "
            "on each host; set PREFECT_API_URL (omni stack up prints it), or remove hosts: to run on this host"
        )


def read_fleet(pool: str = POOL) -> dict[str, HostState]:
    """:func:`read_hosts` through a client of the Prefect server at
    PREFECT_API_URL (which must be set)."""
    from prefect.client.orchestration import get_client

    require_server()
    with get_client(sync_client=True) as client:
        return read_hosts(client, pool)
