"""The dispatcher on a stand-in executor: plan order, never two runs on one slot."""

from __future__ import annotations

from concurrent.futures import Future

from omni.request import SweepRequest
from omni.schedule import dispatch
from omni.sweep import prepare_sweep
from omni.topology import Slot
from tests.specs import synthetic, write_spec

SLOTS = [Slot(0, 0, (0, 1), (0,)), Slot(1, 1, (2, 3), (1,))]


def test_dispatch_starts_in_plan_order_and_never_doubles_a_slot(tmp_path):
    prepared = prepare_sweep(
        SweepRequest(spec=write_spec(tmp_path, [synthetic(f"a{i}") for i in range(3)], passes=2), results=tmp_path)
    )
    pending: list[Future] = []
    started, busy = [], set()

    def submit(item):
        assert item.slot.index not in busy, "a slot got a second run"
        busy.add(item.slot.index)
        started.append((item.order_index, item.slot.index))
        future = Future()
        future.add_done_callback(lambda _f, s=item.slot.index: busy.discard(s))
        pending.append(future)
        if len(pending) == len(SLOTS):  # both slots taken: finish the older run
            pending.pop(0).set_result({})
        return future

    placed = dispatch(prepared.items, SLOTS, submit)
    assert [o for o, _ in started] == [item.order_index for item in prepared.items] == list(range(6))
    assert [s for _, s in started] == [0, 1, 0, 1, 0, 1]
    assert [item.slot.index for item, _ in placed] == [0, 1, 0, 1, 0, 1]
