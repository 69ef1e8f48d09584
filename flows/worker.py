"""A fleet host's Prefect side: its work queue on pool ``omni``, its facts as a
Prefect Variable, the shard deployment registered, and the Prefect process
worker that serves the queue (``omni worker --host NAME``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from omni import REPO_ROOT
from omni.errors import OmniError
from omni.fleet.hosts import (
    POOL,
    SHARD_DEPLOYMENT,
    SHARD_PARAMETERS,
    SYSFS_VAR,
    host_facts,
    queue_name,
    require_server,
    variable_name,
)
from omni.host.provenance import HOST_VAR
from omni.run.schedule import LOCK_DIR_VAR


def publish(client, facts: dict) -> None:
    """The host's facts as its Variable (created, or replaced)."""
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate

    name = variable_name(facts["host"])
    if client.read_variable_by_name(name) is None:
        client.create_variable(VariableCreate(name=name, value=facts, tags=["omni-host"]))
    else:
        client.update_variable(VariableUpdate(name=name, value=facts))


def ensure_queue(client, host: str, pool: str = POOL) -> None:
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    try:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    except ObjectAlreadyExists:
        pass
    try:
        client.create_work_queue(
            name=queue_name(host),
            work_pool_name=pool,
            description=f"runs of fleet host {host} (omni worker --host {host})",
        )
    except ObjectAlreadyExists:
        pass


def run_worker(
    host: str, locks: Path, sysfs_root: Path, heartbeat_s: int, say: Callable[[str], None], pool: str = POOL
) -> None:
    """Serve host ``host``: publish its facts, then run a Prefect process worker
    on its queue until stopped; ``say`` shows the worker's own lines (started,
    stopped). Flow runs it starts inherit OMNI_HOST, the lock directory and
    the sysfs root through their environment."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.workers.process import ProcessWorker

    from omni.spec.arm import HOST_NAME

    if not HOST_NAME.match(host):
        raise OmniError(f"--host {host!r}: use lower-case letters, digits, _ and - (starting with a letter or digit)")
    require_server()
    os.environ[HOST_VAR] = host
    os.environ[LOCK_DIR_VAR] = str(locks.resolve())
    os.environ[SYSFS_VAR] = str(sysfs_root.resolve())
    facts = host_facts(host, sysfs_root, locks.resolve())
    with get_client(sync_client=True) as client:
        ensure_queue(client, host, pool)
        ensure_shard_deployment(client)
        publish(client, facts)
    worker = ProcessWorker(
        work_pool_name=pool,
        work_queues=[queue_name(host)],
        name=queue_name(host),
        heartbeat_interval_seconds=heartbeat_s,
    )
    say(
        f"host {host}: worker {queue_name(host)} on pool {pool}, queue {queue_name(host)}, locks {locks}, "
        f"heartbeat every {heartbeat_s} s"
    )
    asyncio.run(worker.start(printer=lambda *parts, **_: say(" ".join(map(str, parts)))))


def ensure_shard_deployment(client) -> None:
    """prefect.yaml's deployments registered (``prefect deploy --all``) when the
    shard deployment is missing or takes other parameters than this omni's
    sweep_shard; their working directory is this checkout."""
    import subprocess
    import sys

    from prefect.exceptions import ObjectNotFound

    try:
        deployment = client.read_deployment_by_name(SHARD_DEPLOYMENT)
        if set((deployment.parameter_openapi_schema or {}).get("properties", {})) == set(SHARD_PARAMETERS):
            return
    except ObjectNotFound:
        pass
    prefect = Path(sys.executable).with_name("prefect")
    done = subprocess.run(
        [str(prefect), "--no-prompt", "deploy", "--all"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise OmniError(f"prefect deploy --all in {REPO_ROOT} failed: {(done.stdout + done.stderr)[-1500:]}")
