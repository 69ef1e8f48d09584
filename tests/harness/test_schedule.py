"""Slots at the same time: one run per slot, plan order, host-wide CPU locks."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from omni.cpulist import format_cpulist
from omni.host.topology import Slot
from omni.run.schedule import claim_run, hold_cpus
from omni.sweep.execute import run_sweep_items
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest
from tests.conftest import omni, xeon_8480c_2s
from tests.specs import synthetic, write_spec

SLOTS = [Slot(0, 0, (0, 1), (0,)), Slot(1, 1, (2, 3), (1,))]


@pytest.mark.slow
def test_two_fixture_slots_run_at_once_one_run_at_a_time_each(tmp_path):
    """Placement from the 2-socket fixture (not applied: this host lacks those
    CPUs), timing real: runs on the two slots overlap, runs on one never do."""
    root = xeon_8480c_2s(tmp_path / "sysfs")
    arms = [synthetic(f"a{i}", load_s=1.0, mem_mb=8) for i in range(4)]
    spec = write_spec(tmp_path, arms, slots={"cores": 28, "count": 2})
    prepared = prepare_sweep(SweepRequest(spec=spec, results=tmp_path / "results", sysfs_root=root))
    rows = pd.DataFrame(run_sweep_items(prepared))
    assert (rows["status"] == "ok").all(), rows["error"].tolist()
    # each run on the slot the plan rotated its arm to: arm i, pass p on slot (i + p) mod 2
    position = {arm["name"]: i for i, arm in enumerate(arms)}
    assert (rows["slot_index"] == [(position[a] + p) % 2 for a, p in zip(rows["arm"], rows["pass_index"])]).all()
    for slot, node, cpus in ((0, 0, "0-27"), (1, 1, "56-83")):
        mine = rows[rows["slot_index"] == slot].sort_values("started_at")
        assert (mine["numa_node"] == node).all() and (mine["membind"].map(list) == [[node]] * len(mine)).all()
        assert {format_cpulist(c) for c in mine["cpus"]} == {cpus}
        starts, ends = mine["started_at"].tolist(), mine["finished_at"].tolist()
        assert all(b >= a for a, b in zip(ends, starts[1:])), "one slot ran two runs at once"
    first = rows.sort_values("started_at").groupby("slot_index").first()
    assert first["started_at"].max() < first["finished_at"].min(), "the slots did not run at the same time"
    assert all("placement_simulated" in rules for rules in rows["warning_rules"])


def another_process_holding(hold: str, directory: Path) -> subprocess.Popen:
    """A process inside ``with <hold> as mine:`` (omni.run.schedule, on ``directory``)
    until told to go: it says whether it got it."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys; from pathlib import Path; from omni.run.schedule import claim_run, hold_cpus\n"
                f"with {hold.format(directory=f'Path({str(directory)!r})')} as mine:\n"
                "    print('held' if mine is not False else 'refused', flush=True); sys.stdin.readline()\n"
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_cpu_locks_exclude_another_process_on_the_same_cpus(tmp_path):
    holder = another_process_holding("hold_cpus((5, 6), {directory})", tmp_path)
    got = threading.Event()

    def take():
        with hold_cpus((4, 5), tmp_path):  # shares CPU 5
            got.set()

    with hold_cpus((7,), tmp_path):  # other CPUs: free at once
        pass
    taker = threading.Thread(target=take)
    taker.start()
    assert not got.wait(0.5), "took CPU 5 while another process held it"
    holder.communicate("go\n", timeout=10)
    assert got.wait(10)
    taker.join()


def test_a_run_claimed_by_another_process_is_not_claimed_until_it_lets_go(tmp_path):
    holder = another_process_holding("claim_run('r1', {directory})", tmp_path)
    with claim_run("r1", tmp_path) as mine, claim_run("r2", tmp_path) as other:
        assert not mine and other  # at once, without waiting; another run id is free
    holder.communicate("go\n", timeout=10)
    with claim_run("r1", tmp_path) as mine:
        assert mine


def test_dry_run_on_the_two_socket_fixture_shows_two_slots_at_once(tmp_path):
    root = xeon_8480c_2s(tmp_path / "sysfs")
    spec = write_spec(tmp_path, [synthetic("a"), synthetic("b")], passes=2, slots={"cores": 28, "count": 2})
    done = omni("sweep", str(spec), "--results", str(tmp_path / "results"), "--dry-run", "--sysfs-root", str(root))
    assert done.returncode == 0, done.stderr
    assert "4 run(s) on 2 slot(s) at once" in done.stdout
    assert "slot 0: node 0, cpus 0-27, membind 0" in done.stdout
    assert "slot 1: node 1, cpus 56-83, membind 1" in done.stdout
    waves = [line for line in done.stdout.splitlines() if " wave 0 " in line]
    assert len(waves) == 2 and any("node 0 cpus 0-27 membind 0" in w for w in waves)
    assert any("node 1 cpus 56-83 membind 1" in w for w in waves)
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "slots, needle",
    [
        ({"cpus": "50-60"}, "straddles NUMA nodes (node 0: 50-55; node 1: 56-60)"),
        ({"cpus": "300"}, "CPU(s) 300 that this host does not have (present: 0-223)"),
        ({"cores": 64}, "slots.cores=64 does not fit: the largest node has 56 physical core(s)"),
        ({"node": 2}, "slots.node 2 does not exist on this host (nodes: 0, 1)"),
        ({"cpus": ["0-3", "2-5"]}, "share CPU(s) 2-3"),
        ({"cores": 28, "count": 5}, "slots.count=5 but the request gives only 4 slot(s)"),
    ],
)
def test_bad_slot_requests_give_one_message_and_launch_nothing(tmp_path, slots, needle):
    root = xeon_8480c_2s(tmp_path / "sysfs")
    spec = write_spec(tmp_path, [synthetic("a")], slots=slots)
    results = tmp_path / "results"
    done = omni("sweep", str(spec), "--results", str(results), "--sysfs-root", str(root))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"error: {spec}: ") and needle in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3 and "Traceback" not in done.stderr
    assert not results.exists()


@pytest.mark.parametrize(
    "flags, slots",
    [
        (["--cores", "56-79"], ["slot 0: node 1, cpus 56-79, membind 1"]),
        (
            ["--cores", "0-3", "--cores", "56-59"],
            ["slot 0: node 0, cpus 0-3, membind 0", "slot 1: node 1, cpus 56-59, membind 1"],
        ),
        (["--node", "1"], ["slot 0: node 1, cpus 56-83, membind 1", "slot 1: node 1, cpus 84-111, membind 1"]),
        (["--cores", "50-60", "--straddle"], ["slot 0: node 0, cpus 50-60, membind 0-1"]),
    ],
)
def test_cores_and_node_override_the_spec_slots(tmp_path, flags, slots):
    """The origin harness's --cores: the spec asks for 28-core slots on both
    nodes; the command line replaces that (spec's cores kept for --node)."""
    root = xeon_8480c_2s(tmp_path / "sysfs")
    spec = write_spec(tmp_path, [synthetic("a")], slots={"cores": 28})
    done = omni(
        "sweep", str(spec), "--results", str(tmp_path / "results"), "--dry-run", "--sysfs-root", str(root), *flags
    )
    assert done.returncode == 0, done.stderr
    for slot in slots:
        assert slot in done.stdout, done.stdout
    assert f"on {len(slots)} slot(s)" in done.stdout


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--cores", "50-60"], "--cores 50-60 (overriding"),
        (["--cores", "300"], "CPU(s) 300 that this host does not have (present: 0-223)"),
        (["--node", "2"], "slots.node 2 does not exist on this host (nodes: 0, 1)"),
        (["--cores", "0-3", "--node", "1"], "give --cores or --node, not both"),
        (["--cores", "3-x"], "--cores 3-x: --cores:"),
        (["--cores", "0-3", "--cores", "2-5"], "share CPU(s) 2-3"),
        (["--straddle"], "--straddle applies to --cores or --node"),
    ],
)
def test_bad_cores_or_node_give_one_message_and_launch_nothing(tmp_path, flags, needle):
    root = xeon_8480c_2s(tmp_path / "sysfs")
    spec = write_spec(tmp_path, [synthetic("a")])
    results = tmp_path / "results"
    done = omni("sweep", str(spec), "--results", str(results), "--sysfs-root", str(root), *flags)
    assert done.returncode == 2, done.stdout + done.stderr
    assert needle in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3 and "Traceback" not in done.stderr
    assert not results.exists()


def test_passes_rotate_each_arm_over_every_slot_equally(tmp_path):
    """A cyclic Latin square: over 4 passes on 2 slots each of 3 arms (and the
    A/A control) runs twice on each slot, whatever order the seed shuffles."""
    from omni.run.plan import plan_sweep
    from omni.spec import load_spec

    loaded = load_spec(write_spec(tmp_path, [synthetic(f"a{i}") for i in range(3)], passes=4))
    items = plan_sweep(loaded, "s", SLOTS)
    visits = pd.crosstab([i.arm.name for i in items], [i.slot.index for i in items])
    assert set(visits.index) == {"a0", "a1", "a2", "a0.control"} and (visits == 2).all().all()
    assert {i.slot for i in plan_sweep(loaded, "s", SLOTS[:1])} == {SLOTS[0]}  # one slot: every run on it


def test_dispatch_waits_for_the_assigned_slot_and_keeps_each_slots_plan_order():
    """Items 0 and 2 are slot 0's, item 1 slot 1's: while item 0 runs, item 2
    waits although slot 1 frees first, and slot 1 takes nothing it was not given.
    An item planned on a slot not in the pool (other slots on resume) takes
    the rotation's slot among these."""
    from concurrent.futures import Future
    from dataclasses import replace

    from omni.run.plan import PlanItem
    from omni.run.schedule import dispatch

    def item(order: int, slot: Slot) -> PlanItem:
        return PlanItem(f"r{order}", "s", "t", None, 0, order, slot)

    stranger = Slot(7, 0, (9,), (0,))
    items = [item(0, SLOTS[0]), item(1, SLOTS[1]), item(2, SLOTS[0]), item(3, stranger)]
    futures: dict[str, Future] = {}
    started = []

    def submit(placed):
        started.append((placed.run_id, placed.slot.index))
        futures[placed.run_id] = Future()
        if placed.run_id == "r3":
            futures["r0"].set_result({})  # slot 0 frees only now, long after slot 1 did
        if placed.run_id != "r0":
            futures[placed.run_id].set_result({})
        return futures[placed.run_id]

    placed = dispatch(items, SLOTS, submit)
    assert started == [("r0", 0), ("r1", 1), ("r3", 1), ("r2", 0)]
    assert [p.run_id for p, _ in placed] == ["r0", "r1", "r3", "r2"]
    assert replace(items[3], slot=SLOTS[1]) in [p for p, _ in placed]  # position 3 of 2 slots: slot 1
