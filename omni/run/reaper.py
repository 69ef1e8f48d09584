"""Kill a run's processes, all of them, even the ones that escaped the tree.

Every engine process carries ``OMNI_RUN_ID`` in its environment (children
inherit it, and a daemon that calls setsid keeps it). A run is over when no
live process on the host carries its id.

The orchestrator itself may die (SIGKILL, OOM) mid-run. For that case each
run has a watchdog, ``python -m omni.run.reaper --watch OMNI_RUN_ID=ID``: a small process
in its own session that blocks on a pipe whose only writer is the
orchestrator. The kernel closes the pipe when the orchestrator dies however
it dies, the watchdog reads EOF and reaps the run. We chose this over cgroup
v2 ``cgroup.kill`` because it needs no privileges and no delegated cgroup
(this host runs a hybrid v1 hierarchy with nothing delegated), while the
environment tag catches the same escapees.

The other way round, a process whose supervisor dies (a flow run whose Prefect
worker was killed) stops itself: :func:`watch_parent`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from omni.measure.procfs import read_all

RUN_ID_VAR = "OMNI_RUN_ID"
# Set by the CLI for its whole process tree, engines and Prefect's temporary
# server alike, so a watchdog can reap everything an ``omni`` command started.
SESSION_VAR = "OMNI_SESSION"


def find_run_processes(run_id: str, var: str = RUN_ID_VAR) -> set[int]:
    """Live pids whose environment has ``var=run_id`` (zombies have none)."""
    needle = f"{var}={run_id}".encode()
    me = os.getpid()
    return {pid for pid, environ in read_all("environ") if pid != me and needle in environ.split(b"\0")}


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


def live_run_processes(run_id: str, known, var: str = RUN_ID_VAR) -> set[int]:
    """The run's processes still alive: those of ``known`` and any carrying its id."""
    return {p for p in known if _alive(p)} | find_run_processes(run_id, var)


def wait_for_exit(run_id: str, known: set[int], timeout_s: float, var: str = RUN_ID_VAR) -> bool:
    """Wait up to ``timeout_s`` for the run's processes to end on their own;
    ``True`` when none is left."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not live_run_processes(run_id, known, var):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def stop_group(pid: int, grace_s: float, child: subprocess.Popen | None = None, kill: bool = True) -> bool:
    """SIGTERM to the process group ``pid`` leads; if the group is still there
    after ``grace_s``, SIGKILL to it, unless ``kill`` is false (then what is
    left is the caller's, e.g. the run's reaper). ``child`` is ``pid``'s Popen
    when this process started it: it is reaped on the way, as its zombie would
    keep the group alive. True when the group is gone."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return _reaped(child)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return _reaped(child)
        time.sleep(0.05)
    if not kill:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return _reaped(child)


def _reaped(child: subprocess.Popen | None) -> bool:
    if child is not None:
        child.wait(10)
    return True


def reap_run(
    run_id: str, known: set[int] = frozenset(), grace_s: float = 3.0, limit_s: float = 10.0, var: str = RUN_ID_VAR
) -> set[int]:
    """SIGTERM the run's processes, wait ``grace_s``, SIGKILL survivors.

    Repeats the environment scan until none is left (a dying parent may
    fork one last time) or ``limit_s`` passes; returns the pids it signalled.
    """
    targets = live_run_processes(run_id, known, var)
    signalled = set(targets)
    _signal_all(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in targets):
        time.sleep(0.05)
    stop = time.monotonic() + limit_s
    while time.monotonic() < stop:
        targets = live_run_processes(run_id, targets, var)
        if not targets:
            break
        signalled |= targets
        _signal_all(targets, signal.SIGKILL)
        time.sleep(0.05)
    return signalled


class Watchdog:
    """Context manager: a watchdog process that reaps ``var=run_id`` if we die."""

    def __init__(self, run_id: str, var: str = RUN_ID_VAR) -> None:
        self.run_id, self.var = run_id, var
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Watchdog:
        env = {k: v for k, v in os.environ.items() if k not in (RUN_ID_VAR, SESSION_VAR)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "omni.run.reaper", "--watch", f"{self.var}={self.run_id}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to our group must not kill it
            env=env,
        )
        return self

    def __exit__(self, *exc) -> None:
        # We are alive and cleaned up ourselves: tell it so, and it leaves without reaping.
        try:
            self.proc.stdin.write(b"done\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def watch_parent(on_orphaned: Callable[[int], None], poll_s: float = 1.0) -> threading.Thread:
    """SIGTERM this process once its parent is gone: a daemon thread that
    compares ``os.getppid()`` with the parent seen now, every ``poll_s``.

    For a process its parent supervises, such as a flow run a Prefect process
    worker started: Prefect puts it in a session of its own, so a ``kill -9``
    of the worker leaves it running, orphaned. Measured before this existed:
    its engine ran on for 64 s on a host whose worker was dead, its row was
    stored, and it ended Crashed only by chance, when a log line hit the dead
    worker's pipe. Not ``prctl(PR_SET_PDEATHSIG)``: that fires when the parent
    *thread* that forked us exits, not the parent process; and a pipe like
    :class:`Watchdog`'s needs the parent's help when it starts us.

    ``on_orphaned(ppid)`` (say, a log line naming the dead parent) runs first.
    """
    parent = os.getppid()

    def watch_loop() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        try:
            on_orphaned(parent)
        except BaseException:  # noqa: BLE001 - a log line to the dead parent's pipe: rich raises SystemExit
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch_loop, name="parent-watch", daemon=True)
    thread.start()
    return thread


def watch(tag: str) -> int:
    """Block until our stdin closes; unless the orchestrator said ``done`` first,
    it died: reap every process tagged ``VAR=VALUE``."""
    var, _, value = tag.partition("=")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    said = sys.stdin.buffer.read()  # returns at EOF: orchestrator finished or dead
    if said.strip() != b"done":
        reap_run(value, var=var)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--watch":
        sys.exit(watch(sys.argv[2]))
    sys.stderr.write("usage: python -m omni.run.reaper --watch VAR=VALUE\n")
    sys.exit(2)
