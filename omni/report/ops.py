"""A sweep's profiled runs and their stored ops (``omni ops``): the ops of
one kind of engine step, each with its run's status, retracted runs left out
unless asked for.
"""

from __future__ import annotations

from pathlib import Path

from omni.errors import OmniError
from omni.measure.ops import STEP_KINDS
from omni.store.objstore import results_root
from omni.store.reading import load_ops, load_runs
from omni.store.reading import profiled as is_profiled
from omni.store.retract import without_retracted


def sweep_ops(results: Path, sweep_id: str, steps: str = "decode", include_retracted: bool = False):
    """(ops of the sweep's unretracted profiled runs, their run rows): the ops of
    steps of kind ``steps`` (omni.measure.ops.STEP_KINDS), each with its run's status."""
    if steps not in STEP_KINDS:
        raise OmniError(f"--steps {steps!r}: use one of {', '.join(STEP_KINDS)}")
    runs = load_runs(results, sweep_id=sweep_id)
    if runs.empty:
        raise OmniError(f"no rows for sweep {sweep_id!r} under {results_root(results) / 'runs'}")
    runs = without_retracted(runs[is_profiled(runs)], results, include_retracted)[0].sort_values("order_index")
    if runs.empty:
        raise OmniError(f"sweep {sweep_id} has no profiled run: give an arm profile: {{steps: 16}} to get some")
    ops = load_ops(results, sweep_id)
    ops = ops[ops["run_id"].isin(runs["run_id"])]
    if steps != "all":
        ops = ops[ops["step_kind"] == steps]
    status = dict(zip(runs["run_id"], runs["status"]))
    return ops.assign(status=ops["run_id"].map(status)), runs
