"""The tree sampler on real processes: children found, memory summed, a vanished root survived."""

import os
import subprocess
import sys
import time

from omni.measure.interference import InterferenceSource, summarize_interference
from omni.measure.memory import MemorySource
from omni.measure.procfs import descendants, parent_map
from omni.measure.sources import tree_sampler

CHILD = [sys.executable, "-m", "omni.engines.synthetic", "--child"]


def hold(mb: float) -> subprocess.Popen:
    proc = subprocess.Popen([*CHILD, str(mb)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()


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
    sampler = tree_sampler(proc.pid, interval=0.02, tree_period_s=0.1, budget=1.0).start()
    try:
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
    finally:
        sampler.stop()
        release(proc)
    memory = sampler.source(MemorySource)
    assert len(sampler.tree.seen) == 2
    peak_kib = max(s.rss_anon_kib for s in memory.samples)
    assert 96 * 1024 <= peak_kib < 140 * 1024
    assert max(s.n_procs for s in memory.samples) == 2
    mine = sorted(os.sched_getaffinity(0))
    assert all(p.cpus_allowed == mine for p in sampler.tree.seen.values())
    assert memory.pss_samples, "Pss_Anon sampled at a lower rate"


def test_sampler_survives_a_vanished_root():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    sampler = tree_sampler(proc.pid, interval=0.01).start()
    time.sleep(0.05)
    sampler.stop()
    # reaped before the first look: nothing to measure, and that is no error
    memory = sampler.source(MemorySource)
    assert memory.samples == [] and memory.pss_samples == [] and sampler.tree.seen == {}
    assert sampler.error is None


def test_interference_is_sampled_between_the_marks_and_sees_the_trees_processes_wait():
    """Two busy processes of the tree pinned to one CPU: each waits on the run
    queue while the other runs, so the tree's run delay is about a second a
    second (more if the host is busy too), and the forked child is found."""
    script = (
        "import os, sys\n"
        "os.sched_setaffinity(0, [0])\n"
        "if os.fork() == 0:\n"
        "    while True: pass\n"
        "print('ready', flush=True)\n"
        "while True: pass\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    sampler = tree_sampler(proc.pid).start()
    samples = sampler.source(InterferenceSource).samples
    try:
        assert proc.stdout.readline().strip() == b"ready"
        sampler.mark("loaded")
        time.sleep(2.5)
        sampler.mark("steady")
        taken = len(samples)
        time.sleep(1.2)  # after steady: no more samples
    finally:
        sampler.stop()
        for pid in sampler.tree_pids():
            os.kill(pid, 9)
        proc.wait()
        proc.stdout.close()
    assert taken >= 3 and len(samples) == taken
    assert [s.phase for s in samples][:: taken - 1] == ["loaded", "steady"]
    found = summarize_interference(samples, (0,))
    assert found.run_delay_ms_per_s > 500, found
    assert found.window_s > 2 and sampler.timed_cpu_s > 0
    # the tree's time is on CPU 0, where it was pinned, and nowhere else
    last = samples[-1].tree_s_by_cpu
    assert last.get(0, 0) > 0 and sum(last.values()) == last[0]
