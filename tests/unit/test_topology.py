import pytest
from pydantic import ValidationError

from omni.cpulist import format_cpulist, parse_cpulist
from omni.errors import OmniError
from omni.host.topology import allocate_slots, physical_cores, read_topology
from omni.spec import SlotRequest
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


def test_slots_stay_on_their_node_and_alternate_nodes(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    slots = allocate_slots(topo, cores=24)
    assert [(s.index, s.node, s.cpus[0], len(s.cpus)) for s in slots] == [
        (0, 0, 0, 24),
        (1, 1, 56, 24),
        (2, 0, 24, 24),
        (3, 1, 80, 24),
    ]
    assert all(s.mems == (s.node,) for s in slots)
    two = allocate_slots(topo, cores=28, count=2)
    assert [(s.node, format_cpulist(s.cpus), s.mems) for s in two] == [(0, "0-27", (0,)), (1, "56-83", (1,))]
    smt = allocate_slots(topo, cores=2, node=1, smt=True)[0]
    assert smt.cpus == (56, 57, 168, 169)
    whole = allocate_slots(topo)
    assert [(s.node, len(s.cpus)) for s in whole] == [(0, 56), (1, 56)]


def test_explicit_cpu_lists(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    one = allocate_slots(topo, cpus=[list(range(56, 80))])
    assert [(s.node, s.mems) for s in one] == [(1, (1,))]
    two = allocate_slots(topo, cpus=[[0, 1, 2, 3], list(range(56, 80))])
    assert [(s.index, s.node) for s in two] == [(0, 0), (1, 1)]
    wide = allocate_slots(topo, cpus=[[54, 55, 56, 57]], straddle=True)[0]
    assert wide.mems == (0, 1)


@pytest.mark.parametrize(
    "request_, message",
    [
        ({"cpus": [[55, 56]]}, r"slots.cpus 55-56 straddles NUMA nodes \(node 0: 55; node 1: 56\).*straddle: true"),
        ({"cpus": [[300]]}, r"CPU\(s\) 300 that this host does not have \(present: 0-223\)"),
        ({"cpus": [[0, 1], [1, 2]]}, r"slots.cpus\[0\] and slots.cpus\[1\] share CPU\(s\) 1"),
        ({"cores": 57}, r"slots.cores=57 does not fit: the largest node has 56 physical core\(s\)"),
        ({"cores": 8, "node": 1, "count": 8}, r"slots.count=8 but the request gives only 7 slot"),
        ({"node": 5}, r"slots.node 5 does not exist on this host \(nodes: 0, 1\)"),
    ],
)
def test_bad_slot_requests_say_what_and_how(tmp_path, request_, message):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    with pytest.raises(OmniError, match=message):
        allocate_slots(topo, **request_)


def snc4(root):
    """Sub-NUMA clustering, 2 sockets x 2 clusters, 8 cores each, SMT 2."""
    nodes = {n: [*range(8 * n, 8 * n + 8), *range(32 + 8 * n, 32 + 8 * n + 8)] for n in range(4)}
    siblings = {c: [c % 32, c % 32 + 32] for c in range(64)}
    return make_sysfs(root, nodes, siblings, mem_kb={n: 64 << 20 for n in range(4)})


def test_sub_numa_clustering_gives_a_slot_per_cluster(tmp_path):
    topo = read_topology(snc4(tmp_path))
    assert sorted(topo.nodes) == [0, 1, 2, 3] and topo.nodes[2].mem_total_kb == 64 << 20
    slots = allocate_slots(topo)
    assert [(s.node, format_cpulist(s.cpus)) for s in slots] == [(0, "0-7"), (1, "8-15"), (2, "16-23"), (3, "24-31")]
    smt = allocate_slots(topo, cores=4, smt=True, count=4)
    assert [(s.node, format_cpulist(s.cpus)) for s in smt] == [
        (0, "0-3,32-35"),
        (1, "8-11,40-43"),
        (2, "16-19,48-51"),
        (3, "24-27,56-59"),
    ]


def test_offline_cpus_and_memory_only_node(tmp_path):
    root = make_sysfs(tmp_path, {0: [0, 1, 2, 3], 1: []}, offline=[3], mem_kb={1: 256 << 20})
    topo = read_topology(root)
    assert topo.nodes[0].cpus == (0, 1, 2) and topo.offline == (3,) and topo.present == (0, 1, 2, 3)
    assert topo.nodes[1].cpus == () and topo.nodes[1].mem_total_kb == 256 << 20
    with pytest.raises(
        OmniError, match=r"node 1 has no online CPUs \(a memory-only node, e.g. CXL\?\); nodes with CPUs: 0"
    ):
        allocate_slots(topo, node=1)
    with pytest.raises(OmniError, match=r"CPU\(s\) 3 that are offline \(online: 0-2\).*cpu3/online"):
        allocate_slots(topo, cpus=[[2, 3]])
    assert [format_cpulist(s.cpus) for s in allocate_slots(topo)] == ["0-2"]  # the CXL node gives no slot


def test_this_host_has_a_slot():
    topo = read_topology()
    assert allocate_slots(topo)[0].cpus


def test_a_slot_owns_its_cores_idle_smt_siblings(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    slot = allocate_slots(topo, cores=2, node=1)[0]
    assert (slot.cpus, slot.siblings, slot.smt) == ((56, 57), (168, 169), "false")
    assert slot.owned == (56, 57, 168, 169)
    assert slot.describe() == "slot 0: node 1, cpus 56-57, membind 1, owns idle SMT siblings 168-169"
    # smt: true runs on the siblings, so none is left idle; shared leaves them to others
    assert allocate_slots(topo, cores=2, node=1, smt=True)[0].siblings == ()
    shared = allocate_slots(topo, cores=2, node=1, smt="shared")[0]
    assert (shared.cpus, shared.siblings, shared.owned, shared.smt) == ((56, 57), (), (56, 57), "shared")
    # explicit CPU lists own their cores' other threads too
    explicit = allocate_slots(topo, cpus=[[0, 1, 113]])[0]
    assert (explicit.siblings, explicit.owned) == ((112,), (0, 1, 112, 113))


def test_slots_sharing_a_core_are_refused_unless_smt_shared(tmp_path):
    topo = read_topology(xeon_8480c_2s(tmp_path))
    # CPU 112 is CPU 0's sibling: two slots would run on one core
    with pytest.raises(OmniError, match=r"share physical cores: CPU\(s\) 0,112 .*smt: shared"):
        allocate_slots(topo, cpus=[[0, 1], [112]])
    both = allocate_slots(topo, cpus=[[0, 1], [112]], smt="shared")
    assert [s.owned for s in both] == [(0, 1), (112,)]


def test_no_smt_host_has_no_siblings(tmp_path):
    topo = read_topology(make_sysfs(tmp_path, {0: [0, 1, 2, 3]}))
    assert [s.siblings for s in allocate_slots(topo, cores=1)] == [(), (), (), ()]


@pytest.mark.parametrize("value, mode", [(False, "false"), (True, "true"), ("shared", "shared")])
def test_spec_smt_modes(tmp_path, value, mode):
    req = SlotRequest.model_validate({"cores": 2, "smt": value})
    topo = read_topology(xeon_8480c_2s(tmp_path))
    assert allocate_slots(topo, cores=req.cores, smt=req.smt)[0].smt == mode


@pytest.mark.parametrize("bad", ["yes", "on", 1, None])
def test_spec_smt_refuses_anything_else(bad):
    with pytest.raises(ValidationError, match="is not false, true or shared"):
        SlotRequest.model_validate({"smt": bad})
