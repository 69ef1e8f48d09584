"""Running a sweep through the sweep flow from the command line: Prefect's
temporary server as a benchmark host needs it, the session's watchdog, and
the flow on a prepared sweep (``omni sweep``, ``calibrate``, ``reproduce``)."""

from __future__ import annotations

import os
from pathlib import Path

from flows.prefect_server import prefect_api, start_ephemeral_server
from omni.cli.console import err, with_progress
from omni.errors import OmniError


def quiet_prefect() -> None:
    """Prefect's console at warnings and errors (unless the user set its
    level): no INFO line per flow and task run. Its API still records them.
    Read when prefect is first imported, so called before that."""
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")


def prefect_defaults() -> None:
    """Prefect's temporary server as a benchmark host needs it, unless the user
    set otherwise: no phoning home (hosts are often offline), and 90 s rather
    than 20 s to start (a loaded host, or two sweeps starting at once, missed 20)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


def session_guard():
    """Tag everything this command starts, so a watchdog reaps it if we die.

    Prefect's temporary server is a subprocess of ours: without this, a
    SIGKILLed ``omni sweep`` would leave it running forever.
    """
    import uuid

    from omni.run.reaper import SESSION_VAR, Watchdog

    os.environ[SESSION_VAR] = uuid.uuid4().hex
    return Watchdog(os.environ[SESSION_VAR], var=SESSION_VAR)


def flow_on(prepared, server, live: bool) -> dict:
    """The sweep flow on a prepared sweep, in this process, under the Prefect
    API ``server`` (None: PREFECT_API_URL's), with live progress per slot or
    none; the flow's summary. The flow is given the request alone, with the
    prepared runs' ids in it, and prepares the sweep again from it
    (milliseconds; the same plan and runs), so its run record holds all it
    ran from."""
    from flows.sweep import sweep as sweep_flow

    request = prepared.request
    if not prepared.fleet:  # the runs shown are the runs run, whatever another process stores meanwhile
        request = request.model_copy(update={"run_ids": tuple(item.run_id for item in prepared.items)})
    with session_guard(), prefect_api(server):
        return with_progress(prepared, live, lambda: call_flow(sweep_flow, **request.flow_parameters()))


def run_local_sweep(spec: Path, passes, results: str, force: bool) -> str:
    """Run a spec through the flow as `omni sweep` does; its sweep id."""
    from omni.sweep.request import SweepRequest

    return run_request(SweepRequest(spec=spec, passes=passes, results=results, force=force))


def run_request(request) -> str:
    """A sweep request (omni.sweep.request.SweepRequest) through the flow,
    with live progress; its sweep id. Runs that did not end ok are said."""
    prefect_defaults()
    server = start_ephemeral_server()
    from omni.sweep.prepare import prepare_sweep

    prepared = prepare_sweep(request)
    summary = flow_on(prepared, server, live=True)
    if summary["failed"]:
        err.print(
            f"{len(summary['failed'])} run(s) of sweep {summary['sweep_id']} did not end ok; what follows "
            "reads the ok ones",
            markup=False,
        )
    return summary["sweep_id"]


def call_flow(sweep_flow, **params) -> dict:
    """The sweep flow's summary, whether it ended Completed or Failed (runs
    that failed are rows, reported by the caller); a flow that broke raises."""
    state = sweep_flow(**params, return_state=True)
    summary = state.result(raise_on_failure=False)
    if not isinstance(summary, dict):
        raise (
            summary
            if isinstance(summary, BaseException)
            else OmniError(f"sweep flow ended {state.type}: {state.message}")
        )
    return summary
