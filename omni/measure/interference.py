"""What else ran on the slot's CPUs during the timed part: each CPU's busy,
steal and irq time from ``/proc/stat`` against the tree's own CPU time, put
on the CPU each thread last ran on, and the time its threads waited on a run
queue; the row's foreign-CPU, steal and irq columns and the interference rule.

What the slot's CPUs were busy with beyond the tree's own threads is a
neighbour's (:func:`summarize_interference`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omni.host.placement import INTERFERENCE_BOUND_PCT
from omni.measure.procfs import CLK_TCK, ThreadSched, busy_idle, cpu_stat
from omni.measure.sampler import Found, Moment, RunView, Source, Tree

# Windows shorter than this are merged into the next: at /proc/stat's 10 ms
# ticks, a 0.1 s window between a paced sample and a mark would read a
# one-tick blip as 10 % of a CPU.
MIN_WINDOW_S = 0.5


@dataclass(frozen=True)
class InterferenceSample:
    """Cumulative counters at one moment of the timed part: every CPU's busy
    seconds (``/proc/stat``), the tree's CPU seconds by the CPU each thread
    last ran on, and the tree's run-queue wait, both since the first sample."""

    t: float
    phase: str
    busy_s: dict[int, float]
    tree_s_by_cpu: dict[int, float]
    run_delay_s: float
    # cumulative too: every CPU's steal and irq + softirq seconds
    steal_s: dict[int, float] = field(default_factory=dict)
    irq_s: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Interference:
    """CPU time on a slot's CPUs that the run's own tree did not use, and the
    time its threads waited for a CPU, over the timed part."""

    peak_pct: float | None  # busiest CPU's foreign share in its worst window, % of one CPU
    peak_cpu: int | None
    mean_pct: float | None  # all foreign time over the timed part, % of the CPUs' capacity
    run_delay_ms: float | None
    run_delay_ms_per_s: float | None
    window_s: float | None
    samples: int


def _foreign(a: InterferenceSample, b: InterferenceSample, cpus: tuple[int, ...]) -> tuple[dict[int, float], float]:
    """Per CPU and in total, seconds the CPUs were busy with other than the tree
    between two samples. A thread that moved between CPUs inside the window is
    counted on its last one, so one CPU may look foreign-busy while another
    shows the tree's time unaccounted: no CPU's share exceeds the total."""
    busy = {c: b.busy_s.get(c, 0.0) - a.busy_s.get(c, 0.0) for c in cpus}
    tree = {c: b.tree_s_by_cpu.get(c, 0.0) - a.tree_s_by_cpu.get(c, 0.0) for c in cpus}
    total = max(0.0, sum(busy.values()) - sum(tree.values()))
    return {c: min(max(0.0, busy[c] - tree[c]), total) for c in cpus}, total


def summarize_interference(
    samples: list[InterferenceSample], cpus: tuple[int, ...], min_window_s: float = MIN_WINDOW_S
) -> Interference:
    """Foreign CPU share and run-queue wait over ``samples`` on ``cpus`` (the
    slot's CPUs and the idle SMT siblings it owns).

    The peak is per CPU and per window (consecutive samples, merged to at least
    ``min_window_s``): one CPU an OpenMP barrier waits on is what slows the
    run, and a neighbour on one of eight CPUs is 12 % of the slot but all of
    that CPU's thread's lateness. ``None`` figures: fewer than two samples;
    no peak when the whole window is shorter than ``min_window_s`` (a tick
    would weigh too much).
    """
    cpus = tuple(sorted(set(cpus)))
    if len(samples) < 2 or not cpus:
        return Interference(None, None, None, None, None, None, len(samples))
    peak, peak_cpu = 0.0, cpus[0]
    start = samples[0]
    for i, sample in enumerate(samples[1:], 1):
        span = sample.t - start.t
        if span < min_window_s and i < len(samples) - 1:
            continue
        if span > 0:
            per_cpu, _ = _foreign(start, sample, cpus)
            cpu = max(per_cpu, key=per_cpu.get)
            if 100 * per_cpu[cpu] / span > peak:
                peak, peak_cpu = min(100.0, 100 * per_cpu[cpu] / span), cpu
        start = sample
    first, last = samples[0], samples[-1]
    window = last.t - first.t
    if window <= 0:
        return Interference(None, None, None, None, None, None, len(samples))
    _, total = _foreign(first, last, cpus)
    delay_ms = (last.run_delay_s - first.run_delay_s) * 1000
    judged = window >= min_window_s
    return Interference(
        peak_pct=peak if judged else None,
        peak_cpu=peak_cpu if judged else None,
        mean_pct=min(100.0, 100 * total / (window * len(cpus))),
        run_delay_ms=delay_ms,
        run_delay_ms_per_s=delay_ms / window,
        window_s=window,
        samples=len(samples),
    )


def steal_and_irq(samples: list[InterferenceSample], cpus: tuple[int, ...]) -> tuple[float | None, float | None]:
    """The slot CPUs' steal and irq + softirq time over the window, % of their
    capacity; ``None`` with fewer than two samples or no time between them."""
    cpus = tuple(sorted(set(cpus)))
    if len(samples) < 2 or samples[-1].t <= samples[0].t or not cpus:
        return None, None
    first, last = samples[0], samples[-1]
    capacity = (last.t - first.t) * len(cpus)

    def share(attr: str) -> float:
        a, b = getattr(first, attr), getattr(last, attr)
        return min(100.0, 100 * sum(b.get(c, 0.0) - a.get(c, 0.0) for c in cpus) / capacity)

    return share("steal_s"), share("irq_s")


class InterferenceSource(Source):
    """One :class:`InterferenceSample` a timed sample."""

    def __init__(self) -> None:
        self.samples: list[InterferenceSample] = []
        self._sched: dict[tuple[int, int], ThreadSched] = {}
        self._tree_s_by_cpu: dict[int, float] = {}
        self._run_delay_s = 0.0

    def timed(self, moment: Moment) -> None:
        """Each thread's CPU time since the last sample goes to the CPU it last
        ran on (exact when engines bind one OpenMP thread per CPU)."""
        for key, now in moment.threads.items():
            before = self._sched.get(key)
            self._sched[key] = now
            if moment.first:
                continue
            if before and now.exec_ns < before.exec_ns:  # a reused tid: another thread
                before = None
            self._add_thread(moment.tree, key, before, now)
        stat = cpu_stat()
        self.samples.append(
            InterferenceSample(
                moment.t,
                moment.phase,
                {cpu: busy_idle(c)[0] / CLK_TCK for cpu, c in stat.items()},
                dict(self._tree_s_by_cpu),
                self._run_delay_s,
                steal_s={cpu: c["steal"] / CLK_TCK for cpu, c in stat.items()},
                irq_s={cpu: (c["irq"] + c["softirq"]) / CLK_TCK for cpu, c in stat.items()},
            )
        )

    def _add_thread(self, tree: Tree, key: tuple[int, int], before: ThreadSched | None, now: ThreadSched) -> None:
        """One thread's CPU time and wait since the last sample, to the tree's and its own totals."""
        exec_s = (now.exec_ns - (before.exec_ns if before else 0)) / 1e9
        delay_s = (now.run_delay_ns - (before.run_delay_ns if before else 0)) / 1e9
        self._tree_s_by_cpu[now.cpu] = self._tree_s_by_cpu.get(now.cpu, 0.0) + exec_s
        self._run_delay_s += delay_s
        totals = tree.totals(key, now.name)
        totals.cpu_s += exec_s
        totals.run_delay_s += delay_s
        if exec_s > 0:
            totals.cpus.add(now.cpu)

    def found(self, tree: Tree, run: RunView) -> Found:
        """A neighbour above :data:`INTERFERENCE_BOUND_PCT` of one CPU is warning ``interference``."""
        if not run.placed:
            return Found()
        cpus = (*run.slot.cpus, *run.slot.siblings)
        found = summarize_interference(self.samples, cpus)
        steal, irq = steal_and_irq(self.samples, cpus)
        result = Found(
            {
                "foreign_cpu_peak_pct": found.peak_pct,
                "foreign_cpu_mean_pct": found.mean_pct,
                "run_delay_ms": found.run_delay_ms,
                "run_delay_ms_per_s": found.run_delay_ms_per_s,
                "interference_samples": found.samples,
                "steal_pct": steal,
                "irq_pct": irq,
            }
        )
        if found.peak_pct is not None and found.peak_pct > INTERFERENCE_BOUND_PCT:
            sibling = " (an idle SMT sibling of the slot)" if found.peak_cpu in run.slot.siblings else ""
            result.warnings.append(
                (
                    "interference",
                    f"interference: during the timed part, CPU {found.peak_cpu}{sibling} spent "
                    f"{found.peak_pct:.0f}% of a {MIN_WINDOW_S:g} s+ window on work not the run's (bound "
                    f"{INTERFERENCE_BOUND_PCT:g}%; {found.mean_pct:.1f}% of the slot's CPUs over "
                    f"{found.window_s:.1f} s; the run's threads waited {found.run_delay_ms_per_s:.0f} ms/s for a "
                    "CPU): a thread an OpenMP barrier waits on was slowed, so every thread was",
                )
            )
        return result
