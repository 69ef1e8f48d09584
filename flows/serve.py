"""``omni serve``: prefect.yaml's deployments served from this process.

The server-less alternative to a work pool and worker (a Prefect server is
still needed to hold the schedule and take ``prefect deployment run``). The
deployments are built from ``prefect.yaml`` itself, so names, parameters and
the nightly cron are the same both ways.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from prefect import serve
from prefect.schedules import Schedule

from flows.sweep import sweep

PREFECT_YAML = Path(__file__).resolve().parent.parent / "prefect.yaml"


def build_deployments(path: Path = PREFECT_YAML) -> list:
    deployments = []
    for entry in yaml.safe_load(path.read_text())["deployments"]:
        if entry["entrypoint"] != "flows/sweep.py:sweep":
            continue  # a fleet's shards are routed to host queues, which only a work pool has
        schedules = [Schedule(cron=s["cron"], timezone=s.get("timezone", "UTC")) for s in entry.get("schedules") or []]
        deployments.append(
            sweep.to_deployment(
                name=entry["name"],
                parameters=entry.get("parameters", {}),
                description=entry.get("description"),
                schedules=schedules or None,
            )
        )
    return deployments


def serve_deployments() -> None:
    serve(*build_deployments())
