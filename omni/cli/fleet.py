"""``omni serve``, ``omni worker`` and ``omni hosts``: the commands that work
through a Prefect server (the deployments, a fleet host's worker, the
fleet's hosts); ``omni.cli.main`` adds them to the ``omni`` command."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import typer

from omni.cli import render
from omni.cli.console import show
from omni.cli.options import directory_to_make, host_name, sysfs_option


def serve() -> None:
    """Serve the sweep/manual and sweep/nightly deployments from this process
    (no work pool or worker needed; a Prefect server must be reachable)."""
    from flows.serve import serve_deployments

    serve_deployments()


def worker(
    host: str = typer.Option(..., "--host", callback=host_name, help="this host's name in the fleet, e.g. spr-1"),
    lock_dir: Path | None = typer.Option(
        None,
        "--lock-dir",
        callback=directory_to_make,
        help="CPU lock directory (default $OMNI_LOCK_DIR or /tmp/omni-locks)",
    ),
    sysfs_root: Path = sysfs_option("plan on this sysfs fixture's topology (placement recorded, not applied)"),
    heartbeat: int = typer.Option(10, min=1, max=3600, help="seconds between heartbeats; 3 missed: offline"),
) -> None:
    """Serve this host in the fleet: publish its facts, then run a Prefect process
    worker on pool omni polling work queue host-HOST (needs PREFECT_API_URL)."""
    from flows.worker import run_worker
    from omni.run.schedule import lock_dir as default_lock_dir

    run_worker(host, lock_dir or default_lock_dir(), sysfs_root, heartbeat, say=lambda line: print(line, flush=True))


def hosts(as_json: bool = typer.Option(False, "--json", help="one JSON object per host")) -> None:
    """The fleet's hosts (omni worker --host), their facts and whether each is alive."""
    from datetime import datetime

    from omni.fleet.hosts import read_fleet

    states = list(read_fleet().values())
    if as_json:
        if states:
            print(render.hosts_json(states))
        return
    show(render.hosts(states, datetime.now(UTC)))
