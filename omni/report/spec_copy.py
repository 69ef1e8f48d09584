"""What a sweep's own spec copy (results/sweeps/<id>/spec.*) settles for its
conclusions: the baseline arm, the smallest effect that matters per metric,
and the primary metrics, which come first in every view.
"""

from __future__ import annotations

from pathlib import Path

from omni.history.calibration import metric_kind
from omni.spec import load_spec
from omni.spec.settings import DEFAULT_PRIMARY_METRICS
from omni.stats.verdicts import DEFAULT_MIN_EFFECT
from omni.store.objstore import local_copy, results_root


def sweep_spec(results: Path, sweep_id: str):
    """The sweep's own spec copy (results/sweeps/<id>/spec.*), or None; read
    for its settings, without the files it names (a prompts file may be gone
    or elsewhere, and nothing here needs it)."""
    copies = sorted((results_root(results) / "sweeps" / sweep_id).glob("spec.*"))
    return load_spec(local_copy(results, copies[0]), read_files=False).sweep if copies else None


def baseline_of(spec, arms: list[str]) -> str | None:
    """The baseline arm of the sweep's own spec copy (:func:`sweep_spec`); else the first arm."""
    if spec is not None and spec.baseline_arm in arms:
        return spec.baseline_arm
    return arms[0] if arms else None


def min_effects(spec, metrics: list[str]) -> dict[str, tuple[float, str]]:
    """metric -> (smallest effect that matters, where it came from): the
    ``min_effect`` of the sweep's spec copy (per metric, else its default),
    else omni's default."""
    given = spec.min_effect if spec is not None else None
    given = {"default": given} if isinstance(given, (int, float)) else (given or {})
    out = {}
    for metric in metrics:
        if metric in given:
            out[metric] = (float(given[metric]), f"spec min_effect.{metric}")
        elif "default" in given:
            out[metric] = (float(given["default"]), "spec min_effect")
        else:
            out[metric] = (DEFAULT_MIN_EFFECT[metric_kind(metric)], "default")
    return out


def primary_metrics(spec, metrics: list[str]) -> list[str]:
    """The sweep spec copy's primary metrics (else omni's default) that have
    values here, in the spec's order, then the other ``metrics``: the order
    of every view."""
    named = spec.primary_metrics if spec is not None else DEFAULT_PRIMARY_METRICS
    return [m for m in named if m in metrics] + [m for m in metrics if m not in named]
