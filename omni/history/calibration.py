"""Calibrations: A/A noise and between-sweep drift per workload, stored per host.

A workload is an arm's configuration without its name (:func:`workload_of`):
two arms that differ only by name, in any sweep, run the same workload. A
calibration is measured from one or more stored sweeps (``omni calibrate``
runs a spec ``--sweeps`` times and measures those):

- ``noise``: one run's relative noise within a sweep, the pooled sd of log
  run values around each (sweep, arm)'s mean; where a sweep's runs ran on
  several slots, around the arm + slot fit of all its arms
  (:func:`omni.stats.sweepfit.residual_sums`), as a verdict inside a sweep
  fits them: a slot's own speed is not run noise, and left in it would
  swamp the arms' relative noise a verdict scales by. Within a sweep passes
  are interleaved, so this is the noise verdicts inside a sweep live with.
- ``drift``: how much a whole sweep's level moves from sweep to sweep beyond
  that noise (:func:`omni.stats.verdicts.between_sweep_drift`). Interleaving cannot
  cancel it across sweeps, so cross-sweep ``compare`` and nightly regressions
  add it to their intervals. Needs 2 sweeps or more.

Records live in ``results/calibrations/<host>/<time>-<sweep>.json``; the
newest one that covers a workload applies to it.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from omni.errors import OmniError
from omni.stats.sweepfit import residual_sums
from omni.stats.verdicts import between_sweep_drift, drift_estimate
from omni.store.columns import COLUMNS_BY_NAME, metric_columns
from omni.store.objstore import ResultsPath, results_root, write_text_once
from omni.store.retract import ok_rows

MEMORY_UNITS = ("MiB", "B")


def metric_kind(metric: str) -> str:
    return "memory" if COLUMNS_BY_NAME[metric].unit in MEMORY_UNITS else "time"


def workload_of(arm_json: str) -> str:
    """The arm's configuration without its name, hashed: what runs, not what it is called
    (nor whether it also has profiled passes: its timed runs are the same)."""
    config = {k: v for k, v in json.loads(arm_json).items() if k not in ("name", "profile")}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def calibrations_dir(results: str | Path | ResultsPath, host: str) -> ResultsPath:
    return results_root(results) / "calibrations" / host


def measure(frame: pd.DataFrame, metrics: list[str]) -> dict[str, dict]:
    """Per workload of ok rows (columns sweep_id, arm, arm_json, metrics):
    arms, sweeps, runs, and per metric the noise and (2 sweeps or more) the drift."""
    frame = frame.assign(workload=[workload_of(a) for a in frame["arm_json"]])
    sums = {metric: _residuals(frame, metric) for metric in metrics}
    out = {}
    for workload, rows in frame.groupby("workload", sort=True):
        entry = {
            "arms": sorted(set(rows["arm"])),
            "engine": str(rows["engine"].iloc[0]) if "engine" in rows else None,
            "sweeps": sorted(set(rows["sweep_id"])),
            "runs": int(len(rows)),
            "noise": {},
            "noise_df": {},  # the degrees of freedom each noise was estimated from: its weight as a prior
            "drift": {},
        }
        for metric in metrics:
            valid = rows[rows[metric].notna() & (rows[metric] > 0)] if metric in rows else rows.iloc[0:0]
            parts = [sums[metric][key] for key in valid.groupby(["sweep_id", "arm"]).groups if key in sums[metric]]
            df = sum(d for _, d in parts)
            if df <= 0:
                continue
            noise = math.sqrt(sum(r for r, _ in parts) / df)
            entry["noise"][metric] = noise
            entry["noise_df"][metric] = df
            by_sweep = [g[metric].to_numpy(dtype=float) for _, g in valid.groupby("sweep_id")]
            if len(by_sweep) >= 2:
                entry["drift"][metric] = between_sweep_drift(by_sweep, noise)
        out[str(workload)] = entry
    return out


def _residuals(frame: pd.DataFrame, metric: str) -> dict[tuple, tuple[float, float]]:
    """(sweep, arm) -> (sum of squared log residuals, their df): around the
    arm + slot fit of the sweep's arms where its runs span slots, else
    around the arm's mean."""
    if metric not in frame:
        return {}
    valid = frame[frame[metric].notna() & (frame[metric] > 0)]
    out = {}
    for sweep_id, rows in valid.groupby("sweep_id"):
        arms = [(arm, runs) for arm, runs in rows.groupby("arm")]
        logs = [np.log(runs[metric].to_numpy(dtype=float)) for _, runs in arms]
        blocks = [list(runs["slot_index"]) if "slot_index" in runs else [None] * len(runs) for _, runs in arms]
        fitted = residual_sums(logs, blocks)
        if fitted is None:
            fitted = [(float(((x - x.mean()) ** 2).sum()), float(x.size - 1)) for x in logs]
        out.update({(sweep_id, arm): part for (arm, _), part in zip(arms, fitted)})
    return out


def write_calibration(results: Path, frame: pd.DataFrame, metrics: list[str]) -> Path:
    """Measure every workload in ``frame`` (ok rows of the calibration sweeps) and store it."""
    if frame.empty:
        raise OmniError("the calibration sweeps have no ok runs to measure: see their rows' errors (omni show)")
    workloads = measure(frame, metrics)
    if not any(w["noise"] for w in workloads.values()):
        raise OmniError("no workload ran twice in one sweep: calibration needs passes >= 2 (3 or more is better)")
    host = str(frame["host"].dropna().iloc[0]) if frame["host"].notna().any() else socket.gethostname()
    sweeps = sorted(set(frame["sweep_id"]))
    now = datetime.now(UTC)
    record = {
        "host": host,
        "sweeps": sweeps,
        "calibrated_at": now.isoformat(timespec="seconds"),
        "workloads": workloads,
    }
    path = calibrations_dir(results, host) / f"{now:%Y%m%dT%H%M%S}-{sweeps[-1]}.json"
    write_text_once(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def calibrate_from(results: Path, sweep_ids: list[str], include_retracted: bool = False) -> Path:
    """Measure every workload of these stored sweeps (A/A noise within each,
    drift between them) and store the calibration for their host."""
    frames = [ok_rows(results, sweep_id, include_retracted).ok for sweep_id in sweep_ids]
    frame = pd.concat(frames, ignore_index=True)
    hosts = set(frame["host"].dropna())
    if len(hosts) > 1:
        raise OmniError(
            f"sweeps {', '.join(sweep_ids)} ran on several hosts ({', '.join(sorted(hosts))}): "
            "a calibration is one host's; calibrate each host's sweeps apart"
        )
    return write_calibration(results, frame, metric_columns())


def load_calibrations(results: Path, host: str | None) -> list[tuple[Path, dict]]:
    """This host's calibrations, newest first; a file that is not one is an error naming it."""
    records = []
    for path in sorted(calibrations_dir(results, host or socket.gethostname()).glob("*.json"), reverse=True):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise OmniError(
                f"calibration {path} cannot be read ({err}); move it aside or rerun omni calibrate"
            ) from err
        if "workloads" in record:  # older host-wide records (one floor per metric) do not apply to workloads
            records.append((path, record))
    return records


@dataclass(frozen=True)
class Applied:
    """What a calibration says about one workload, and where that came from."""

    noise: dict[str, float]
    drift: dict[str, float]
    source: str  # "calibration <file> (sweeps ...)" or "none"
    sweeps: int = 0  # how many sweeps of the workload the drift was measured from
    noise_df: dict[str, float] = field(default_factory=dict)  # per metric, the df its noise was measured from

    def prior(self, metric: str) -> tuple[float, float] | None:
        """(variance of one run's log value, df) for ``metric``, the prior a
        verdict moderates this workload's variance with; None where the
        calibration did not measure it or predates its df (recalibrate)."""
        noise, df = self.noise.get(metric), self.noise_df.get(metric)
        if noise is None or not df or not math.isfinite(noise) or noise <= 0:  # a figure that never moved: no scale
            return None
        return float(noise) ** 2, float(df)

    def drift_for(self, metric: str) -> tuple[float, str]:
        """The between-sweep drift for ``metric`` and where it came from (:meth:`drift_estimate`)."""
        value, _, source = self.drift_estimate(metric)
        return value, source

    def drift_estimate(self, metric: str) -> tuple[float, float, str]:
        """(drift, its degrees of freedom, where it came from) for ``metric``
        (:func:`omni.stats.verdicts.drift_estimate` over this calibration)."""
        return drift_estimate(metric_kind(metric), self.drift.get(metric), self.sweeps, self.source)


NONE = Applied({}, {}, "none")


def applied(records: list[tuple[Path, dict]], workload: str) -> Applied:
    """The newest of ``records`` (:func:`load_calibrations`) that measured ``workload``."""
    for path, record in records:
        entry = record["workloads"].get(workload)
        if entry:
            return Applied(
                entry.get("noise", {}),
                entry.get("drift", {}),
                f"calibration {path.name} (sweeps {', '.join(record['sweeps'])})",
                len(entry.get("sweeps", record["sweeps"])),
                entry.get("noise_df", {}),
            )
    return NONE


def for_arms(results: Path, host: str | None, arm_jsons: dict[str, str]) -> dict[str, Applied]:
    """arm -> the calibration that applies to its workload (NONE when none does);
    the host's calibrations are read once for all arms."""
    records = load_calibrations(results, host)
    return {arm: applied(records, workload_of(text)) for arm, text in arm_jsons.items()}


def arm_calibrations(results: Path, frame: pd.DataFrame, arms: list[str]) -> dict[str, Applied]:
    """arm -> the calibration of its workload on the rows' host (:func:`for_arms`), NONE for an arm with no arm_json."""
    host = str(frame["host"].dropna().iloc[0]) if frame["host"].notna().any() else None
    texts = {
        arm: str(frame.loc[frame["arm"] == arm, "arm_json"].dropna().iloc[0])
        for arm in arms
        if frame.loc[frame["arm"] == arm, "arm_json"].notna().any()
    }
    found = for_arms(results, host, texts)
    return {arm: found.get(arm, NONE) for arm in arms}


def noise_floor(calibration: Applied, metric: str, default: float) -> float:
    value = calibration.noise.get(metric)
    return float(value) if value is not None and np.isfinite(value) else default
