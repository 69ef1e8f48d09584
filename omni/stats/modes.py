"""Two states: whether an arm's runs fall into two clusters, and what
measured telemetry separates them.

Pure (STYLE.md 4): floats and row dicts in, frozen dataclasses out; numpy only.

On a shared host an arm's engine processes often run in one of two states
(vLLM decode near 480 tok/s in one process, near 1150 in the next), while the
iterations within a process agree to a few percent. A summary that pools
them shows only a wide interval; :func:`detect_modes` says there are two
states, and :func:`explain_modes` names the per-run telemetry whose values
lie apart between them.

Detection, on the log of the run values (one per run: the median of its
iterations): the best two-way split of the sorted logs (Otsu's threshold,
Jenks' natural breaks for two classes), each side at least
:data:`MIN_CLUSTER` runs, scored by the ratio of the between-cluster to the
within-cluster sum of squares. The ratio is location- and scale-free: its
distribution depends on n and the shape of the runs' spread only. Two
states are the claim, so the null is a continuum of states, not one normal
spread (against which a uniform continuum was split 9-19 % of the time at
5-12 runs, at a stated 5 %): :data:`CRITICAL` holds, per n, the larger of
the ratio's 95th percentiles for uniform and for exponential run levels
(:data:`NULLS`, :func:`critical_values`; tests/unit/test_modes.py
regenerates it). Simulated at 5-12 runs (10 % spread, 1 % noise): a uniform
continuum is split 4.3-4.9 % of the time, an exponential one 3.4-4.6 %, a
normal spread 0.7-2.4 %, a gamma(2) or log-normal(0.5) one 1.9-3.1 %. A
heavier tail of slow runs splits more often: gamma(0.5) levels (most runs
near the fastest, a few far slower) 5-9 % from 6 runs on, the split then
naming a slow group rather than proving two states. A split whose states
differ by less than ``min_swing`` is not reported (which only lowers these
rates). Below :data:`MIN_RUNS` runs nothing is said. Power is in
docs/statistics.md ("Two states: bimodal runs"): at 6 runs a 30 % swing is
found 76 % (3 / 3) or 70 % (2 / 4) of the time with 3 % noise within a
state (92 % and 89 % against the normal null), 28 % with 5 %, 8 % with 8 %;
a 2x swing at 8 % noise 75 %, 2.4x 93 %.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from omni.cpulist import parse_cpulist

ALPHA = 0.05  # the chance of splitting an arm whose runs spread in a continuum (NULLS)
MIN_RUNS = 5  # below this, say nothing: 2 v 2 runs is no evidence of states
MIN_CLUSTER = 2  # a single run apart is an outlier (stats.outliers), not a state

# 95th percentile of the best split's between/within sum of squares, the larger
# of its uniform and exponential ones (NULLS), per n:
# critical_values(range(5, 31), draws=1_000_000, seed=20261205), 57 s on one core.
# The uniform's is the larger at 5-7 and 15-30 runs, the exponential's at 8-14
# (by up to 4 %). At 10^6 draws a value's own Monte Carlo error moves the rate
# it gives by 0.02 points. Above 30 runs the table's last value serves: the
# percentile falls with n, so it is conservative there.
CRITICAL = {
    5: 30.39,
    6: 20.34,
    7: 15.41,
    8: 12.76,
    9: 11.16,
    10: 10.05,
    11: 9.17,
    12: 8.44,
    13: 7.90,
    14: 7.42,
    15: 7.07,
    16: 6.80,
    17: 6.58,
    18: 6.36,
    19: 6.21,
    20: 6.06,
    21: 5.93,
    22: 5.80,
    23: 5.69,
    24: 5.61,
    25: 5.50,
    26: 5.43,
    27: 5.35,
    28: 5.28,
    29: 5.22,
    30: 5.16,
}


def split_scores(logs: np.ndarray, min_cluster: int = MIN_CLUSTER) -> tuple[np.ndarray, np.ndarray]:
    """(best between/within ratio, size of the low side) for each row of
    ``logs`` (draws x n), over every split of the sorted row leaving at least
    ``min_cluster`` values on each side; vectorised for the simulations.
    A split with no spread within its clusters but some between scores inf."""
    x = np.sort(logs, axis=1)
    n = x.shape[1]
    sums, squares = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    k = np.arange(1, n)
    low_sum, low_sq = sums[:, :-1], squares[:, :-1]
    high_sum, high_sq = sums[:, -1:] - low_sum, squares[:, -1:] - low_sq
    within = (low_sq - low_sum**2 / k) + (high_sq - high_sum**2 / (n - k))
    total = squares[:, -1:] - sums[:, -1:] ** 2 / n
    # floating cancellation: sums of squares below 1e-12 of the total are zero
    scale = np.maximum(total, 1e-300)
    within = np.where(within < 1e-12 * scale, 0.0, within)
    between = np.maximum(total - within, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(within > 0, between / within, np.where(between > 1e-12 * scale, np.inf, 0.0))
    allowed = (k >= min_cluster) & (n - k >= min_cluster)
    ratio = np.where(allowed, ratio, -np.inf)
    best = np.argmax(ratio, axis=1)
    return ratio[np.arange(len(x)), best], k[best]


def _uniform(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    return rng.random(size)


def _exponential(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    return rng.exponential(1.0, size)


# The unimodal spreads of run levels (logs) that the best split separates most
# often, and that an arm's runs take: a flat continuum of states (uniform: the
# flattest unimodal shape; Hartigan & Hartigan 1985 calibrate the dip test of
# unimodality against it for that reason) and a one-sided one, slowdowns of
# every size, the larger the fewer (exponential). The normal splits far less.
NULLS = {"uniform": _uniform, "exponential": _exponential}


def critical_values(ns: Sequence[int], draws: int, seed: int, alpha: float = ALPHA) -> dict[int, float]:
    """Per n in ``ns``: the largest, over the shapes of :data:`NULLS`, of the
    (1 - alpha) quantile of the best split's ratio for n values of that
    shape, from ``draws`` simulated samples each (in chunks, to bound memory;
    each shape its own stream of ``seed``)."""
    out = {}
    for i, draw in enumerate(NULLS.values()):
        rng = np.random.default_rng([seed, i])
        for n in ns:
            scores = []
            for start in range(0, draws, 200_000):
                size = min(200_000, draws - start)
                scores.append(split_scores(draw(rng, (size, n)))[0])
            out[n] = max(out.get(n, -math.inf), float(np.quantile(np.concatenate(scores), 1 - alpha)))
    return out


def critical_value(n: int) -> float | None:
    """:data:`CRITICAL` at n runs (its last entry above the table; None below it)."""
    if n < min(CRITICAL):
        return None
    return CRITICAL.get(n, CRITICAL[max(CRITICAL)])


def split_found(logs: np.ndarray, min_swing: float = 0.0) -> np.ndarray:
    """The decision of :func:`detect_modes` for each row of ``logs`` (draws x
    n, n >= :data:`MIN_RUNS`): the best split's ratio beyond the critical
    value and its states' medians ``min_swing`` apart. Vectorised for the
    simulations; :func:`detect_modes` decides by it too."""
    x = np.sort(logs, axis=1)
    statistic, low = split_scores(x)
    swing = np.empty(len(x))
    for k in np.unique(low):
        rows = low == k
        swing[rows] = np.exp(np.median(x[rows, k:], axis=1) - np.median(x[rows, :k], axis=1))
    return (statistic > critical_value(x.shape[1])) & (swing >= 1 + min_swing)


@dataclass(frozen=True)
class Cluster:
    """One state: its runs (positions in the values given, and run ids when given), their median."""

    indices: tuple[int, ...]
    run_ids: tuple[str, ...]
    median: float
    count: int


@dataclass(frozen=True)
class Modes:
    """Whether n run values fall into two states. ``clusters`` (low state
    first) and ``swing`` (high median / low median) are the best split's,
    also when it is not ``found``; ``reason`` says why nothing was tested."""

    n: int
    found: bool
    clusters: tuple[Cluster, Cluster] | None = None
    statistic: float | None = None  # between / within sum of squares of the logs
    critical: float | None = None
    swing: float | None = None
    min_swing: float = 0.0
    reason: str | None = None


def detect_modes(values: Sequence[float | None], run_ids: Sequence[str] | None = None, min_swing: float = 0.0) -> Modes:
    """Test run ``values`` for two states (Otsu / Jenks split of the logs,
    between/within sum of squares against :data:`CRITICAL`); ``min_swing``:
    the smallest relative difference of the states' medians worth reporting
    (the summary gives the metric's min_effect). Missing values are dropped;
    ``indices`` of the clusters point into ``values`` as given."""
    kept = [(i, float(v)) for i, v in enumerate(values) if v is not None and math.isfinite(float(v))]
    n = len(kept)
    if n < MIN_RUNS:
        return Modes(n, False, min_swing=min_swing, reason=f"fewer than {MIN_RUNS} runs")
    if min(v for _, v in kept) <= 0:
        return Modes(n, False, min_swing=min_swing, reason="a value <= 0 has no log")
    order = sorted(kept, key=lambda item: item[1])
    statistic, low = split_scores(np.log([[v for _, v in order]]))
    statistic, low = float(statistic[0]), int(low[0])
    clusters = tuple(cluster_of(order[a:b], run_ids) for a, b in ((0, low), (low, n)))
    swing = clusters[1].median / clusters[0].median
    found = bool(split_found(np.log([[v for _, v in order]]), min_swing)[0])
    return Modes(n, found, clusters, statistic, critical_value(n), swing, min_swing)


def cluster_of(items: list[tuple[int, float]], run_ids: Sequence[str] | None) -> Cluster:
    """The :class:`Cluster` of (position, value) ``items``, run ids looked up by position."""
    indices = tuple(sorted(i for i, _ in items))
    ids = tuple(str(run_ids[i]) for i in indices) if run_ids is not None else ()
    return Cluster(indices, ids, float(np.median([v for _, v in items])), len(items))


# --- what separates the states ---

# per-run telemetry columns worth comparing between states -> how to name them
NUMERIC = {
    "ctx_switches_involuntary": "involuntary context switches",
    "ctx_switches_voluntary": "voluntary context switches",
    "cpu_migrations": "CPU migrations",
    "run_delay_ms_per_s": "run-queue wait",
    "foreign_cpu_mean_pct": "foreign CPU load (mean)",
    "foreign_cpu_peak_pct": "foreign CPU load (peak)",
    "cpu_freq_mhz": "CPU frequency",
    "cpu_freq_min_mhz": "lowest CPU frequency",
    "steal_pct": "steal time",
    "irq_pct": "IRQ time",
    "major_faults": "major faults",
    "minor_faults": "minor faults",
    "power_w": "package power",
}
# Counts over the timed window that time drives (a preemption comes with a
# scheduler tick, a wait lasts while something else runs): a slow run's window
# is longer, so they are compared as rates (over telemetry_window_s). Counts
# that the work drives (a voluntary switch per step's barrier, a fault per
# page touched) are compared as counts: every run of an arm does the same work.
PER_SECOND = ("ctx_switches_involuntary", "cpu_migrations")
CATEGORICAL = ("slot_index", "numa_node", "host_conditions")
THREAD_FIELDS = {  # per second of the window, as PER_SECOND's, but nvcsw: a count
    "nivcsw": "involuntary switches",
    "nvcsw": "voluntary switches",
    "migrations": "migrations",
    "run_delay_ms": "run-queue wait",
    "cpu_s": "CPU share",
}
# the unit of a rate, as the medians are printed
UNITS = {**dict.fromkeys(PER_SECOND, "/s"), "run_delay_ms_per_s": " ms/s"}
THREAD_UNITS = {"nivcsw": "/s", "migrations": "/s", "run_delay_ms": " ms/s"}
THREAD_COUNTS = ("nvcsw",)
MIN_RATIO = 1.5  # a separating column's state medians differ at least this much
# ... except a frequency, which a few percent already explains
MIN_RATIO_BY_COLUMN = {"cpu_freq_mhz": 1.05, "cpu_freq_min_mhz": 1.05}


@dataclass(frozen=True)
class Separator:
    """A column whose values lie apart between the two states: every slow
    run's beyond every fast run's (``ratio`` of the medians, slow / fast,
    numeric columns) or no value shared (categorical ones)."""

    column: str  # the row column, or "thread_sched"
    key: str | None  # a JSON key of host_conditions, or "EngineCore.nivcsw"
    text: str
    ratio: float | None
    strength: float  # how far past its threshold: log ratio / log threshold; categorical first
    chance: float  # chance an unrelated column separates this completely at these counts
    counts: tuple[int, int]  # known values, slow side and fast


@dataclass(frozen=True)
class Explanation:
    separators: tuple[Separator, ...]
    checked: int  # columns (and thread fields, JSON keys) compared
    text: str


def explain_modes(
    slow_rows: Sequence[Mapping],
    fast_rows: Sequence[Mapping],
    labels: tuple[str, str] = ("slow", "fast"),
    min_known: int = 2,
) -> Explanation:
    """What measured per-run telemetry separates the slow state's runs from
    the fast's: a numeric column when the ranges do not overlap and the
    medians differ by :data:`MIN_RATIO` (a frequency by 5 %), a categorical
    one (slot, host_conditions per key) when no value is shared; each side
    needs 2 known values. Strongest first. Any column may be missing or None.

    With few runs complete separation happens by chance: an unrelated
    continuous column puts a runs' values all beyond b runs' with chance
    2 / C(a + b, a) (either direction): 20 % at 2 v 3, 10 % at 3 v 3, the
    ratio requirement lowering it; each separator carries that chance and
    the text says it."""
    slow, fast = _features(slow_rows), _features(fast_rows)
    names = [k for k in dict.fromkeys([*slow, *fast])]
    found = [s for name in names if (s := _separator(name, slow.get(name, []), fast.get(name, []), labels, min_known))]
    found.sort(key=lambda s: -s.strength)
    checked = sum(
        1 for name in names if _known(slow.get(name, [])) >= min_known and _known(fast.get(name, [])) >= min_known
    )
    if not found:
        text = f"nothing measured separates them ({checked} column(s) compared)"
    else:
        weakest = max(found, key=lambda s: s.chance)
        text = "; ".join(s.text for s in found[:3])
        text += f" and {len(found) - 3} more" if len(found) > 3 else ""
        text += (
            f" ({checked} column(s) compared; at {weakest.counts[0]} v {weakest.counts[1]} runs an unrelated "
            f"one separates completely {weakest.chance:.0%} of the time)"
        )
    return Explanation(tuple(found), checked, text)


def _features(rows: Sequence[Mapping]) -> dict[str, list]:
    """name -> one value per row (None where unknown): the numeric and
    categorical columns, host_conditions per JSON key, thread_sched per thread
    name and field (threads of one name summed)."""
    out: dict[str, list] = {}
    for i, row in enumerate(rows):
        window = _scalar(row.get("telemetry_window_s"))
        for name in (*NUMERIC, "slot_index", "numa_node"):
            if name in row:
                value = _scalar(row[name])
                if name in PER_SECOND:
                    value = value / window if value is not None and window else None
                out.setdefault(name, [None] * len(rows))[i] = value
        for key, value in _json_dict(row.get("host_conditions"), "host_conditions").items():
            out.setdefault(f"host_conditions.{key}", [None] * len(rows))[i] = json.dumps(value, sort_keys=True)
        for key, value in _threads(row.get("thread_sched"), window).items():
            out.setdefault(f"thread_sched.{key}", [None] * len(rows))[i] = value
    return out


def _scalar(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _json_dict(value, whole: str) -> dict:
    """A JSON object's keys; any other JSON (or text) as one value under ``whole``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return {}
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return {"": value}
    return parsed if isinstance(parsed, dict) else {"": parsed}


def _threads(value, window: float | None) -> dict[str, object]:
    """thread_sched JSON (a list of per-thread dicts) -> "name.field": total
    over the threads of that name a second of ``window`` (none without one),
    and "name.cpus": the CPUs they ran on."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return {}
    try:
        threads = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return {}
    out: dict[str, object] = {}
    for thread in threads if isinstance(threads, list) else []:
        if not isinstance(thread, Mapping) or not thread.get("name"):
            continue
        name = str(thread["name"])
        for field in THREAD_FIELDS if window else ():
            number = thread.get(field)
            if isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number):
                rate = number if field in THREAD_COUNTS else number / window
                out[f"{name}.{field}"] = out.get(f"{name}.{field}", 0) + rate
        cpus = thread.get("cpus")
        if isinstance(cpus, str):
            cpus = parse_cpulist(cpus)
        if isinstance(cpus, list):
            seen = set(json.loads(out.get(f"{name}.cpus", "[]"))) | set(cpus)
            out[f"{name}.cpus"] = json.dumps(sorted(seen))
    return out


def _known(values: list) -> int:
    return sum(v is not None for v in values)


def _separator(name: str, slow: list, fast: list, labels: tuple[str, str], min_known: int = 2) -> Separator | None:
    slow, fast = [v for v in slow if v is not None], [v for v in fast if v is not None]
    if len(slow) < min_known or len(fast) < min_known:
        return None
    chance = 2 / math.comb(len(slow) + len(fast), len(slow))
    column, _, key = name.partition(".")
    if name.endswith(".cpus") and min(len(slow), len(fast)) < 2:
        return None  # which CPUs one run's thread visited differs run to run: no evidence alone
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in slow + fast)
    if numeric and column != "slot_index" and column != "numa_node" and not name.endswith(".cpus"):
        return _numeric_separator(column, key or None, slow, fast, labels, chance)
    if {str(v) for v in slow} & {str(v) for v in fast}:
        return None
    what = _what(column, key or None)
    shown = [", ".join(sorted({str(v) for v in side})) for side in (slow, fast)]
    if column in ("slot_index", "numa_node"):
        text = f"the {labels[0]} runs ran on {what} {shown[0]}, the {labels[1]} on {shown[1]}"
    else:
        text = f"the {labels[0]} runs had {what} {shown[0]}, the {labels[1]} {shown[1]}"
    return Separator(column, key or None, text, None, math.inf, chance, (len(slow), len(fast)))


# What a count or share must exceed to mean something: the ratio is taken
# of median + floor, so 0.3 migrations a second against none is no 'infinite'
# difference, while 40 involuntary switches a second against none is.
FLOORS = {
    **dict.fromkeys(PER_SECOND, 10.0),
    "ctx_switches_voluntary": 10.0,
    "minor_faults": 10.0,
    "major_faults": 10.0,
    "run_delay_ms_per_s": 10.0,
    "foreign_cpu_mean_pct": 1.0,
    "foreign_cpu_peak_pct": 1.0,
    "steal_pct": 1.0,
    "irq_pct": 1.0,
    "power_w": 1.0,
}
THREAD_FLOORS = {"nivcsw": 10.0, "nvcsw": 10.0, "migrations": 10.0, "run_delay_ms": 10.0, "cpu_s": 0.01}


def _floor(column: str, key: str | None) -> float:
    if column == "thread_sched" and key:
        return THREAD_FLOORS.get(key.rpartition(".")[2], 0.0)
    return FLOORS.get(column, 0.0)


def _numeric_separator(column, key, slow, fast, labels, chance) -> Separator | None:
    if not (min(slow) > max(fast) or max(slow) < min(fast)):
        return None
    a, b = float(np.median(slow)), float(np.median(fast))
    if a < 0 or b < 0 or a == b:
        return None
    floor = _floor(column, key)
    ratio = math.inf if b + floor == 0 else (a + floor) / (b + floor)
    threshold = MIN_RATIO_BY_COLUMN.get(column, MIN_RATIO)
    if max(ratio, 1 / ratio if ratio else math.inf) < threshold:
        return None
    strength = abs(math.log(ratio)) / math.log(threshold) if 0 < ratio < math.inf else math.inf
    what = _what(column, key)
    unit = THREAD_UNITS.get(key.rpartition(".")[2], "") if column == "thread_sched" and key else UNITS.get(column, "")
    medians = f"median {_short(a)}{unit} vs {_short(b)}{unit}"
    shown = math.inf if b == 0 else a / b  # the medians' own ratio; the floored one only decides
    if shown == math.inf or shown == 0:
        text = f"the {labels[0]} runs had {_short(a)}{unit} {what}, the {labels[1]} {_short(b)}{unit}"
    elif 1 / MIN_RATIO < shown < MIN_RATIO:  # a frequency: a few percent
        text = f"the {labels[0]} runs had {abs(shown - 1):.0%} {'more' if shown > 1 else 'less'} {what} ({medians})"
    elif shown >= 1:
        text = f"the {labels[0]} runs had {_times(shown)} the {what} ({medians})"
    else:
        text = f"the {labels[0]} runs had {_times(1 / shown)} less {what} ({medians})"
    return Separator(column, key, text, ratio, strength, chance, (len(slow), len(fast)))


def _what(column: str, key: str | None) -> str:
    if column == "thread_sched" and key:
        thread, _, field = key.rpartition(".")
        return (
            f"{THREAD_FIELDS.get(field, field)} of the {thread} thread" if field != "cpus" else f"{thread} thread CPUs"
        )
    if column == "host_conditions":
        return f"host_conditions {key}" if key else "host_conditions"
    return {"slot_index": "slot", "numa_node": "NUMA node"}.get(column, NUMERIC.get(column, column))


def _times(ratio: float) -> str:
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def _short(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
