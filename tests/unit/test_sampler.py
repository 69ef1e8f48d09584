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


def test_numa_maps_is_read_from_the_engine_never_from_numactl_before_exec_nor_an_exiting_task(monkeypatch):
    """A serving run marks ``load`` right after Popen, when the root may still
    be numactl (its policy not set yet): that read waits for the exec, and
    a task in do_exit (PF_EXITING) is never read."""
    from omni.measure import numa_pages
    from omni.measure.procfs import Task, parse_task

    assert parse_task(b"12 (numactl) R 1 12 12 0 -1 4194560 0 0") == Task("numactl", False)
    assert parse_task(b"12 (llama server) S 1 12 12 0 -1 4194564 0 0") == Task("llama server", True)
    maps = parse_numa_maps(b"7f0000000000 bind:0 anon=16 dirty=16 N0=16 kernelpagesize_kB=4\n")
    tasks = {100: Task("numactl", False), 101: Task("worker", True)}
    monkeypatch.setattr(numa_pages, "read_task", tasks.get)
    monkeypatch.setattr(numa_pages, "read_numa_maps", lambda pid: maps)
    sampler = tree_sampler(100)
    tree, numa = sampler.tree, sampler.source(NumaSource)
    tree.pids = {100, 101}
    tree.mark("load", 0.0)
    numa.mark(tree, "load")
    numa.tick(tree, 0.0)
    assert numa.numa_seen == {} and numa._pace.due  # nothing read; the mark's read is still owed
    tasks[100] = Task("llama-server", False)  # exec'd
    numa.tick(tree, 0.05)
    assert set(numa.numa_seen) == {100} and not numa._pace.due  # the engine read, the exiting worker not
