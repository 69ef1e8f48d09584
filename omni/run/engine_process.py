"""The engine process: its command line and environment, the subprocess
tree it starts, and the reader of its log.

The engine runs in a fresh subprocess in its own session, under numactl, with
``OMNI_RUN_ID`` in its environment. While it runs, a sampler thread reads the
memory and binding of its whole tree and a reader thread keeps its log (and
the phase marks that split memory into after-load and steady). When its block
is left, however it is left, every process carrying its run id is killed.
:class:`LiveRuns` stops every engine of this process at once.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from omni.engines.llamacpp import BUFFER_MARKER
from omni.engines.protocol import PHASE_PREFIX
from omni.engines.vllm import COMPILE_MARKERS, FALLBACK_MARKERS
from omni.host.placement import numactl_path, pin_argv
from omni.measure.sampler import TreeSampler
from omni.measure.sources import tree_sampler
from omni.run.plan import PlanItem
from omni.run.progress import BOARD
from omni.run.reaper import RUN_ID_VAR, Watchdog, reap_run, wait_for_exit
from omni.serving.server_metrics import KV_MARKERS

STDERR_TAIL_LINES = 60
# "ValueError: No available memory for the cache blocks. Try ..."
EXCEPTION_LINE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.+)$")


def engine_argv(item: PlanItem, workdir: Path, python: str, simulate: bool = False) -> tuple[list[str], str]:
    """The engine's command line, pinned to the item's slot, and how it is pinned."""
    argv = [
        python,
        "-m",
        f"omni.engines.{item.arm.engine}",
        "--arm",
        str(workdir / "arm.json"),
        "--out",
        str(workdir / "result.json"),
    ]
    return (argv, "none") if simulate else pin_argv(item.slot, argv, numactl_path())


def engine_env(item: PlanItem, env_vars: dict[str, str] | None = None) -> dict[str, str]:
    """The engine process's environment: omni's, the engine env's declared
    variables, then the arm's own (an arm's setting wins)."""
    env = dict(os.environ)
    env.update(env_vars or {})
    env.update(item.arm.env)
    env[RUN_ID_VAR] = item.run_id
    env["PYTHONUNBUFFERED"] = "1"
    return env


class LogReader(threading.Thread):
    """Copies the engine's output to its log file, keeps the tail, relays
    phases, and keeps the lines that say how a compiled start got its graph
    which kernels fell back to slower ones, and where llama.cpp put the weights."""

    def __init__(self, stream, log_path: Path, sampler: TreeSampler, run_id: str = "") -> None:
        super().__init__(name="engine-log", daemon=True)
        self.stream, self.log_path, self.sampler, self.run_id = stream, log_path, sampler, run_id
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.write_error: OSError | None = None  # the log file could not be written (a full disk)
        self.compile_lines: list[str] = []  # COMPILE_MARKERS seen, however long the log
        self.fallback_lines: list[str] = []  # FALLBACK_MARKERS seen, likewise
        self.buffer_lines: list[str] = []  # llama.cpp's weight buffers (BUFFER_MARKER), likewise
        self.kv_lines: list[str] = []  # a server's KV allocation (KV_MARKERS), likewise

    def run(self) -> None:
        log = self._open()
        for raw in self.stream:  # drained to the end whatever happens to the file: a
            line = raw.decode("utf-8", errors="replace").rstrip("\n")  # full pipe would stall the engine
            if line.startswith(PHASE_PREFIX):
                phase = line[len(PHASE_PREFIX) :].strip()
                self.sampler.mark(phase)
                BOARD.phase(self.run_id, phase)
            self.tail.append(line)
            if any(marker in line for marker in COMPILE_MARKERS.values()):
                self.compile_lines.append(line)
            if any(marker in line for marker in FALLBACK_MARKERS):
                self.fallback_lines.append(line)
            if BUFFER_MARKER in line:
                self.buffer_lines.append(line)
            if any(marker in line for marker in KV_MARKERS):
                self.kv_lines.append(line)
            if log is not None:
                try:
                    log.write(line + "\n")
                    log.flush()
                except OSError as error:
                    self.write_error, log = error, self._close(log)
        if log is not None:
            self._close(log)

    def _open(self):
        try:
            return open(self.log_path, "w", encoding="utf-8", errors="replace")
        except OSError as error:
            self.write_error = error
            return None

    def _close(self, log) -> None:
        try:
            log.close()
        except OSError as error:  # the buffered rest did not fit either
            self.write_error = self.write_error or error


class RunInterrupted(Exception):
    """This process is going down mid-run (:meth:`LiveRuns.interrupt`): the
    run's engines are reaped and it gets no row, so ``--resume`` runs it again."""


# How often a waiting run looks whether the process is going down.
STOP_POLL_S = 0.2
# how long a run's other processes get to follow its front out before they are
# reaped and recorded as left behind
EXIT_GRACE_S = 3.0
# interrupt() waits this long at most for the engines to be reaped: reap_run
# takes 13 s at worst (3 s grace, 10 s of SIGKILLs), and a Prefect process
# worker SIGKILLs a flow run 30 s after its SIGTERM
# (prefect/runner/_cancellation_manager.py, grace_seconds = 30.0).
INTERRUPT_WAIT_S = 20.0


class LiveRuns:
    """The engines this process has running, so that one call stops them all.

    Why: a Prefect cancel is a SIGTERM to the flow-run process, which Prefect
    turns into a ``TerminationSignal`` in the main thread; the engines run in
    task threads, which nothing interrupts, and Prefect's engine waits for
    those threads (``ThreadPoolTaskRunner.cancel_all`` shuts its pool down
    with ``wait=True``) before it records the state. Measured before this
    existed: Cancelled 36 s after Cancelling (08:34:37 to 08:35:13), set by the
    worker once it had SIGKILLed the flow run at the end of its 30 s grace; the
    engine ran all that while, and only the watchdog reaped it. With it: the
    engines are gone within a second of the cancel and Prefect's engine logs
    "Flow run was cancelled." itself.
    """

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._changed = threading.Condition()
        self._live = 0

    def enter(self, run_id: str) -> None:
        with self._changed:
            if self.stopping.is_set():
                raise RunInterrupted(f"run {run_id} not started: this process is going down")
            self._live += 1

    def leave(self) -> None:
        with self._changed:
            self._live -= 1
            self._changed.notify_all()

    def interrupt(self, wait_s: float = INTERRUPT_WAIT_S) -> int:
        """Stop every run now (each waiting run raises :class:`RunInterrupted`
        and leaves its ``EngineProcess`` block, which reaps its engines) and
        start no other; wait until their engines are reaped. Returns how many
        runs had engines going."""
        self.stopping.set()
        with self._changed:
            running = self._live
            self._changed.wait_for(lambda: self._live == 0, timeout=wait_s)
        return running

    def reopen(self) -> None:
        """Allow runs again (a new sweep in this process)."""
        self.stopping.clear()


RUNS = LiveRuns()


class EngineProcess:
    """Context manager around one engine subprocess tree.

    On exit from the block, however it is left (normal end, timeout,
    exception, Ctrl-C, :meth:`LiveRuns.interrupt`), the run's processes are
    reaped: SIGTERM, grace, SIGKILL, then anything still carrying the run id.
    """

    def __init__(self, argv: list[str], env: dict, run_id: str, log_path: Path, cpus: tuple[int, ...] = ()) -> None:
        self.argv, self.env, self.run_id, self.log_path = argv, env, run_id, log_path
        self.cpus = cpus  # the slot's: the sampler reads their frequency
        self.leftovers: set[int] = set()

    def __enter__(self) -> EngineProcess:
        RUNS.enter(self.run_id)
        try:
            self._start()
        except BaseException:
            RUNS.leave()
            raise
        return self

    def _start(self) -> None:
        self.watchdog = Watchdog(self.run_id).__enter__()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.sampler = tree_sampler(self.proc.pid, cpus=self.cpus).start()
        self.reader = LogReader(self.proc.stdout, self.log_path, self.sampler, self.run_id)
        self.reader.start()

    def wait(self, timeout_s: float) -> bool:
        """Wait for the engine to exit; ``False`` if the deadline came first.
        Raises :class:`RunInterrupted` when this process is going down."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.proc.wait(timeout=max(0.0, min(STOP_POLL_S, deadline - time.monotonic())))
                return True
            except subprocess.TimeoutExpired:
                if RUNS.stopping.is_set():
                    raise RunInterrupted(f"run {self.run_id} interrupted: this process is going down") from None
                if time.monotonic() >= deadline:
                    return False

    def __exit__(self, *exc) -> None:
        try:
            self.sampler.stop()
            pids = self.sampler.tree_pids() - {self.proc.pid}
            # the front ended by itself: its children may be a moment behind it
            # (vLLM's EngineCore, multiprocessing's resource tracker), and one
            # that exits on its own was not left behind; when none is left
            # there is nothing to reap
            gone = self.proc.poll() is not None and wait_for_exit(self.run_id, pids, EXIT_GRACE_S)
            self.leftovers = set() if gone else reap_run(self.run_id, pids | {self.proc.pid})
            self.proc.wait()
            self.leftovers.discard(self.proc.pid)
            self.reader.join(timeout=5)
            self.proc.stdout.close()
        finally:
            self.watchdog.__exit__(*exc)
            self.wall_s = time.monotonic() - self.started
            RUNS.leave()


def failure_reason(tail: list[str]) -> str:
    """The first and last exception in the log tail: the root cause and what
    finally killed the engine (vLLM reports the former, then re-raises)."""
    found = [m.group(0) for line in tail if (m := EXCEPTION_LINE.search(line))]
    if not found:
        return tail[-1] if tail else ""
    unique = list(dict.fromkeys([found[0], found[-1]]))
    return " ... ".join(text[:300] for text in unique)


def describe_exit(code: int) -> str:
    if code < 0:
        return f"engine killed by {signal.Signals(-code).name}"
    return f"engine exited with code {code}"
