"""Reading /proc: one file of every process, the one loop omni needs twice
(the sampler's parent map, the reaper's environment scan) and tests once more;
a process tree from the ppid fields; one process's status, RssAnon (statm, kept
open), Pss_Anon and numa_maps, and a thread's memory policy, each read the cheap
way the sampler needs at 20 Hz; per-CPU busy time; a thread's scheduler counters."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omni.mempolicy import NumaMaps, parse_numa_maps, policy_of_thread

CLK_TCK = os.sysconf("SC_CLK_TCK")  # /proc/stat counts in these ticks a second
KIB_PER_MIB = 1024


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


_STATUS_FIELDS = re.compile(rb"^(Name|State|RssAnon|Cpus_allowed_list|Mems_allowed_list):\s*(.*)$", re.M)


def read_status(pid: int | str) -> dict[str, str] | None:
    """The fields we use from ``/proc/PID/status``; ``None`` if the process is gone.

    One regex over the bytes instead of splitting ~55 lines: this runs 20
    times a second per process.
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return {k.decode(): v.decode() for k, v in _STATUS_FIELDS.findall(data)}


PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def rss_anon_from_statm(data: bytes) -> int | None:
    """RssAnon in KiB from ``/proc/PID/statm`` text: resident minus shared pages.

    statm's "shared" is RssFile + RssShmem, so the difference is exactly
    status's RssAnon, from a file a fraction of status's size
    (``3533 2723 1513 1 0 1594 0``).
    """
    fields = data.split()
    return (int(fields[1]) - int(fields[2])) * PAGE_KIB if len(fields) > 2 else None


class StatmReader:
    """Keeps ``/proc/PID/statm`` open and re-reads it with one ``pread``.

    Opening and closing it at 20 Hz costs three syscalls a process a tick,
    and syscalls right after a timer wake-up are what the sampler's budget
    goes on. A kept descriptor is safe against pid reuse: once its process
    is gone, reading it fails (ESRCH) instead of showing a newcomer.
    """

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}

    def read(self, pid: int) -> int | None:
        """RssAnon of ``pid`` in KiB, ``None`` once the process is gone."""
        fd = self._fds.get(pid)
        try:
            if fd is None:
                fd = self._fds[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
            return rss_anon_from_statm(os.pread(fd, 256, 0))
        except OSError:
            self.forget(pid)
            return None

    def forget(self, pid: int) -> None:
        fd = self._fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for pid in list(self._fds):
            self.forget(pid)


def kib(value: str | None) -> int:
    # status/smaps value: "  123456 kB"
    return int(value.split()[0]) if value else 0


def read_pss_anon_kib(pid: int) -> int | None:
    """Pss_Anon from ``smaps_rollup`` (Linux >= 5.x), ``None`` if unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss_Anon:"):
                    return kib(line.split(":", 1)[1])
    except OSError:
        return None
    return None


def read_numa_maps(pid: int) -> NumaMaps | None:
    """The whole ``/proc/PID/numa_maps``, reduced; ``None`` if unreadable
    (process gone, or a kernel built without CONFIG_NUMA)."""
    try:
        with open(f"/proc/{pid}/numa_maps", "rb") as f:
            return parse_numa_maps(f.read())
    except OSError:
        return None


def read_thread_policy(pid: int, tid: str) -> str | None:
    """One thread's own memory policy from the first line of its numa_maps.

    Reads 256 bytes, unbuffered, not the file: the kernel formats numa_maps
    a mapping at a time until the read is filled, so this walks the page
    tables of the executable's first two or three mappings only (a 4 KiB
    read reached a vLLM process's heap: 7 ms a thread).
    """
    try:
        with open(f"/proc/{pid}/task/{tid}/numa_maps", "rb", buffering=0) as f:
            return policy_of_thread(f.read(256))
    except OSError:
        return None


def parent_map() -> dict[int, list[int]]:
    """ppid -> children, from ``/proc/*/stat`` (field 4, after the ``(comm)``)."""
    children: dict[int, list[int]] = {}
    for pid, stat in read_all("stat"):
        # "1234 (python3) S 1200 ...": comm may contain spaces and parens
        ppid = int(stat[stat.rindex(b")") + 2 :].split(b" ", 2)[1])
        children.setdefault(ppid, []).append(pid)
    return children


def descendants(root: int, children: dict[int, list[int]]) -> set[int]:
    found, stack = {root}, [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
