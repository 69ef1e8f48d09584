"""What else moved during a run's timed part: switches, migrations, faults,
steal, irq, frequency, energy, per thread; from counters, as the sampler reads them."""

from __future__ import annotations

import os
import threading
import time

import pytest

import omni.measure.procfs as procfs
from omni.measure.interference import InterferenceSample, steal_and_irq
from omni.measure.procfs import (
    ThreadSchedReader,
    busy_idle,
    cpu_stat,
    parse_thread_sched,
    rapl_packages,
    read_cur_freq_khz,
    read_energy_uj,
    read_faults,
    read_thread_sched,
    read_threads_sched,
)
from omni.measure.rapl import PowerSample, summarize_power
from omni.measure.sampler import ThreadTotals, thread_table
from omni.measure.sources import tree_sampler
from omni.measure.switches import SwitchesSample, SwitchesSource, summarize_switches

STAT = b"4242 (VLLM::EngineCor) R 1 4242 4242 0 -1 4194304 " + b" ".join(b"%d" % i for i in range(10, 46))
SCHED = b"""VLLM::EngineCor (4242, #threads: 9)
-------------------------------------------------------------------
se.exec_start                                :      22522070.968687
se.nr_migrations                             :                   17
nr_switches                                  :                  130
nr_voluntary_switches                        :                  100
nr_involuntary_switches                      :                   30
"""
STATUS = b"Name:\tpython\nState:\tR (running)\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3\n"


def test_a_threads_switches_and_migrations_come_from_its_sched_file():
    got = parse_thread_sched(b"123 45 6\n", STAT, SCHED)
    assert (got.name, got.nvcsw, got.nivcsw, got.migrations) == ("VLLM::EngineCor", 100, 30, 17)


def test_without_a_sched_file_switches_come_from_status_and_migrations_are_unknown():
    got = parse_thread_sched(b"123 45 6\n", STAT, STATUS)
    assert (got.nvcsw, got.nivcsw, got.migrations) == (7, 3, None)


def test_this_threads_counters_read_live():
    mine = read_thread_sched(os.getpid(), threading.get_native_id())
    assert mine is not None and mine.exec_ns > 0 and mine.name
    minor, major = read_faults(os.getpid())
    assert minor > 0 and major >= 0
    assert read_faults(2**22 + 1) is None  # no such process
    counters = cpu_stat()
    assert counters and all(busy_idle(c)[0] >= c["steal"] for c in counters.values())


def gone(pid: int, tid: int) -> None:
    """Wait until the kernel has removed a joined thread: ``join`` returns
    when Python is done with it, while the OS thread may still be exiting and
    listed in ``/proc/PID/task`` for a moment on a loaded host."""
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{pid}/task/{tid}") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not os.path.exists(f"/proc/{pid}/task/{tid}"), f"thread {tid} still listed 60 s after join"


def test_kept_thread_files_read_what_opened_ones_read_and_let_ended_threads_go():
    pid, stop = os.getpid(), threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    reader = ThreadSchedReader()
    try:
        kept = reader.read([pid], switches=True)
        opened = read_threads_sched([pid], switches=True)
        assert set(kept) == set(opened) and (pid, worker.native_id) in kept
        for key, sched in kept.items():
            assert (sched.name, sched.cpu >= 0) == (opened[key].name, True)
            assert sched.nvcsw <= opened[key].nvcsw and sched.exec_ns <= opened[key].exec_ns
        assert len(reader) == len(kept)
        again = reader.read([pid])  # the sleeping worker did not run: its last CPU is kept, not re-read
        assert again[(pid, worker.native_id)] == read_thread_sched(pid, worker.native_id)
        stop.set()
        worker.join()
        gone(pid, worker.native_id)
        again = reader.read([pid])
        assert (pid, worker.native_id) not in again and len(reader) == len(again) == len(kept) - 1
        assert reader.read([]) == {} and len(reader) == 0  # a process let go: its threads too
    finally:
        stop.set()
        reader.close()
    assert len(reader) == 0


def test_past_the_descriptor_cap_threads_are_still_read_by_open_and_close(monkeypatch):
    monkeypatch.setattr(procfs, "KEPT_FDS_MAX", procfs._kept + 4)  # room for two threads
    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait) for _ in range(4)]
    for w in workers:
        w.start()
    reader = ThreadSchedReader()
    try:
        got = reader.read([os.getpid()])
        assert {(os.getpid(), w.native_id) for w in workers} <= set(got)
        assert len(reader) == 2
    finally:
        stop.set()
        for w in workers:
            w.join()
        reader.close()
    assert procfs._kept + 4 == procfs.KEPT_FDS_MAX


def stat_sample(t, steal=0.0, irq=0.0):
    return InterferenceSample(t, "loaded", {}, {}, 0.0, steal_s={0: steal, 1: steal}, irq_s={0: irq, 1: 0.0})


def test_telemetry_is_the_difference_over_the_window_as_shares_of_the_slot():
    switches = [SwitchesSample(10.0, 0, 0, 0, 0, 0), SwitchesSample(12.0, 500, 40, 6, 90, 1)]
    got = summarize_switches(switches)
    assert (got.nivcsw, got.nvcsw, got.migrations, got.minflt, got.majflt) == (40, 500, 6, 90, 1)
    steal, irq = steal_and_irq([stat_sample(10.0), stat_sample(12.0, steal=0.2, irq=0.04)], (0, 1))
    assert steal == pytest.approx(10)  # 0.4 CPU-s of 4
    assert irq == pytest.approx(1)  # 0.04 of 4
    power = summarize_power(
        [
            PowerSample(10.0, {"package-0": 1_000_000}, {0: 3_000_000, 1: 2_000_000}),
            PowerSample(12.0, {"package-0": 101_000_000}, {0: 2_000_000, 1: 2_000_000}),
        ],
        (0, 1),
    )
    assert power.window_s == 2.0
    assert (power.freq_mhz, power.freq_min_mhz) == (pytest.approx(2250), 2000)
    assert power.energy_j == pytest.approx(100)


def test_a_wrapped_energy_counter_counts_its_range_and_no_rapl_is_none():
    samples = [PowerSample(0.0, {"package-0": 900}), PowerSample(1.0, {"package-0": 100})]
    assert summarize_power(samples, (0,), wraps={"package-0": 1000}).energy_j == pytest.approx(200 / 1e6)
    none = summarize_power([PowerSample(0.0), PowerSample(1.0)], (0,))
    assert none.energy_j is None and none.freq_mhz is None
    assert (
        summarize_switches([SwitchesSample(0.0, 0, 0, 0, 0, 0), SwitchesSample(1.0, 0, 0, None, 0, 0)]).migrations
        is None
    )
    assert summarize_power([PowerSample(0.0)], (0,)).window_s is None  # one sample: no window
    assert steal_and_irq([stat_sample(0.0)], (0,)) == (None, None)


def test_the_thread_table_lists_the_busiest_then_sums_the_rest():
    threads = [ThreadTotals(1, 10 + i, "python3", f"t{i}", cpu_s=i, nivcsw=i, cpus={i % 2}) for i in range(5)]
    threads[0].migrations = None
    table = thread_table(threads, listed=2)
    assert [t["name"] for t in table] == ["t4", "t3", "(other threads)"]
    assert table[0]["cpus"] == "0" and table[1]["cpus"] == "1"
    rest = table[2]
    assert (rest["threads"], rest["cpu_s"], rest["nivcsw"], rest["migrations"], rest["cpus"]) == (3, 3, 3, None, "0-1")


def test_rapl_and_frequency_come_from_sysfs_where_it_has_them(tmp_path):
    for zone, name, energy in (("intel-rapl:0", "package-0", 5), ("intel-rapl:0:0", "core", 1), ("intel-rapl:1", "dram", 2)):  # fmt: skip
        d = tmp_path / "class/powercap" / zone
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text(f"{energy}\n")
        (d / "max_energy_range_uj").write_text("262143328850\n")
    domains = rapl_packages(tmp_path)
    assert [d.name for d in domains] == ["package-0"]  # subzones and non-package zones are not the package's
    assert read_energy_uj(domains) == {"package-0": 5}
    freq = tmp_path / "devices/system/cpu/cpu3/cpufreq"
    freq.mkdir(parents=True)
    (freq / "scaling_cur_freq").write_text("2400000\n")
    assert read_cur_freq_khz((2, 3), tmp_path) == {3: 2400000}
    assert rapl_packages(tmp_path / "nothing") == []


def test_the_sampler_counts_a_busy_threads_telemetry_over_the_timed_part():
    """This process as the tree: a thread that burns CPU between the marks is
    in the table with its CPU time, and the tree's counters add up."""
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            sum(range(10_000))
            time.sleep(0.001)  # a voluntary switch each round

    worker = threading.Thread(target=burn, name="burner")
    sampler = tree_sampler(os.getpid(), cpus=tuple(sorted(os.sched_getaffinity(0)))).start()
    try:
        worker.start()
        sampler.mark("loaded")
        time.sleep(1.5)
        sampler.mark("steady")
    finally:
        stop.set()
        worker.join()
        sampler.stop()
    got = summarize_switches(sampler.source(SwitchesSource).samples)
    assert sampler.timed_at[-1] > sampler.timed_at[0] and got.nvcsw > 10 and got.nivcsw >= 0 and got.minflt >= 0
    by_tid = {t["tid"]: t for t in thread_table(list(sampler.tree.thread_totals.values()))}
    burner = by_tid[worker.native_id]
    assert burner["cpu_s"] > 0 and burner["nvcsw"] > 10 and burner["cpus"]
