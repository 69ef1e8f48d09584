"""Interference on a slot's CPUs, from counters: what the run's tree did not use."""

from __future__ import annotations

import pytest

from omni.measure.interference import InterferenceSample, summarize_interference
from omni.measure.procfs import parse_thread_sched


def test_thread_sched_reads_cpu_time_wait_and_last_cpu():
    # a comm with spaces and parens; field 39 (processor) is 3
    stat = b"4242 (py (worker) 1) R 1 4242 4242 0 -1 4194304 " + b" ".join(b"%d" % i for i in range(10, 46))
    fields = stat[stat.rindex(b")") + 2 :].split()
    fields[39 - 3] = b"3"
    stat = stat[: stat.rindex(b")") + 2] + b" ".join(fields)
    got = parse_thread_sched(b"123456789 5000000 42\n", stat)
    assert (got.exec_ns, got.run_delay_ns, got.cpu) == (123456789, 5000000, 3)


def series(*points: tuple[float, dict[int, float], dict[int, float], float]) -> list[InterferenceSample]:
    return [InterferenceSample(t, "loaded", busy, tree, delay) for t, busy, tree, delay in points]


def test_a_neighbour_on_one_cpu_is_its_share_of_that_cpu():
    # CPU 0 runs the tree all the time; CPU 1 runs the tree 60 % and a neighbour 40 %
    samples = series(
        (0.0, {0: 10.0, 1: 10.0}, {}, 0.0),
        (1.0, {0: 11.0, 1: 11.0}, {0: 1.0, 1: 0.6}, 0.2),
        (2.0, {0: 12.0, 1: 12.0}, {0: 2.0, 1: 1.2}, 0.4),
    )
    found = summarize_interference(samples, (0, 1))
    assert found.peak_pct == pytest.approx(40)
    assert found.peak_cpu == 1
    assert found.mean_pct == pytest.approx(20)  # 0.8 s of 4 CPU-seconds
    assert (found.run_delay_ms, found.run_delay_ms_per_s, found.window_s) == pytest.approx((400, 200, 2.0))


def test_the_peak_is_the_worst_window_not_the_mean():
    # a neighbour that starts in the second second, at 100 % of CPU 2
    samples = series(
        (0.0, {2: 0.0}, {}, 0.0),
        (1.0, {2: 1.0}, {2: 1.0}, 0.0),
        (2.0, {2: 2.0}, {2: 1.5}, 0.0),
        (3.0, {2: 3.0}, {2: 2.0}, 0.0),
    )
    found = summarize_interference(samples, (2,))
    assert found.peak_pct == pytest.approx(50)
    assert found.mean_pct == pytest.approx(100 / 3)


def test_short_windows_merge_so_a_tick_is_not_a_neighbour():
    # 20 ms after a sample, one 10 ms tick of busy not yet in the tree's count
    samples = series(
        (0.0, {0: 0.0}, {}, 0.0),
        (0.02, {0: 0.01}, {}, 0.0),
        (1.0, {0: 1.0}, {0: 0.99}, 0.0),
    )
    assert summarize_interference(samples, (0,)).peak_pct == pytest.approx(1, abs=0.1)
    assert summarize_interference(samples, (0,), min_window_s=0.0).peak_pct == pytest.approx(50)


def test_a_thread_counted_on_the_wrong_cpu_is_not_a_neighbour():
    # the tree ran 1 s on each CPU but its one thread was last seen on CPU 1
    samples = series((0.0, {0: 0.0, 1: 0.0}, {}, 0.0), (1.0, {0: 1.0, 1: 1.0}, {1: 2.0}, 0.0))
    found = summarize_interference(samples, (0, 1))
    assert (found.peak_pct, found.mean_pct) == (0, 0)


def test_idle_siblings_count_and_other_cpus_do_not():
    samples = series((0.0, {0: 0.0, 4: 0.0, 5: 0.0}, {}, 0.0), (1.0, {0: 1.0, 4: 0.3, 5: 1.0}, {0: 1.0}, 0.0))
    assert summarize_interference(samples, (0, 4)).peak_pct == pytest.approx(30)  # 4: an owned sibling
    assert summarize_interference(samples, (0,)).peak_pct == 0  # 5 is not the slot's


def test_too_few_samples_give_no_figures():
    found = summarize_interference(series((0.0, {0: 0.0}, {}, 0.0)), (0,))
    assert (found.peak_pct, found.mean_pct, found.run_delay_ms, found.samples) == (None, None, None, 1)


def test_a_timed_part_shorter_than_a_window_has_no_peak():
    samples = series((0.0, {0: 0.0}, {}, 0.0), (0.2, {0: 0.2}, {0: 0.1}, 0.0))
    found = summarize_interference(samples, (0,))
    assert found.peak_pct is None and found.mean_pct == pytest.approx(50)


def test_own_time_is_taken_off_where_it_flattens_the_busiest_cpu():
    """Our threads' time, placed only by the CPU each last ran on, is spread to
    lower the top: the least foreign load the measurement allows."""
    from omni.host.placement import level_off

    assert level_off({0: 14.0, 1: 2.0}, 10.0) == {0: 4.0, 1: 2.0}
    assert level_off({0: 30.0, 1: 20.0}, 15.0) == {0: 17.5, 1: 17.5}
    assert level_off({0: 5.0, 1: 5.0}, 20.0) == {0: 0.0, 1: 0.0}
    assert level_off({0: 50.0}, 10.0) == {0: 40.0}
    assert level_off({0: 50.0, 1: 0.0}, 0.0) == {0: 50.0, 1: 0.0}  # nothing of ours: all foreign
