"""The sources a run's sampler reads, in their order, and the sampler made of
them. A new thing to sample is a :class:`omni.measure.sampler.Source` in a
module of its own, one line here, and its columns declared in
:mod:`omni.store.columns`: the runner merges every source's findings into the
row as they come.

The order is the order of each tick's reads (numa_maps first, right after the
tree refresh: the read a mark asks for must land inside the engine's hold)
and of the findings' warnings in the row.
"""

from __future__ import annotations

from omni.measure.binding import BindingSource
from omni.measure.interference import InterferenceSource
from omni.measure.memory import MemorySource
from omni.measure.numa_pages import NumaSource
from omni.measure.rapl import RaplSource
from omni.measure.sampler import BUDGET, INTERVAL_S, TREE_PERIOD_S, Source, TreeSampler
from omni.measure.switches import SwitchesSource


def standard_sources(
    cpus: tuple[int, ...] = (), interval: float = INTERVAL_S, period_s: float = TREE_PERIOD_S, budget: float = BUDGET
) -> tuple[Source, ...]:
    """Every source, fresh; ``cpus``: the slot's, whose frequency is sampled."""
    numa = NumaSource(period_s, budget)
    return (
        BindingSource(numa),
        numa,
        MemorySource(interval, budget),
        InterferenceSource(),
        SwitchesSource(),
        RaplSource(cpus),
    )


def tree_sampler(
    root_pid: int,
    cpus: tuple[int, ...] = (),
    interval: float = INTERVAL_S,
    tree_period_s: float = TREE_PERIOD_S,
    budget: float = BUDGET,
) -> TreeSampler:
    """A sampler of ``root_pid``'s tree with every source, not started yet."""
    sources = standard_sources(cpus, interval, tree_period_s, budget)
    return TreeSampler(root_pid, sources, interval, tree_period_s, budget)
