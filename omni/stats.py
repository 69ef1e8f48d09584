"""Statistics over measurements: pure functions, floats in, frozen dataclasses out.

No I/O, no pandas, no Prefect here (STYLE.md 4).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Description:
    """n, median, min and max of one arm's values for one metric.

    Missing values (None, NaN: a failed run, a metric the engine does not
    report) are not values: ``n`` counts only real ones.
    """

    n: int
    median: float | None
    min: float | None
    max: float | None


def describe(values: Iterable[float | None]) -> Description:
    real = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not real:
        return Description(0, None, None, None)
    return Description(len(real), statistics.median(real), min(real), max(real))


@dataclass(frozen=True)
class ArmTable:
    """Per arm, per metric descriptions, in the order arms were given."""

    arms: tuple[str, ...]
    metrics: tuple[str, ...]
    cells: Mapping[tuple[str, str], Description]
    runs: Mapping[str, int]  # all runs of the arm, ok or not


def describe_arms(rows: Iterable[Mapping], metrics: tuple[str, ...], ok_status: str = "ok") -> ArmTable:
    """Describe each metric per arm over the rows whose status is ``ok_status``."""
    values: dict[tuple[str, str], list] = {}
    runs: dict[str, int] = {}
    for row in rows:
        arm = row["arm"]
        runs[arm] = runs.get(arm, 0) + 1
        for metric in metrics:
            bucket = values.setdefault((arm, metric), [])
            if row.get("status") == ok_status:
                bucket.append(row.get(metric))
    arms = tuple(runs)
    cells = {(a, m): describe(values.get((a, m), [])) for a in arms for m in metrics}
    return ArmTable(arms, metrics, cells, runs)
