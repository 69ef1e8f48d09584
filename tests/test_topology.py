import pytest

from omni.errors import OmniError
from omni.topology import allocate_slots, format_cpulist, parse_cpulist, physical_cores, read_topology
from tests.conftest import make_sysfs, xeon_8480c_2s


@pytest.mark.parametrize(
    "text, cpus",
    [
        ("0-3,8", [0, 1, 2, 3, 8]),
        ("0", [0]),
        ("", []),
        ("0-55,112-167\n", [*range(56), *range(112, 168)]),
        ("10-14:2", [10, 12, 14]),
        ("3,1,2", [1, 2, 3]),
    ],
)
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("cpus, text", [([0, 1, 2, 5], "0-2,5"), ([], ""), ([7], "7"), ([3, 1, 2, 9, 10], "1-3,9-10")])
def test_format_cpulist(cpus, text):
    assert format_cpulist(cpus) == text
    assert parse_cpulist(text) == sorted(cpus)


@pytest.mark.parametrize("bad", ["a", "3-1", "1-", "0,,2", "1-4:0"])
def test_parse_cpulist_rejects_garbage(bad):
    with pytest.raises(OmniError, match="bad CPU list"):
        parse_cpulist(bad)


def test_two_socket_fixture(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    assert sorted(topo.nodes) == [0, 1]
    assert topo.nodes[1].cpus[:3] == (56, 57, 58)
    assert topo.siblings[0] == (0, 112)
    assert physical_cores(topo, topo.nodes[0].cpus) == list(range(56))


def test_slots_stay_on_their_node(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    slots = allocate_slots(topo, cores=24)
    assert [(s.node, s.cpus[0], len(s.cpus)) for s in slots] == [(0, 0, 24), (0, 24, 24), (1, 56, 24), (1, 80, 24)]
    assert all(s.mems == (s.node,) for s in slots)
    smt = allocate_slots(topo, cores=2, node=1, smt=True)[0]
    assert smt.cpus == (56, 57, 168, 169)


def test_explicit_cpus_and_errors(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    assert allocate_slots(topo, cpus=list(range(56, 80)))[0].node == 1
    with pytest.raises(OmniError, match="straddles NUMA nodes"):
        allocate_slots(topo, cpus=[55, 56])
    with pytest.raises(OmniError, match="not online"):
        allocate_slots(topo, cpus=[300])
    with pytest.raises(OmniError, match="does not fit"):
        allocate_slots(topo, cores=57)


def test_offline_cpus_and_memory_only_node(tmp_path):
    root = make_sysfs(tmp_path, {0: [0, 1, 2, 3], 1: []}, offline=[3])
    topo = read_topology(root)
    assert topo.nodes[0].cpus == (0, 1, 2)
    assert topo.nodes[1].cpus == ()
    with pytest.raises(OmniError, match="node 1 has no online CPUs"):
        allocate_slots(topo, node=1)


def test_this_host_has_a_slot():
    topo = read_topology()
    assert allocate_slots(topo)[0].cpus
