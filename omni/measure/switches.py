"""How the tree was scheduled over the timed part: each thread's voluntary and
involuntary context switches and its migrations between CPUs (its ``sched``
file, read at the ``loaded`` and ``steady`` marks only: the window's counts
need its two ends), and each process's minor and major page faults; the
row's switch, migration and fault columns, and each thread's share of them
in its thread table.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni.measure.procfs import ThreadSched, read_faults
from omni.measure.sampler import Found, Moment, RunView, Source, Tree


@dataclass(frozen=True)
class SwitchesSample:
    """The tree's counts since the first mark, at one mark: switches,
    migrations (None: no sched file) and page faults."""

    t: float
    nvcsw: int
    nivcsw: int
    migrations: int | None
    minflt: int
    majflt: int


@dataclass(frozen=True)
class Switches:
    """The tree's switches, migrations and faults over the timed part."""

    nvcsw: int | None
    nivcsw: int | None
    migrations: int | None
    minflt: int | None
    majflt: int | None


def summarize_switches(samples: list[SwitchesSample]) -> Switches:
    """Counts between the first and the last mark; ``None`` figures with
    fewer than two marks or no time between them."""
    if len(samples) < 2 or samples[-1].t <= samples[0].t:
        return Switches(None, None, None, None, None)
    a, b = samples[0], samples[-1]

    def counted(attr: str) -> int | None:
        if getattr(a, attr) is None or getattr(b, attr) is None:
            return None
        return getattr(b, attr) - getattr(a, attr)

    return Switches(counted("nvcsw"), counted("nivcsw"), counted("migrations"), counted("minflt"), counted("majflt"))


class SwitchesSource(Source):
    """One :class:`SwitchesSample` at each mark of the timed part."""

    def __init__(self) -> None:
        self.samples: list[SwitchesSample] = []
        self._switches = [0, 0, 0]  # voluntary, involuntary, migrations: the tree's, since the first mark
        self._switch_seen: dict[tuple[int, int], ThreadSched] = {}
        self._has_migrations = True
        self._faults: dict[int, tuple[int, int]] = {}
        self._fault_totals = [0, 0]

    def timed(self, moment: Moment) -> None:
        if not moment.at_mark:
            return
        for key, now in moment.threads.items():
            self._add_switches(moment, key, now)
        self._add_faults(moment.pids, moment.first)
        self.samples.append(
            SwitchesSample(
                moment.t,
                self._switches[0],
                self._switches[1],
                self._switches[2] if self._has_migrations else None,
                self._fault_totals[0],
                self._fault_totals[1],
            )
        )

    def _add_switches(self, moment: Moment, key: tuple[int, int], now: ThreadSched) -> None:
        """At a mark: one thread's switches and migrations since the last mark
        (all of them for a thread born since), to the tree's and its own totals."""
        before = self._switch_seen.get(key)
        self._switch_seen[key] = now
        if moment.first:
            return
        if before and now.nvcsw + now.nivcsw < before.nvcsw + before.nivcsw:  # a reused tid
            before = None
        nvcsw = now.nvcsw - (before.nvcsw if before else 0)
        nivcsw = now.nivcsw - (before.nivcsw if before else 0)
        self._switches[0] += nvcsw
        self._switches[1] += nivcsw
        migrations = None
        if now.migrations is None:
            self._has_migrations = False
        else:
            migrations = now.migrations - ((before.migrations or 0) if before else 0)
            self._switches[2] += migrations
        totals = moment.tree.totals(key, now.name)
        totals.nvcsw += nvcsw
        totals.nivcsw += nivcsw
        totals.migrations = None if migrations is None else (totals.migrations or 0) + migrations

    def _add_faults(self, pids, first: bool) -> None:
        for pid in pids:
            now = read_faults(pid)
            if now is None:
                continue
            before = self._faults.get(pid)
            self._faults[pid] = now
            if first:
                continue
            before = before or (0, 0)
            self._fault_totals[0] += max(0, now[0] - before[0])
            self._fault_totals[1] += max(0, now[1] - before[1])

    def found(self, tree: Tree, run: RunView) -> Found:
        if not run.placed:
            return Found()
        found = summarize_switches(self.samples)
        return Found(
            {
                "ctx_switches_voluntary": found.nvcsw,
                "ctx_switches_involuntary": found.nivcsw,
                "cpu_migrations": found.migrations,
                "minor_faults": found.minflt,
                "major_faults": found.majflt,
            }
        )
