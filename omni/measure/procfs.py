"""Reading /proc: one file of every process, the one loop omni needs twice
(the sampler's parent map, the reaper's environment scan) and tests once more;
a process tree from the ppid fields; one process's status, RssAnon (statm, kept
open), Pss_Anon and numa_maps, and a thread's memory policy, each read the cheap
way the sampler needs at 20 Hz; per-CPU busy time; a thread's scheduler counters."""

from __future__ import annotations

import os
import re
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from omni.measure.mempolicy import NumaMaps, parse_numa_maps, policy_of_thread

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
    return {cpu: busy_idle(c) for cpu, c in cpu_stat(proc_root).items()}


def busy_idle(counters: dict[str, int]) -> tuple[int, int]:
    """(busy, idle) ticks of one CPU's :func:`cpu_stat` counters."""
    idle = counters["idle"] + counters["iowait"]
    return sum(counters.values()) - idle, idle


CPU_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_stat(proc_root: str | Path = "/proc") -> dict[int, dict[str, int]]:
    """``cpuN`` -> its ``/proc/stat`` counters by name (ticks), keyed by the CPU's real number."""
    out = {}
    for line in (Path(proc_root) / "stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        out[int(name[3:])] = dict(zip(CPU_STAT_FIELDS, (list(map(int, fields)) + [0] * 8)[:8]))
    return out


def read_faults(pid: int) -> tuple[int, int] | None:
    """(minor, major) page faults of a whole process since it began (fields
    10 and 12 of ``/proc/PID/stat``, its exited threads included); ``None``
    once it is gone."""
    try:
        after_comm = _read(f"/proc/{pid}/stat")
        fields = after_comm[after_comm.rindex(b")") + 2 :].split()
        return int(fields[10 - 3]), int(fields[12 - 3])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class ThreadSched:
    """One thread's scheduler counters, each since the thread began: CPU time,
    time spent runnable but waiting for a CPU (both ns), the CPU it last ran
    on, its name, voluntary and involuntary context switches, and migrations
    between CPUs (``None`` where the kernel has no ``sched`` file)."""

    exec_ns: int
    run_delay_ns: int
    cpu: int
    name: str = "?"
    nvcsw: int = 0
    nivcsw: int = 0
    migrations: int | None = None


_SCHED_FIELDS = re.compile(rb"^(se\.nr_migrations|nr_voluntary_switches|nr_involuntary_switches)\s*:\s*(\d+)", re.M)
_CTXT_FIELDS = re.compile(rb"^(voluntary_ctxt_switches|nonvoluntary_ctxt_switches):\s*(\d+)", re.M)


def parse_thread_sched(schedstat: bytes, stat: bytes, switches: bytes = b"") -> ThreadSched:
    """From ``/proc/PID/task/TID/schedstat`` (``exec_ns delay_ns timeslices``),
    ``.../stat``, whose field 39 is the CPU the thread last ran on (fields
    counted from 1; the comm in parentheses may hold spaces), and
    ``switches``: the thread's ``sched`` file (CONFIG_SCHED_DEBUG: switches and
    ``se.nr_migrations``) or, without one, its ``status`` (switches only)."""
    exec_ns, delay_ns = schedstat.split()[:2]
    close = stat.rindex(b")")
    name = stat[stat.index(b"(") + 1 : close].decode(errors="replace")
    after_comm = stat[close + 2 :].split(None, 37)  # up to field 39, not the ~13 after it
    head = (int(exec_ns), int(delay_ns), int(after_comm[39 - 3]), name)
    fields = {k: int(v) for k, v in _SCHED_FIELDS.findall(switches)}
    if fields:
        voluntary, involuntary = fields.get(b"nr_voluntary_switches", 0), fields.get(b"nr_involuntary_switches", 0)
        return ThreadSched(*head, voluntary, involuntary, fields.get(b"se.nr_migrations"))
    ctxt = {k: int(v) for k, v in _CTXT_FIELDS.findall(switches)}
    return ThreadSched(*head, ctxt.get(b"voluntary_ctxt_switches", 0), ctxt.get(b"nonvoluntary_ctxt_switches", 0))


# The kernel's sched file where it has one (CONFIG_SCHED_DEBUG), else status.
SWITCHES_FILE = "sched" if os.path.exists("/proc/self/sched") else "status"


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_thread_sched(pid: int, tid: int | str, switches: bool = False) -> ThreadSched | None:
    """A thread's :class:`ThreadSched`, its switches and migrations only when
    ``switches`` (a third file: the sampler reads it at the marks only);
    ``None`` once it is gone."""
    base = f"/proc/{pid}/task/{tid}"
    try:
        more = _read(f"{base}/{SWITCHES_FILE}") if switches else b""
        return parse_thread_sched(_read(f"{base}/schedstat"), _read(f"{base}/stat"), more)
    except (OSError, ValueError, IndexError):
        return None


# Descriptors the thread readers of one orchestrator may keep open together:
# a quarter of its limit (256 at the usual soft limit of 1024), so a sweep's
# other files never meet EMFILE; past it, threads are read by open and close.
KEPT_FDS_MAX = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4
_kept_lock = threading.Lock()
_kept = 0


def _keep(count: int) -> bool:
    """Reserve ``count`` kept descriptors, False when that would pass :data:`KEPT_FDS_MAX`."""
    global _kept
    with _kept_lock:
        if _kept + count > KEPT_FDS_MAX:
            return False
        _kept += count
        return True


def _release(count: int) -> None:
    global _kept
    with _kept_lock:
        _kept -= count


class ThreadSchedReader:
    """:func:`read_threads_sched` with each thread's ``schedstat`` and
    ``stat`` kept open and re-read with one ``pread`` each.

    Opening the two files costs six times the reads: 1.8 ms against 0.27 ms
    for a 65-thread tree on a 2-vCPU VM, every second of a timed part. A kept
    descriptor of a thread that ended fails (ESRCH) instead of showing a new
    thread with its tid; those of threads no longer listed are closed. A
    thread whose CPU time has not moved since the last read did not run, so
    its ``stat`` (the CPU it last ran on, and most of the cost) is not read
    again, except when ``switches`` asks for everything: most of an engine's
    threads sleep through a timed part.
    """

    def __init__(self) -> None:
        self._fds: dict[tuple[int, int], tuple[int, int]] = {}
        self._last: dict[tuple[int, int], ThreadSched] = {}

    def read(self, pids, switches: bool = False) -> dict[tuple[int, int], ThreadSched]:
        """As :func:`read_threads_sched`; threads of processes not in ``pids`` are let go."""
        out, listed = {}, set()
        for key in thread_keys(pids):
            listed.add(key)
            sched = self._read(key, switches)
            if sched is not None:
                out[key] = sched
        for key in self._fds.keys() - listed:
            self._forget(key)
        return out

    def _read(self, key: tuple[int, int], switches: bool) -> ThreadSched | None:
        base = f"/proc/{key[0]}/task/{key[1]}"
        try:
            more = _read(f"{base}/{SWITCHES_FILE}") if switches else b""
            fds = self._fds.get(key)
            if fds is not None:
                try:
                    return self._reread(key, fds, more, switches)
                except OSError:  # that thread ended: one listed with its tid now is another
                    self._forget(key)
            fds = self._open(base)
            if fds is None:  # past KEPT_FDS_MAX
                return parse_thread_sched(_read(f"{base}/schedstat"), _read(f"{base}/stat"), more)
            self._fds[key] = fds
            return self._reread(key, fds, more, switches)
        except (OSError, ValueError, IndexError):
            self._forget(key)
            return None

    def _reread(self, key: tuple[int, int], fds: tuple[int, int], more: bytes, switches: bool) -> ThreadSched:
        """One thread's counters through its kept descriptors; its ``stat`` only if it ran since the last read."""
        schedstat = os.pread(fds[0], 256, 0)
        last = self._last.get(key)
        if last is not None and not switches:
            exec_ns, delay_ns = schedstat.split()[:2]
            if int(exec_ns) == last.exec_ns:  # it did not run: its last CPU is the same
                return replace(last, run_delay_ns=int(delay_ns), nvcsw=0, nivcsw=0, migrations=None)
        self._last[key] = parse_thread_sched(schedstat, os.pread(fds[1], 1024, 0), more)
        return self._last[key]

    @staticmethod
    def _open(base: str) -> tuple[int, int] | None:
        if not _keep(2):
            return None
        opened: list[int] = []
        try:
            for name in ("schedstat", "stat"):
                opened.append(os.open(f"{base}/{name}", os.O_RDONLY))
        except OSError:
            for fd in opened:
                os.close(fd)
            _release(2)
            raise
        return opened[0], opened[1]

    def _forget(self, key: tuple[int, int]) -> None:
        self._last.pop(key, None)
        fds = self._fds.pop(key, None)
        if fds is not None:
            for fd in fds:
                os.close(fd)
            _release(2)

    def close(self) -> None:
        for key in list(self._fds):
            self._forget(key)

    def __len__(self) -> int:
        return len(self._fds)


def read_threads_sched(pids, switches: bool = False) -> dict[tuple[int, int], ThreadSched]:
    """:class:`ThreadSched` of every thread of ``pids``, keyed (pid, tid)
    (``switches``: with their switches and migrations); processes and
    threads gone meanwhile are left out."""
    out = {}
    for key in thread_keys(pids):
        sched = read_thread_sched(*key, switches)
        if sched is not None:
            out[key] = sched
    return out


def thread_keys(pids) -> Iterator[tuple[int, int]]:
    """(pid, tid) of every thread of ``pids`` still listed; processes gone are skipped."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            yield pid, int(tid)


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


PF_EXITING = 0x4  # include/linux/sched.h: the task is in do_exit, its mm on the way out


@dataclass(frozen=True)
class Task:
    """A process as ``/proc/PID/stat`` shows it now: its command name and
    whether it is exiting (``PF_EXITING`` in its flags, field 9)."""

    comm: str
    exiting: bool


def parse_task(stat: bytes) -> Task:
    close = stat.rindex(b")")
    comm = stat[stat.index(b"(") + 1 : close].decode(errors="replace")
    flags = int(stat[close + 2 :].split(None, 7)[6])  # field 9, counted from 1 (3 is the first after comm)
    return Task(comm, bool(flags & PF_EXITING))


def read_task(pid: int) -> Task | None:
    """:func:`parse_task` of ``/proc/PID/stat``; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return parse_task(f.read())
    except (OSError, ValueError, IndexError):
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


def read_cur_freq_khz(cpus, sys_root: str | Path = "/sys") -> dict[int, int]:
    """Each of ``cpus``' current frequency (``cpufreq/scaling_cur_freq``, kHz);
    CPUs without cpufreq (most VMs) are left out."""
    out = {}
    for cpu in cpus:
        try:
            out[cpu] = int(_read(f"{sys_root}/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"))
        except (OSError, ValueError):
            continue
    return out


@dataclass(frozen=True)
class RaplDomain:
    """One package's RAPL energy counter under ``/sys/class/powercap``."""

    name: str  # e.g. "package-0"
    path: str  # its energy_uj
    max_uj: int  # the counter wraps here


def rapl_packages(sys_root: str | Path = "/sys") -> list[RaplDomain]:
    """The package domains (``intel-rapl:N``, also AMD's since Linux 5.8) whose
    energy counter this process can read (root only since Linux 5.10)."""
    found = []
    for zone in sorted(Path(sys_root, "class/powercap").glob("intel-rapl:[0-9]*")):
        if ":" in zone.name.split(":", 1)[1]:  # a subzone (core, dram): inside its package's figure
            continue
        try:
            name = (zone / "name").read_text().strip()
            int((zone / "energy_uj").read_text())
            max_uj = int((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        if name.startswith("package"):
            found.append(RaplDomain(name, str(zone / "energy_uj"), max_uj))
    return found


def read_energy_uj(domains: list[RaplDomain]) -> dict[str, int]:
    """Each domain's energy counter now (microjoules); unreadable ones left out."""
    out = {}
    for domain in domains:
        try:
            out[domain.name] = int(_read(domain.path))
        except (OSError, ValueError):
            continue
    return out
