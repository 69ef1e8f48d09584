"""What a sweep's runs ran on and with (harness, host, engine, model): one
value per fact, or the different values seen, and the host settings
(:mod:`omni.host.conditions`) that changed under the sweep's runs.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from omni.host.conditions import changed_conditions

SWEEP_PROVENANCE = (
    "harness_version",
    "harness_git_sha",
    "harness_git_dirty",
    "host",
    "kernel",
    "cpu_model",
    "cpu_flags",
    "numa_nodes",
    "python_version",
    "spec_path",
    "spec_sha256",
)
ARM_PROVENANCE = (
    "engine",
    "engine_version",
    "engine_commit",
    "torch_version",
    "engine_python_version",
    "engine_env",
    "engine_env_freeze_sha256",
    "model",
    "model_digest",
)
# a sweep whose runs disagree on these did not measure one thing
MUST_AGREE = ("harness_git_sha", "host", "cpu_model", "kernel")


def _distinct(values) -> object:
    seen = []
    for value in values:
        value = list(value) if isinstance(value, (list, tuple, np.ndarray)) else value
        if value is None or (isinstance(value, float) and math.isnan(value)) or value in seen:
            continue
        seen.append(value)
    return None if not seen else seen[0] if len(seen) == 1 else seen


def host_changes(frame: pd.DataFrame) -> list[str]:
    """The host settings (omni.host.conditions) that took more than one value over the
    sweep's runs on one host: a governor or THP change mid-sweep moves the
    runs after it, and no verdict can tell that from the arms."""
    if "host_conditions" not in frame:
        return []
    lines = []
    for host, rows in frame.groupby(frame["host"] if "host" in frame else pd.Series("", index=frame.index)):
        seen = [json.loads(v) for v in rows["host_conditions"].dropna()]
        where = f" (host {host})" if frame.get("host", pd.Series()).nunique() > 1 else ""
        lines += [line + where for line in changed_conditions(seen)]
    return lines


def sweep_provenance(frame: pd.DataFrame, arms: list[str]) -> dict:
    """What the sweep's runs ran on and with: one value per fact, or the list
    of the different values seen (a sweep that straddled a commit says so)."""
    sweep = {key: _distinct(frame[key]) for key in SWEEP_PROVENANCE if key in frame}
    per_arm = {}
    for arm in arms:
        rows = frame[frame["arm"] == arm]
        per_arm[arm] = {key: _distinct(rows[key]) for key in ARM_PROVENANCE if key in rows}
        dists = [
            json.loads(p).get("engine_dist")
            for p in rows.get("engine_provenance", pd.Series([], dtype=object)).dropna()
        ]
        per_arm[arm]["engine_dist"] = _distinct(dists)
    return {"sweep": sweep, "arms": per_arm}
