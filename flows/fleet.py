"""Fleet sweeps in Prefect: the ``sweep-shard`` flow a host's worker runs, and
the coordinator the ``sweep`` flow calls for a spec with ``hosts:``.

The coordinator sends each host its part with ``run_deployment`` routed to
the host's work queue, then watches the parts' flow runs and the hosts'
worker heartbeats until every part ended or its host went offline. Rows come
back through the shared results store, not through Prefect: a part's outcome
is what it stored, so a host that dies leaves exactly its unstored runs for
``--resume``.
"""

from __future__ import annotations

import os
import time

import pandas as pd
from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from prefect.states import Completed, Crashed, Failed

from flows.runs import failure_summary, run_items, warn_host_conditions, watch_worker
from omni.errors import OmniError
from omni.fleet.hosts import SHARD_DEPLOYMENT, SYSFS_VAR, HostState, queue_name, read_hosts
from omni.host.provenance import HOST_VAR
from omni.store.reading import load_runs
from omni.sweep.execute import OUTCOME_KEYS, SKIPPED, item_outcome, row_outcome
from omni.sweep.prepare import PreparedSweep, Shard, prepare_sweep
from omni.sweep.request import SweepRequest

POLL_S = 2.0
# a part may take this long past its runs' own timeouts (worker start, flow-run start, storing)
SLACK_S = 600.0


@flow(name="sweep-shard", log_prints=False)
def sweep_shard(request: SweepRequest, host: str, run_ids: list[str], plan_host: str | None = None):
    """Run ``run_ids`` of the fleet sweep ``request`` resumes on this host's slots
    and store their rows; the host is the worker's (``omni worker --host``), and
    must be ``host``. Runs already stored are skipped, so a part sent twice runs once."""
    watch_worker()
    sweep_id = request.resume
    serving = os.environ.get(HOST_VAR)
    if serving != host:
        raise OmniError(
            f"this part of sweep {sweep_id} is for host {host}, but the worker that took it serves "
            f"{'host ' + serving if serving else 'no host (it is not omni worker --host)'}: only omni worker "
            f"--host {host} may poll work queue {queue_name(host)}"
        )
    here = SweepRequest(**{**request.flow_parameters(), "sysfs_root": os.environ.get(SYSFS_VAR, "/")})
    prepared = prepare_sweep(here, shard=Shard(plan_host or host, tuple(run_ids)))
    log = get_run_logger()
    log.info(
        "host %s: %d of %d run(s) of sweep %s to go on %s",
        host,
        len(prepared.items),
        len(run_ids),
        sweep_id,
        "; ".join(s.describe() for s in prepared.slots),
    )
    warn_host_conditions(prepared)
    outcomes = run_items(prepared)
    failed = [o for o in outcomes if o["status"] not in ("ok", SKIPPED)]
    if failed:
        return Failed(message=f"host {host}: " + failure_summary(failed, len(outcomes)))
    return Completed(message=f"host {host}: {len(outcomes)} run(s) ok")


def run_fleet(prepared: PreparedSweep) -> tuple[list[dict], list[str]]:
    """Send every part to its host, wait for all of them; each run's outcome
    (from the stored rows) and one line per part that did not end Completed."""
    from prefect.deployments import run_deployment

    log = get_run_logger()
    me = flow_run.get_id() or "local"
    launched = []
    part = prepared.request.fleet_part(prepared.sweep_id).flow_parameters()
    for shard in prepared.fleet["shards"]:
        run = run_deployment(
            SHARD_DEPLOYMENT,
            parameters={
                "request": part,
                "host": shard["host"],
                "run_ids": shard["run_ids"],
                "plan_host": shard["plan_host"],
            },
            work_queue_name=queue_name(shard["host"]),
            # a retried coordinator finds the part it already sent instead of sending it again
            idempotency_key=f"{me}:{shard['host']}:{shard['plan_host']}",
            flow_run_name=f"{prepared.sweep_id}@{shard['host']}",
            timeout=0,
        )
        launched.append((shard, run.id))
        log.info("host %s: %d run(s) sent as flow run %s", shard["host"], len(shard["run_ids"]), run.id)
    budget = SLACK_S + max((len(s["run_ids"]) for s in prepared.fleet["shards"]), default=0) * (
        prepared.context.timeout_s + prepared.context.busy_wait_s
    )
    ended = wait_for_parts(launched, budget)
    return outcomes_of(prepared, launched, ended)


def wait_for_parts(launched: list[tuple[dict, object]], budget_s: float) -> dict[object, tuple[str, str]]:
    """Each part's end: its final state's type and message, or LOST with why
    (its host went offline, or it outlived the budget); a lost part's flow run
    is set Crashed, so it does not stay Running on the server."""
    from prefect.client.orchestration import get_client

    log = get_run_logger()
    ended: dict[object, tuple[str, str]] = {}
    deadline = time.monotonic() + budget_s
    with get_client(sync_client=True) as client:
        while len(ended) < len(launched):
            time.sleep(POLL_S)
            hosts = read_hosts(client)
            for shard, run_id in launched:
                if run_id in ended:
                    continue
                state = client.read_flow_run(run_id).state
                host = shard["host"]
                if state is not None and state.is_final():
                    ended[run_id] = (state.type.value, state.message or "")
                    log.info("host %s: part ended %s: %s", host, state.type.value, state.message)
                    continue
                alive = hosts.get(host, HostState(host, None, False, None))
                why = None
                if not alive.online:
                    why = f"{alive.describe_absence()}, mid-sweep"
                elif time.monotonic() > deadline:
                    why = f"host {host}'s part did not end within {budget_s:.0f} s"
                if why:
                    client.set_flow_run_state(run_id, Crashed(message=why), force=True)
                    ended[run_id] = ("LOST", why)
                    log.error("%s", why)
    return ended


def outcomes_of(
    prepared: PreparedSweep, launched: list[tuple[dict, object]], ended: dict[object, tuple[str, str]]
) -> tuple[list[dict], list[str]]:
    """Every sent run's outcome as its stored row says; a run with no row is
    ``not stored``, with why its part ended."""
    columns = [*OUTCOME_KEYS, "host"]
    rows = load_runs(prepared.request.results, sweep_id=prepared.sweep_id, columns=columns).astype(object)
    stored = {r["run_id"]: {k: (None if pd.isna(v) else v) for k, v in r.items()} for r in rows.to_dict("records")}
    items = {item.run_id: item for item in prepared.items}
    outcomes, lines = [], []
    for shard, run_id in launched:
        kind, message = ended[run_id]
        missing = [r for r in shard["run_ids"] if r not in stored]
        if kind != "COMPLETED":
            lines.append(
                f"host {shard['host']}: its part ended {kind}: {message}; {len(missing)} of its "
                f"{len(shard['run_ids'])} run(s) not stored. `omni sweep --resume {prepared.sweep_id}` runs "
                f"exactly those once the host is back (or --replace-host {shard['host']}=OTHER)"
            )
        for rid in shard["run_ids"]:
            row = stored.get(rid)
            if row is None:  # placed by its host, which did not store it: no slot to report
                why = f"host {shard['host']}: {message or kind}"
                outcomes.append(item_outcome(items[rid], "not stored", why, slot_index=None, host=shard["host"]))
                continue
            slot = None if row["slot_index"] is None else int(row["slot_index"])
            outcomes.append(row_outcome(row, pass_index=int(row["pass_index"]), slot_index=slot, host=row["host"]))
    return outcomes, lines
