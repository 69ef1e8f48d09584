"""Memory series and NUMA reads summarized, on canned samples."""

import os

from omni.measure.memory import summarize_series
from omni.measure.mempolicy import parse_numa_maps
from omni.measure.numa_pages import NumaSeen, NumaSource
from omni.measure.sources import tree_sampler


def test_summarize_series_phases():
    kib = 1024
    points = [
        (0.0, "load", 10 * kib),
        (0.1, "loaded", 100 * kib),
        (0.2, "loaded", 120 * kib),
        (0.3, "steady", 90 * kib),
        (0.4, "steady", 92 * kib),
        (0.5, "steady", 94 * kib),
    ]
    summary = summarize_series(points)
    assert summary.peak_mb == 120
    assert summary.after_load_mb == 100
    assert summary.steady_mb == 92
    assert summary.count == 6
    assert abs(summary.interval_ms - 100) < 1e-6


def test_summarize_series_without_steady_phase():
    summary = summarize_series([(0.0, "load", 2048)])
    assert summary.steady_mb is None and summary.after_load_mb is None and summary.peak_mb == 2


def test_processes_with_no_steady_numa_read_are_named():
    """A process of the tree at the steady mark whose numa_maps was last read
    before it (a slow host: no read landed in the steady window) is counted;
    one read in steady state, or one gone before the mark, is not."""
    sampler = tree_sampler(os.getpid())
    numa = sampler.source(NumaSource)
    assert numa.not_steady(sampler.tree) is None  # never got to steady
    maps = parse_numa_maps(b"7f0000000000 bind:0 anon=16 dirty=16 N0=16 kernelpagesize_kB=4\n")
    numa.numa_seen = {
        1: NumaSeen(1, "engine", maps),
        2: NumaSeen(2, "worker", maps, steady=maps),
        3: NumaSeen(3, "helper", maps),
    }
    sampler.tree.pids = {1, 2}  # helper 3 ended before steady
    sampler.mark("steady")
    assert [p.name for p in numa.not_steady(sampler.tree)] == ["engine"]
