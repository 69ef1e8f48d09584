"""The dispatcher on a stand-in executor: each slot's runs in plan order, never two runs on one slot."""

from __future__ import annotations

from concurrent.futures import Future

from omni.host.topology import Slot
from omni.run.plan import plan_sweep
from omni.run.schedule import dispatch
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest
from tests.specs import synthetic, write_spec

SLOTS = [Slot(0, 0, (0, 1), (0,)), Slot(1, 1, (2, 3), (1,))]


def test_dispatch_keeps_each_slots_plan_order_and_never_doubles_a_slot(tmp_path):
    prepared = prepare_sweep(
        SweepRequest(spec=write_spec(tmp_path, [synthetic(f"a{i}") for i in range(3)], passes=2), results=tmp_path)
    )
    items = plan_sweep(prepared.loaded, prepared.sweep_id, SLOTS)
    pending: list[Future] = []
    started, busy = [], set()

    def submit(item):
        assert item.slot.index not in busy, "a slot got a second run"
        busy.add(item.slot.index)
        started.append((item.order_index, item.slot.index))
        future = Future()
        future.add_done_callback(lambda _f, s=item.slot.index: busy.discard(s))
        pending.append(future)
        if len(pending) == len(SLOTS) or len(started) > 3:  # both slots taken, or slot 0's share done: finish the older
            pending.pop(0).set_result({})
        return future

    placed = dispatch(items, SLOTS, submit)
    for slot in (0, 1):
        mine = [i.order_index for i in items if i.slot == SLOTS[slot]]
        assert [o for o, s in started if s == slot] == mine and len(mine) == 3
    assert sorted(o for o, _ in started) == list(range(6))
    assert all(p.slot == i.slot for p, _ in placed for i in items if i.order_index == p.order_index)


def test_the_flow_prepares_the_runs_the_cli_prepared_whatever_is_stored_since(tmp_path):
    """omni sweep hands the flow its prepared runs' ids in the request: the
    flow's preparation of a resume has exactly those, not what the store holds
    by then (a run another process stored meanwhile is then a skipped
    outcome at run time, not a missing one); without ids, every run not stored."""
    from omni.sweep.prepare import write_manifest

    spec = write_spec(tmp_path, [synthetic(f"a{i}") for i in range(2)], passes=2)
    first = prepare_sweep(SweepRequest(spec=spec, results=tmp_path / "r"))
    write_manifest(first)
    resumed = prepare_sweep(SweepRequest(resume=first.sweep_id, results=tmp_path / "r"))
    ids = tuple(item.run_id for item in resumed.items)
    some = ids[1:3]
    again = prepare_sweep(resumed.request.model_copy(update={"run_ids": some}))
    assert tuple(item.run_id for item in again.items) == some and again.sweep_id == first.sweep_id
    everything = prepare_sweep(resumed.request)
    assert tuple(item.run_id for item in everything.items) == ids
