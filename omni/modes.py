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
within-cluster sum of squares. Under a unimodal log-normal arm the logs are
normal, and the ratio is scale-free: its null distribution depends on n
only, the same at every cv. :data:`CRITICAL` holds its 95th percentile per n,
simulated (:func:`critical_values`; tests/unit/test_modes.py regenerates it),
so a unimodal arm is split 5 % of the time at most; a split whose states
differ by less than ``min_swing`` is not reported (which only lowers that
rate). Below :data:`MIN_RUNS` runs nothing is said. Power is in
docs/statistics.md ("Two states: bimodal runs"): at 6 runs a 30 % swing is
found 92 % (3 / 3) or 89 % (2 / 4) of the time with 3 % noise within a
state, under half with 5 %, 16 % with 8 %; a 2x swing at 8 % noise 92 %.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2
from scipy.stats import f as f_dist

from omni.topology import parse_cpulist

ALPHA = 0.05  # the chance of splitting a unimodal arm
MIN_RUNS = 5  # below this, say nothing: 2 v 2 runs is no evidence of states
MIN_CLUSTER = 2  # a single run apart is an outlier (stats.outliers), not a state

# 95th percentile of the best split's between/within sum of squares under a
# normal null, per n: critical_values(range(5, 31), draws=1_000_000, seed=20261203).
# Above 30 runs the table's last value serves: the percentile falls with n, so
# it is conservative there.
CRITICAL = {
    5: 18.50,
    6: 12.89,
    7: 9.94,
    8: 8.18,
    9: 7.09,
    10: 6.33,
    11: 5.76,
    12: 5.34,
    13: 5.00,
    14: 4.73,
    15: 4.51,
    16: 4.32,
    17: 4.15,
    18: 4.02,
    19: 3.90,
    20: 3.80,
    21: 3.70,
    22: 3.61,
    23: 3.53,
    24: 3.47,
    25: 3.41,
    26: 3.35,
    27: 3.30,
    28: 3.25,
    29: 3.20,
    30: 3.16,
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


def critical_values(ns: Sequence[int], draws: int, seed: int, alpha: float = ALPHA) -> dict[int, float]:
    """The (1 - alpha) quantile of the best split's ratio for n standard
    normal values, per n in ``ns``, from ``draws`` simulated samples each
    (in chunks, to bound memory)."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in ns:
        scores = []
        for start in range(0, draws, 200_000):
            size = min(200_000, draws - start)
            scores.append(split_scores(rng.standard_normal((size, n)))[0])
        out[n] = float(np.quantile(np.concatenate(scores), 1 - alpha))
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
    clusters = tuple(_cluster(order[a:b], run_ids) for a, b in ((0, low), (low, n)))
    swing = clusters[1].median / clusters[0].median
    found = bool(split_found(np.log([[v for _, v in order]]), min_swing)[0])
    return Modes(n, found, clusters, statistic, critical_value(n), swing, min_swing)


def _cluster(items: list[tuple[int, float]], run_ids: Sequence[str] | None) -> Cluster:
    indices = tuple(sorted(i for i, _ in items))
    ids = tuple(str(run_ids[i]) for i in indices) if run_ids is not None else ()
    return Cluster(indices, ids, float(np.median([v for _, v in items])), len(items))


# --- runs that differ beyond their own iterations' noise ---

SWING_ALPHA = 0.01  # per arm and primary metric: several are tested in a summary


@dataclass(frozen=True)
class Swing:
    """Whether an arm's runs differ by more than their iterations' noise
    implies: the engine process (its start, its placement, what ran beside
    it) moved the number, not the iterations within it. ``clusters``: the
    runs below and above the widest gap between sorted values."""

    n: int
    found: bool
    between_sd: float | None = None  # sd of the runs' log values
    within_sd: float | None = None  # sd of one run's log value that its iterations imply
    p: float | None = None
    clusters: tuple[Cluster, Cluster] | None = None
    reason: str | None = None


def typical_within_variance(sd_logs: Sequence[float | None], iterations: Sequence[float | None]) -> float:
    """The variance of one run's log median that a typical run's iterations
    imply: the median over runs of (pi/2) sd^2 / k (sd: the run's sd of log
    iteration values, k its iterations), divided by the median of a
    chi-square with k - 1 df over k - 1, so that it estimates the variance
    itself when iterations are independent. A median, not the mean
    (:func:`omni.stats.within_run_variance`): a run a neighbour disturbed
    spreads its own iterations, and must not hide that it differs from the
    others. 0 without a run of 2 iterations or more."""
    parts, ks = [], []
    for sd, k in zip(sd_logs, iterations):
        if sd is None or k is None or math.isnan(float(sd)) or float(k) < 2:
            continue
        parts.append(math.pi / 2 * float(sd) ** 2 / float(k))
        ks.append(float(k))
    if not parts:
        return 0.0
    df = float(np.median(ks)) - 1
    return float(np.median(parts)) / (chi2.median(df) / df)


def within_df(iterations: Sequence[float | None]) -> float:
    """Degrees of freedom of :func:`typical_within_variance`: the runs'
    k - 1 each, times the median's efficiency (2 / pi) for normal data."""
    return 2 / math.pi * sum(float(k) - 1 for k in iterations if k is not None and float(k) >= 2)


def runs_swing(
    values: Sequence[float | None],
    within_var: float,
    run_ids: Sequence[str] | None = None,
    min_swing: float = 0.0,
    alpha: float = SWING_ALPHA,
    df: float = math.inf,
) -> Swing:
    """Test whether runs differ beyond their iterations: under the null that
    every run's log value is its arm's level plus the noise of a median of
    its iterations (variance ``within_var``, estimated with ``df`` degrees of
    freedom: :func:`typical_within_variance`, :func:`within_df`), s^2 /
    within_var is F with (n - 1, df) degrees of freedom (s^2: the runs'
    sample variance of logs; chi-square / (n - 1) when df is infinite).
    Simulated at 3-8 runs of 3-10 iterations it calls runs of one state
    different 0.2-0.5 % of the time at alpha 1 % (tests/unit/test_modes.py).
    Found when p is below ``alpha`` and the widest and narrowest run differ
    by ``min_swing`` or more. Needs 3 runs and iterations (within_var > 0).
    The sides are split at the widest gap between the sorted values."""
    kept = [(i, float(v)) for i, v in enumerate(values) if v is not None and math.isfinite(float(v)) and float(v) > 0]
    n = len(kept)
    if n < 3:
        return Swing(n, False, reason="fewer than 3 runs")
    if not within_var or within_var <= 0:
        return Swing(n, False, reason="no iteration spread to compare with")
    order = sorted(kept, key=lambda item: item[1])
    logs = np.log([v for _, v in order])
    between = float(logs.var(ddof=1))
    ratio = between / within_var
    p = float(chi2.sf((n - 1) * ratio, n - 1) if math.isinf(df) else f_dist.sf(ratio, n - 1, max(df, 1.0)))
    cut = int(np.argmax(np.diff(logs))) + 1
    clusters = (_cluster(order[:cut], run_ids), _cluster(order[cut:], run_ids))
    found = p < alpha and order[-1][1] / order[0][1] >= 1 + min_swing
    return Swing(n, found, math.sqrt(between), math.sqrt(within_var), p, clusters)


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
