"""The tree sampler on real processes: children found, memory summed, a vanished root survived."""

import os
import subprocess
import sys
import time

from omni.sampler import TreeSampler, descendants, parent_map

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
