"""A fleet host's Prefect side: its work queue on pool ``omni``, its facts as a
Prefect Variable, the shard deployment registered, and the Prefect process
worker that serves the queue (``omni worker --host NAME``).
"""

from __future__ import annotations

import os
import sys
import time
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

API_WAIT_S = 120.0  # a stack just started answers within seconds; a loaded host, within a minute


def publish(client, facts: dict) -> None:
    """The host's facts as its Variable (created, or replaced)."""
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate

    name = variable_name(facts["host"])
    if client.read_variable_by_name(name) is None:
        client.create_variable(VariableCreate(name=name, value=facts, tags=["omni-host"]))
    else:
        client.update_variable(VariableUpdate(name=name, value=facts))


def create_pool(client, pool: str = POOL) -> None:
    """The process work pool ``pool``, created unless it exists."""
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    try:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    except ObjectAlreadyExists:
        pass


def ensure_queue(client, host: str, pool: str = POOL) -> None:
    from prefect.exceptions import ObjectAlreadyExists

    create_pool(client, pool)
    try:
        client.create_work_queue(
            name=queue_name(host),
            work_pool_name=pool,
            description=f"runs of fleet host {host} (omni worker --host {host})",
        )
    except ObjectAlreadyExists:
        pass


def ensure_pool(pool: str = POOL, wait_s: float = API_WAIT_S) -> None:
    """Pool ``pool`` on the Prefect server at PREFECT_API_URL, created unless it
    exists, once the server answers: a stack that has just come up may refuse
    a request or two first, so this asks again each second for ``wait_s``,
    then says what the server last answered."""
    from prefect.client.orchestration import get_client

    require_server()
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with get_client(sync_client=True) as client:
                problem = client.api_healthcheck()
                if problem is None:
                    create_pool(client, pool)
                    return
        except Exception as error:  # noqa: BLE001 - not answering yet: ask again, then report it
            problem = error
        if time.monotonic() > deadline:
            raise OmniError(
                f"the Prefect server at {os.environ['PREFECT_API_URL']} did not answer within {wait_s:g} s "
                f"(last: {problem!r}); start it (omni stack up) or fix PREFECT_API_URL"
            )
        time.sleep(1.0)


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


if __name__ == "__main__":  # scripts/worker.sh: python -m flows.worker ensure-pool POOL
    if len(sys.argv) != 3 or sys.argv[1] != "ensure-pool":
        sys.exit("usage: python -m flows.worker ensure-pool POOL")
    try:
        ensure_pool(sys.argv[2])
    except OmniError as error:
        sys.exit(f"omni: {error}")
