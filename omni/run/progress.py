"""Live progress of the runs of this process: what each slot is doing now.

The runner reports each run's phase here as it goes (waiting for cores,
starting, loading, measuring, holding, tearing down, storing); ``omni sweep``
and ``omni calibrate`` draw it. A flow run in a worker reports to its own
process's board, which nobody draws: the Prefect UI has its logs and artifacts.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field, replace

# the engine's phase marks (omni.engines.protocol), as a person reads them
PHASE_WORDS = {
    "load": "loading",
    "loaded": "measuring",
    "profiling": "profiling",
    "steady": "holding for memory",
    "teardown": "tearing down",
    "done": "writing its result",
}


@dataclass(frozen=True)
class Live:
    run_id: str
    arm: str
    pass_index: int
    slot: int
    cpus: str
    phase: str
    since: float = field(default_factory=time.monotonic)  # when the run began


@dataclass(frozen=True)
class Finished:
    arm: str
    status: str
    wall_s: float


class Board:
    """Thread-safe: runs on several slots report at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, Live] = {}
        self._finished: list[Finished] = []

    def begin(self, run_id: str, arm: str, pass_index: int, slot: int, cpus: str) -> None:
        with self._lock:
            self._live[run_id] = Live(run_id, arm, pass_index, slot, cpus, "waiting for its cores")

    def phase(self, run_id: str, phase: str) -> None:
        with self._lock:
            if run_id in self._live:
                self._live[run_id] = replace(self._live[run_id], phase=PHASE_WORDS.get(phase, phase))

    def end(self, run_id: str, status: str) -> None:
        with self._lock:
            live = self._live.pop(run_id, None)
            if live is not None:
                self._finished.append(Finished(live.arm, status, time.monotonic() - live.since))

    def snapshot(self) -> tuple[list[Live], list[Finished]]:
        with self._lock:
            return sorted(self._live.values(), key=lambda r: r.slot), list(self._finished)

    def reset(self) -> None:
        with self._lock:
            self._live.clear()
            self._finished.clear()


BOARD = Board()


def eta_s(finished: list[Finished], live: list[Live], planned: int, slots: int) -> float | None:
    """Seconds left if the runs left take the median duration seen so far,
    ``slots`` at a time; None before any run finished."""
    if not finished:
        return None
    typical = statistics.median(f.wall_s for f in finished)
    now = time.monotonic()
    running = sum(max(typical - (now - r.since), 0.0) for r in live)
    queued = max(planned - len(finished) - len(live), 0)
    return (running + queued * typical) / max(slots, 1)


def describe(live: list[Live], finished: list[Finished], planned: int, slots: int) -> list[str]:
    """The lines ``omni sweep`` shows: the sweep, then one per busy slot."""
    now = time.monotonic()
    eta = eta_s(finished, live, planned, slots)
    failed = sum(1 for f in finished if f.status != "ok")
    head = f"{len(finished)}/{planned} runs done" + (f", {failed} not ok" if failed else "")
    head += f", about {eta:.0f} s left" if eta is not None else ""
    lines = [head]
    lines += [
        f"  slot {r.slot} (cpus {r.cpus}): {r.arm} pass {r.pass_index}, {r.phase}, {now - r.since:.0f} s" for r in live
    ]
    return lines
