import os
import subprocess
import sys
import time

from omni.mempolicy import parse_numa_maps
from omni.sampler import NumaSeen, TreeSampler, descendants, parent_map, summarize_series

CHILD = [sys.executable, "-m", "omni.engines.synthetic", "--child"]


def hold(mb: float) -> subprocess.Popen:
    proc = subprocess.Popen([*CHILD, str(mb)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()


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


def test_parent_map_finds_our_children():
    proc = hold(1)
    try:
        assert proc.pid in descendants(os.getpid(), parent_map())
    finally:
        release(proc)


def test_sampler_sums_tree_and_reads_binding():
    # a parent holding 32 MiB that starts a child holding 64 MiB
    script = (
        "import subprocess, sys, mmap\n"
        "m = mmap.mmap(-1, 32 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
        "for o in range(0, 32 << 20, 4096): m[o] = 1\n"
        f"c = subprocess.Popen({CHILD!r} + ['64'], stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "c.stdout.readline(); print('ready', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    sampler = TreeSampler(proc.pid, interval=0.02, tree_period_s=0.1, budget=1.0).start()
    try:
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
    finally:
        sampler.stop()
        release(proc)
    assert len(sampler.seen) == 2
    peak_kib = max(s.rss_anon_kib for s in sampler.samples)
    assert 96 * 1024 <= peak_kib < 140 * 1024
    assert max(s.n_procs for s in sampler.samples) == 2
    mine = sorted(os.sched_getaffinity(0))
    assert all(p.cpus_allowed == mine for p in sampler.seen.values())
    assert sampler.pss_samples, "Pss_Anon sampled at a lower rate"


def test_sampler_survives_a_vanished_root():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    sampler = TreeSampler(proc.pid, interval=0.01).start()
    time.sleep(0.05)
    sampler.stop()
    # reaped before the first look: nothing to measure, and that is no error
    assert sampler.samples == [] and sampler.pss_samples == [] and sampler.seen == {}
    assert sampler.error is None


def test_processes_with_no_steady_numa_read_are_named():
    """A process of the tree at the steady mark whose numa_maps was last read
    before it (a slow host: no read landed in the steady window) is counted;
    one read in steady state, or one gone before the mark, is not."""
    sampler = TreeSampler(root_pid=os.getpid())
    assert sampler.numa_not_steady() is None  # never got to steady
    maps = parse_numa_maps(b"7f0000000000 bind:0 anon=16 dirty=16 N0=16 kernelpagesize_kB=4\n")
    sampler.numa_seen = {
        1: NumaSeen(1, "engine", maps),
        2: NumaSeen(2, "worker", maps, steady=maps),
        3: NumaSeen(3, "helper", maps),
    }
    sampler._pids = {1, 2}  # helper 3 ended before steady
    sampler.mark("steady")
    assert [p.name for p in sampler.numa_not_steady()] == ["engine"]
