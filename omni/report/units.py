"""Numbers for people: a value in its column's unit, scaled and never in
scientific notation (``43,351 tok/s``, ``0.49 s``, ``1.2 GiB``).

One formatter for every table omni prints; pure, so the Markdown report
(layer 4) and the command line (layer 6) both call it. Units are those of
the column registry (:mod:`omni.store.columns`).
"""

from __future__ import annotations

import math

from omni.store.columns import COLUMNS_BY_NAME

# A unit and, smallest first, the units it scales to with each one's size in it.
_SCALES: dict[str, tuple[tuple[str, float], ...]] = {
    "s": (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)),
    "ms": (("µs", 1e-3), ("ms", 1.0), ("s", 1e3)),
    "B": (("B", 1.0), ("KiB", 2.0**10), ("MiB", 2.0**20), ("GiB", 2.0**30), ("TiB", 2.0**40)),
    "MiB": (("KiB", 2.0**-10), ("MiB", 1.0), ("GiB", 2.0**10), ("TiB", 2.0**20)),
}
# Where a value stays in its column's unit (so one column reads in one unit
# as far as it can): times from 0.1 (0.49 s, 150 ms) to 1000, sizes from 1 to 1024.
_KEEP = {"s": (0.1, 1000.0), "ms": (0.1, 1000.0), "B": (1.0, 1024.0), "MiB": (1.0, 1024.0)}


def number(value: float | int, digits: int = 4) -> str:
    """``value`` with ``digits`` significant digits (all of an integer part),
    thousands separated, trailing zeros dropped: 43,351 / 245.1 / 0.004912."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = min(12, max(0, digits - 1 - math.floor(math.log10(abs(value)))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def quantity(value: float | int | None, unit: str | None = None, digits: int = 4) -> str:
    """``value`` in ``unit``, scaled to the unit that reads best: 0.049 s is
    ``49 ms``, 1234 MiB is ``1.205 GiB``; ``-`` for a missing value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit is None:
        return number(value, digits)
    scales = _SCALES.get(unit)
    if scales is None or isinstance(value, bool) or not math.isfinite(value):
        return f"{number(value, digits)} {unit}"
    low, high = _KEEP[unit]
    if value == 0 or low <= abs(value) < high:
        return f"{number(value, digits)} {unit}"
    base = value * dict(scales)[unit]
    name, size = scales[0]
    for candidate, candidate_size in scales:  # the largest unit with at least 1 of it
        if abs(base) >= candidate_size:
            name, size = candidate, candidate_size
    return f"{number(base / size, digits)} {name}"


def metric_unit(name: str) -> str | None:
    """The unit of a run column, e.g. ``decode_tok_s`` -> ``tok/s``; None if it has none."""
    column = COLUMNS_BY_NAME.get(name)
    return column.unit if column else None


def metric_quantity(value: float | int | None, metric: str, digits: int = 4) -> str:
    """A value of the run column ``metric`` in its unit, for people."""
    return quantity(value, metric_unit(metric), digits)


# A ratio's interval past these reads as "anything": at 2 runs and a strict
# level, Student's t puts bounds at 1e-20 and 1e+22, digits no one can use.
RATIO_SHOWN = (0.001, 1000.0)


def ratio_interval(low: float, high: float) -> str:
    """``[0.903, 1.004]``; a bound beyond 1/1000 or 1000 as ``<0.001`` or
    ``>1000``. An interval narrower than three decimals show gets the
    decimals that tell its bounds apart (up to 7): a memory figure's
    interval can be a page wide, and ``[1.000, 1.000]`` would read as no
    spread at all."""
    decimals = 3
    while decimals < 7 and low < high and f"{low:.{decimals}f}" == f"{high:.{decimals}f}":
        decimals += 1
    # past 3 decimals the bounds are rounded outwards, so a narrow interval that holds 1 still shows it
    low = math.floor(low * 10**decimals) / 10**decimals if decimals > 3 and math.isfinite(low) else low
    high = math.ceil(high * 10**decimals) / 10**decimals if decimals > 3 and math.isfinite(high) else high

    def bound(value: float) -> str:
        if value < RATIO_SHOWN[0]:
            return f"<{RATIO_SHOWN[0]:g}"
        if value > RATIO_SHOWN[1]:
            return f">{RATIO_SHOWN[1]:g}"
        return f"{value:.{decimals}f}"

    return f"[{bound(low)}, {bound(high)}]"
