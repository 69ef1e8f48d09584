"""Memory binding from the policy and the pages, on /proc text captured in the
two-node guest (tests/numa_vm/guest.py --capture; make numa-vm-capture) and,
for OpenBLAS's buffer, on this one-node host: never on text omni made."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni.cpulist import parse_cpulist
from omni.host.placement import verify_binding
from omni.host.topology import Slot
from omni.measure.mempolicy import local_fraction, node_list, parse_numa_maps, parse_policy, policy_of_thread
from omni.measure.numa_pages import NumaSeen, NumaSource
from omni.measure.procfs import read_status
from omni.measure.sampler import ProcessSeen
from omni.measure.sources import tree_sampler

GUEST = Path(__file__).parents[1] / "fixtures" / "numa_guest"
HOST = Path(__file__).parents[1] / "fixtures" / "numa_host"  # captured on a one-node host
NODE1 = Slot(0, 1, (1,), (1,))
BOTH = Slot(0, 0, (0, 1), (0, 1))


def captured(label: str, root: Path = GUEST) -> tuple[ProcessSeen, NumaSeen]:
    """A captured process as the sampler would have seen it."""
    folder = root / label
    status = read_status_text((folder / "status").read_text()) if (folder / "status").exists() else {}
    name = status.get("Name", "python3")
    proc = ProcessSeen(
        4242,
        name,
        parse_cpulist(status.get("Cpus_allowed_list", "1")),
        parse_cpulist(status.get("Mems_allowed_list", "0-1")),
    )
    maps = parse_numa_maps((folder / "numa_maps").read_bytes())
    return proc, NumaSeen(4242, name, maps, steady=maps, policies=set(maps.policies), task_policies={maps.task_policy})


def read_status_text(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


@pytest.mark.parametrize(
    "text, mode, nodes",
    [
        ("bind:1", "bind", (1,)),
        ("bind:0-1", "bind", (0, 1)),
        ("default", "default", ()),
        ("prefer:1", "prefer", (1,)),
        ("interleave:0-3", "interleave", (0, 1, 2, 3)),
        ("bind=static:1", "bind", (1,)),
        ("local", "local", ()),
        ("weighted interleave:0-1", "weighted interleave", (0, 1)),
    ],
)
def test_parse_policy(text, mode, nodes):
    policy = parse_policy(text)
    assert (policy.mode, policy.nodes, policy.text) == (mode, nodes, text)


def test_only_bind_to_exactly_the_slot_confines_a_one_node_slot():
    assert parse_policy("bind:1").confines_to((1,), allow_interleave=False)
    for text in ("bind:0-1", "bind:0", "default", "prefer:1", "interleave:1", "local"):
        assert not parse_policy(text).confines_to((1,), allow_interleave=False), text
    assert parse_policy("interleave:0-1").confines_to((0, 1), allow_interleave=True)


def test_guest_process_under_membind_1_has_cpuset_mems_0_1_but_policy_bind_1():
    """The bug this module fixes: Mems_allowed_list is the cpuset (0-1 under
    numactl --membind=1); the policy in numa_maps is what binds memory."""
    status = read_status_text((GUEST / "membind1" / "status").read_text())
    assert status["Mems_allowed_list"] == "0-1" and status["Cpus_allowed_list"] == "1"
    maps = parse_numa_maps((GUEST / "membind1" / "numa_maps").read_bytes())
    assert set(maps.policies) == {"bind:1"}
    assert set(maps.anon_kib) == {1} and maps.anon_total_kib >= 8 * 1024  # the probe touched 8 MiB
    assert local_fraction(maps.anon_kib, (1,)) == 1.0
    # shared libraries were read into the page cache on node 0 before: file pages may be remote
    assert maps.file_kib.get(1, 0) > 0


def test_bound_guest_process_passes_the_check_that_used_to_fail_it():
    proc, numa = captured("membind1")
    check = verify_binding({proc.pid: proc}, NODE1, membind_expected=True, numa={proc.pid: numa})
    assert check.ok, check.violations
    assert check.mems_seen == [0, 1]  # kept, as what it is: the cpuset
    assert check.policies_seen == ["bind:1"] and check.local_fraction == 1.0
    assert check.memory_checked


def test_bound_process_on_the_wrong_slot_is_named():
    proc, numa = captured("membind1")
    node0 = Slot(0, 0, (1,), (0,))  # same CPU, memory expected on node 0
    check = verify_binding({proc.pid: proc}, node0, membind_expected=True, numa={proc.pid: numa})
    assert not check.ok
    assert any("pid 4242" in v and "bind:1, not bind:0" in v for v in check.violations)


def test_straddling_slot_accepts_bind_to_both_nodes_only():
    proc, numa = captured("membind0-1")
    assert numa.policies == {"bind:0-1"}
    both = verify_binding({proc.pid: ProcessSeen(proc.pid, proc.name, [0, 1], [0, 1])}, BOTH, True, {proc.pid: numa})
    assert both.ok, both.violations
    one = verify_binding({proc.pid: ProcessSeen(proc.pid, proc.name, [1], [0, 1])}, NODE1, True, {proc.pid: numa})
    assert not one.ok and "bind:0-1, not bind:1" in one.violations[0]


def test_policy_reset_by_the_engine_is_a_violation():
    proc, numa = captured("membind1-reset")
    assert "default" in numa.policies
    check = verify_binding({proc.pid: proc}, NODE1, True, {proc.pid: numa})
    assert not check.ok
    assert "memory policy default" in check.violations[0] and "set_mempolicy" in check.violations[0]


def test_pages_migrated_off_the_slot_are_a_violation_and_low_locality():
    proc, numa = captured("membind1-migrated")
    assert numa.policies == {"bind:1"}  # the policy alone would pass
    check = verify_binding({proc.pid: proc}, NODE1, True, {proc.pid: numa})
    assert not check.ok
    assert "outside membind 1" in check.violations[0] and "migrate_pages" in check.violations[0]
    assert check.local_fraction < 0.5


def test_without_membind_memory_is_measured_not_judged():
    proc, numa = captured("membind1-migrated")
    check = verify_binding({proc.pid: proc}, NODE1, membind_expected=False, numa={proc.pid: numa})
    assert check.ok and not check.memory_checked and check.local_fraction < 0.5


def test_openblas_local_buffer_is_allowed_but_a_mapping_bound_elsewhere_is_not():
    """numpy's OpenBLAS mbinds its 32 MiB buffer MPOL_PREFERRED-local (captured
    on a one-node host under numactl --membind=0): local to confined CPUs is
    the slot's node, so it stays; a mapping bound to another node does not."""
    proc, numa = captured("membind0-openblas", HOST)
    assert numa.task_policies == {"bind:0"} and "local" in numa.policies
    node0 = Slot(0, 0, (0,), (0,))
    assert verify_binding({proc.pid: proc}, node0, True, {proc.pid: numa}).ok
    numa.policies.add("bind:1")  # as if one mapping had been mbind()ed to node 1
    check = verify_binding({proc.pid: proc}, node0, True, {proc.pid: numa})
    assert not check.ok and "mappings with policy bind:1, outside membind 0 (mbind)" in check.violations[0]


def test_thread_policy_comes_from_the_first_mapping():
    text = (GUEST / "membind1" / "numa_maps").read_text()
    assert policy_of_thread(text) == "bind:1"
    assert policy_of_thread("") is None


def test_thread_with_its_own_policy_is_named():
    proc, numa = captured("membind1")
    thread = ProcessSeen(4243, "omp-worker", [1], [0, 1], policy="default")
    check = verify_binding({proc.pid: proc, "4242/4243": thread}, NODE1, True, {proc.pid: numa})
    assert not check.ok and check.violations == ("thread 4242/4243 (omp-worker) memory policy default, not bind:1",)
    assert check.procs_checked == 1


def test_pages_are_weighted_by_their_page_size():
    # an anonymous MAP_HUGETLB mapping: its N counts are 2 MiB pages
    maps = parse_numa_maps(
        "7f0000000000 bind:1 huge anon=3 dirty=3 N1=3 kernelpagesize_kB=2048\n"
        "7f1000000000 bind:1 anon=4 dirty=4 N0=1 N1=3 kernelpagesize_kB=4\n"
    )
    assert maps.anon_kib == {1: 3 * 2048 + 12, 0: 4}
    assert node_list(maps.anon_kib) == [4, 3 * 2048 + 12]


def test_this_hosts_own_numa_maps_parse():
    maps = parse_numa_maps(Path("/proc/self/numa_maps").read_bytes())
    assert maps.mappings > 10 and maps.anon_total_kib > 0
    assert read_status("self")["Cpus_allowed_list"]


def binding_row(numa: NumaSeen, proc: ProcessSeen, steady_read: bool) -> dict:
    """What the row makes of what the sampler found (omni.run.row.fill_sampled) for
    one process whose pages sit mostly off the slot, with or without a
    numa_maps read in steady state."""
    from types import SimpleNamespace

    from omni.run.row import fill_sampled

    sampler = tree_sampler(proc.pid)
    sampler.tree.seen = {proc.pid: proc}
    seen = sampler.source(NumaSource).numa_seen
    seen[proc.pid] = NumaSeen(proc.pid, numa.name, numa.latest, numa.latest if steady_read else None)
    seen[proc.pid].policies, seen[proc.pid].task_policies = numa.policies, numa.task_policies
    sampler.tree.steady_pids = {proc.pid}
    row = {"status": "ok", "warnings": [], "warning_rules": []}
    fill_sampled(row, SimpleNamespace(sampler=sampler), SimpleNamespace(slot=NODE1), "numactl", False, True)
    return row


def test_a_read_before_steady_state_is_not_trusted():
    proc, numa = captured("membind1-migrated")
    steady = binding_row(numa, proc, steady_read=True)
    assert steady["memory_binding_verified"] is True and steady["mem_local_fraction"] < 0.5
    assert "remote_memory" in steady["warning_rules"] and steady["numa_steady_missing"] == 0
    stale = binding_row(numa, proc, steady_read=False)
    assert stale["numa_steady_missing"] == 1 and "numa_not_steady" in stale["warning_rules"]
    assert stale["memory_binding_verified"] is False
    assert stale["mem_local_fraction"] is stale["mem_anon_kib_by_node"] is None
    assert stale["mem_file_local_fraction"] is stale["mem_file_kib_by_node"] is None
    assert "remote_memory" not in stale["warning_rules"]
