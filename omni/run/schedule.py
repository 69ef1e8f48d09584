"""Runs on slots at the same time: each slot holds one run, each slot's runs start in plan order.

Why an allocator inside the flow rather than a Prefect global concurrency limit
per slot: a limit counts holders, it does not say *which* slot a run got, and
a run must know its CPUs before it starts (they go on its numactl line and in
its row). Each run has its slot from the plan (arms rotated over slots,
:func:`omni.run.plan.rotated_slot`); the flow starts, the moment a slot frees, the
earliest run of the plan assigned to it. It works the same with Prefect's
temporary server and with a real one. Two sweeps on one host (a nightly
starting while a manual sweep runs) are kept apart by per-CPU file locks
(:func:`hold_cpus`), and a foreign load by the busy-core refusal.
"""

from __future__ import annotations

import fcntl
import os
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from omni.host.topology import Slot
from omni.run.plan import PlanItem

LOCK_DIR_VAR = "OMNI_LOCK_DIR"
DEFAULT_LOCK_DIR = "/tmp/omni-locks"


class _Completable(Protocol):
    def add_done_callback(self, fn: Callable) -> None: ...


class SlotPool:
    """The sweep's free slots; :meth:`take` blocks until one is free and says which."""

    def __init__(self, slots: list[Slot]) -> None:
        if not slots:
            raise ValueError("a slot pool needs at least one slot")
        self._free: queue.Queue[Slot] = queue.Queue()
        for slot in slots:
            self._free.put(slot)

    def take(self) -> Slot:
        return self._free.get()

    def give(self, slot: Slot) -> None:
        self._free.put(slot)


def dispatch(
    items: list[PlanItem], slots: list[Slot], submit: Callable[[PlanItem], _Completable]
) -> list[tuple[PlanItem, _Completable]]:
    """Submit each item on its own slot (``item.slot``), each slot's items in
    plan order: when a slot frees, the earliest item waiting for it starts,
    and a slot none waits for stays free. The slot returns when its run ends.

    An item whose slot is not one of ``slots`` (planned on other slots)
    takes slot (its position in ``items``) mod len(slots). ``submit`` returns anything with ``add_done_callback``
    (a Prefect future or a ``concurrent.futures.Future``); a future that
    fails still frees its slot. Returns each item as placed, with its future,
    in the order they started.
    """
    pool = SlotPool(slots)
    waiting: dict[Slot, list[PlanItem]] = {slot: [] for slot in slots}
    for i, item in enumerate(items):
        slot = item.slot if item.slot in waiting else slots[i % len(slots)]
        waiting[slot].append(replace(item, slot=slot))
    submitted = []
    left = len(items)
    while left:
        slot = pool.take()
        if not waiting[slot]:
            continue  # this slot's share is done; the others' runs end on theirs
        placed = waiting[slot].pop(0)
        future = submit(placed)
        future.add_done_callback(lambda _done, slot=placed.slot: pool.give(slot))
        submitted.append((placed, future))
        left -= 1
    return submitted


def run_concurrently(items: list[PlanItem], slots: list[Slot], run: Callable[[PlanItem], dict]) -> list[dict]:
    """:func:`dispatch` on plain threads, for callers without Prefect."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(slots)) as executor:
        submitted = dispatch(items, slots, lambda item: executor.submit(run, item))
        return [future.result() for _, future in submitted]


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_VAR, DEFAULT_LOCK_DIR))


@contextmanager
def hold_cpus(cpus: tuple[int, ...], directory: Path | None = None) -> Iterator[float]:
    """Hold every CPU of a slot exclusively across processes on this host.

    ``cpus``: what the slot owns (:attr:`omni.host.topology.Slot.owned`), its idle
    SMT siblings included, so a sweep with ``smt: true`` or other cores cannot
    start a run on a core this slot's run is using. One ``flock`` per CPU, taken in ascending order (no two holders can wait on
    each other), so sweeps with different slot sizes still exclude each other
    on the CPUs they share. Yields the seconds spent waiting. The kernel drops
    the locks if the holder dies, SIGKILL included.
    """
    directory = directory or lock_dir()
    directory.mkdir(parents=True, exist_ok=True)
    if directory.stat().st_uid == os.getuid():
        os.chmod(directory, 0o1777)  # other users' sweeps lock the same CPUs
    fds = []
    start = time.monotonic()
    try:
        for cpu in sorted(cpus):
            fd = os.open(directory / f"cpu{cpu}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield time.monotonic() - start
    finally:
        for fd in fds:
            os.close(fd)  # closing the only descriptor releases its flock


@contextmanager
def claim_run(run_id: str, directory: Path | None = None) -> Iterator[bool]:
    """Claim one run id on this host, without waiting: True while this process
    holds it, False when another process does (two resumes of one sweep, a
    deployment run racing a CLI run). The kernel drops the claim if the
    holder dies; the small lock files stay, as the CPU locks do."""
    directory = (directory or lock_dir()) / "runs"
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / f"{run_id}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
