"""Reading /proc: one file of every process, the one loop omni needs twice
(the sampler's parent map, the reaper's environment scan) and tests once more;
per-CPU busy time; a thread's scheduler counters."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")  # /proc/stat counts in these ticks a second


def read_all(name: str) -> Iterator[tuple[int, bytes]]:
    """``(pid, contents of /proc/PID/<name>)`` for every process still readable.

    A process can exit between listing and reading: it is skipped, not an error.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{name}", "rb") as f:
                yield int(entry), f.read()
        except OSError:
            continue


def cpu_times(proc_root: str | Path = "/proc") -> dict[int, tuple[int, int]]:
    """``cpuN`` -> (busy, idle) ticks from ``/proc/stat``, keyed by the CPU's
    real number (offline CPUs have no line, so list positions would lie).

    Busy counts steal: time the hypervisor gave this vCPU's host core to
    another guest is time the run did not get, as a neighbour's would be.
    """
    times = {}
    for line in (Path(proc_root) / "stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = (list(map(int, fields)) + [0] * 8)[:8]
        times[int(name[3:])] = (user + nice + system + irq + softirq + steal, idle + iowait)
    return times


@dataclass(frozen=True)
class ThreadSched:
    """One thread's scheduler counters: CPU time, time spent runnable but
    waiting for a CPU (both ns, since the thread began), the CPU it last ran on."""

    exec_ns: int
    run_delay_ns: int
    cpu: int


def parse_thread_sched(schedstat: bytes, stat: bytes) -> ThreadSched:
    """From ``/proc/PID/task/TID/schedstat`` (``exec_ns delay_ns timeslices``)
    and ``.../stat``, whose field 39 is the CPU the thread last ran on
    (fields counted from 1; the comm in parentheses may hold spaces)."""
    exec_ns, delay_ns = schedstat.split()[:2]
    after_comm = stat[stat.rindex(b")") + 2 :].split()
    return ThreadSched(int(exec_ns), int(delay_ns), int(after_comm[39 - 3]))


def read_thread_sched(pid: int, tid: int | str) -> ThreadSched | None:
    """A thread's :class:`ThreadSched`; ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
            schedstat = f.read()
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
            stat = f.read()
        return parse_thread_sched(schedstat, stat)
    except (OSError, ValueError, IndexError):
        return None


def read_threads_sched(pids) -> dict[tuple[int, int], ThreadSched]:
    """:class:`ThreadSched` of every thread of ``pids``, keyed (pid, tid);
    processes and threads gone meanwhile are left out."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            sched = read_thread_sched(pid, tid)
            if sched is not None:
                out[(pid, int(tid))] = sched
    return out
