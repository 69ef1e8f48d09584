"""NUMA topology read from sysfs, and cutting a host into slots.

Everything takes an injectable ``root`` so tests run on canned sysfs trees of
hosts we do not have (a 2-socket Xeon, sub-NUMA clustering, CXL memory nodes).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from omni.cpulist import format_cpulist, parse_cpulist
from omni.errors import OmniError


@dataclass(frozen=True)
class Node:
    """One NUMA node: its online CPUs and its memory (``None`` when unknown)."""

    id: int
    cpus: tuple[int, ...]
    mem_total_kb: int | None = None


@dataclass(frozen=True)
class Topology:
    nodes: dict[int, Node] = field(default_factory=dict)
    online: tuple[int, ...] = ()
    # cpu -> its SMT siblings including itself, from thread_siblings_list
    siblings: dict[int, tuple[int, ...]] = field(default_factory=dict)
    present: tuple[int, ...] = ()  # CPUs the host has, online or not

    @property
    def offline(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.present) - set(self.online)))

    def node_of(self, cpu: int) -> int | None:
        for node in self.nodes.values():
            if cpu in node.cpus:
                return node.id
        return None

    def as_dict(self) -> dict[str, list[int]]:
        """``{"0": [0, 1], ...}``: typed raw values for provenance."""
        return {str(n.id): list(n.cpus) for n in self.nodes.values()}


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _node_mem_kb(node_dir: Path) -> int | None:
    # meminfo line: "Node 0 MemTotal:       24567712 kB"
    text = _read(node_dir / "meminfo") or ""
    match = re.search(r"MemTotal:\s+(\d+)\s+kB", text)
    return int(match.group(1)) if match else None


def read_topology(root: str | Path = "/") -> Topology:
    """Read nodes, present/online CPUs and SMT siblings under ``root``/sys.

    A kernel without NUMA support has no ``node`` directory: then every online
    CPU belongs to a single node 0. Node cpulists only hold online CPUs (the
    kernel drops a CPU from its node's mask when it goes offline).
    """
    sys_dir = Path(root) / "sys" / "devices" / "system"
    online_text = _read(sys_dir / "cpu" / "online")
    online = parse_cpulist(online_text) if online_text else []
    present_text = _read(sys_dir / "cpu" / "present")
    present = sorted(set(parse_cpulist(present_text) if present_text else []) | set(online))
    nodes: dict[int, Node] = {}
    node_root = sys_dir / "node"
    for node_dir in sorted(node_root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        node_id = int(node_dir.name[4:])
        cpus = parse_cpulist(_read(node_dir / "cpulist") or "")
        if online:
            cpus = [c for c in cpus if c in set(online)]
        nodes[node_id] = Node(node_id, tuple(cpus), _node_mem_kb(node_dir))
    if not nodes:
        nodes[0] = Node(0, tuple(online), None)
    siblings: dict[int, tuple[int, ...]] = {}
    for cpu in online:
        text = _read(sys_dir / "cpu" / f"cpu{cpu}" / "topology" / "thread_siblings_list")
        siblings[cpu] = tuple(parse_cpulist(text)) if text else (cpu,)
    return Topology(nodes=nodes, online=tuple(online), siblings=siblings, present=tuple(present))


SMT_MODES = ("false", "true", "shared")


def smt_mode(smt: bool | str) -> str:
    """The spec's ``smt`` value as one of :data:`SMT_MODES`."""
    mode = str(smt).lower()
    if mode not in SMT_MODES:
        raise OmniError(f"smt {smt!r}: must be false, true or shared")
    return mode


@dataclass(frozen=True)
class Slot:
    """CPUs a run may use and the memory nodes it is bound to.

    ``siblings``: SMT siblings of the slot's cores that are not in ``cpus``.
    The run does not execute there, but a neighbour there shares the core's
    execution units and caches, so one slow OpenMP thread holds up every
    barrier: the slot owns them (busy-checked and CPU-locked with it) unless
    the spec says ``smt: shared``, which leaves them to others (``smt`` records
    the mode).
    """

    index: int
    node: int
    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    siblings: tuple[int, ...] = ()
    smt: str = "false"
    # a serving arm's load generator runs here, never on ``cpus`` (whole cores,
    # siblings included); bound to the memory of ``client_mems``
    client: tuple[int, ...] = ()
    client_mems: tuple[int, ...] = ()

    @property
    def owned(self) -> tuple[int, ...]:
        """Every CPU the slot holds: its own, its idle siblings, its client's."""
        return tuple(sorted({*self.cpus, *self.siblings, *self.client}))

    def client_slot(self) -> Slot:
        """The load generator's CPUs as a slot of their own (what pins it)."""
        return Slot(self.index, self.client_mems[0], self.client, self.client_mems)

    def describe(self) -> str:
        idle = f", owns idle SMT siblings {format_cpulist(self.siblings)}" if self.siblings else ""
        client = f", load generator on cpus {format_cpulist(self.client)}" if self.client else ""
        return (
            f"slot {self.index}: node {self.node}, cpus {format_cpulist(self.cpus)}, "
            f"membind {format_cpulist(self.mems)}{idle}{client}"
        )


def sibling_cpus(topo: Topology, cpus: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """Online SMT siblings of ``cpus``' cores that are not themselves in ``cpus``."""
    mine = set(cpus)
    return tuple(sorted({s for c in cpus for s in topo.siblings.get(c, (c,)) if s in topo.online} - mine))


def with_siblings(topo: Topology, slot: Slot, mode: str) -> Slot:
    """``slot`` owning its idle siblings, unless ``mode`` is ``shared``."""
    siblings = () if mode == "shared" else sibling_cpus(topo, slot.cpus)
    return replace(slot, siblings=siblings, smt=mode)


def physical_cores(topo: Topology, cpus: tuple[int, ...]) -> list[int]:
    """One CPU per physical core: the lowest-numbered SMT sibling."""
    return sorted({min(topo.siblings.get(c, (c,))) for c in cpus} & set(cpus))


def _explicit_slot(topo: Topology, cpus: list[int], where: str, straddle: bool) -> Slot:
    absent = [c for c in cpus if c not in topo.present]
    if absent:
        raise OmniError(
            f"{where} names CPU(s) {format_cpulist(absent)} that this host does not have "
            f"(present: {format_cpulist(topo.present)}); pick CPUs from that list"
        )
    offline = [c for c in cpus if c not in topo.online]
    if offline:
        raise OmniError(
            f"{where} names CPU(s) {format_cpulist(offline)} that are offline (online: "
            f"{format_cpulist(topo.online)}); bring them online (echo 1 > "
            f"/sys/devices/system/cpu/cpu{offline[0]}/online) or pick online CPUs"
        )
    nodes = sorted({topo.node_of(c) for c in cpus})
    if len(nodes) > 1 and not straddle:
        parts = "; ".join(f"node {n}: {format_cpulist([c for c in cpus if topo.node_of(c) == n])}" for n in nodes)
        raise OmniError(
            f"{where} {format_cpulist(cpus)} straddles NUMA nodes ({parts}); a slot stays on "
            "one node so its memory can be bound there: split it, or set slots.straddle: true "
            "to bind its memory to all of those nodes"
        )
    return Slot(0, nodes[0], tuple(cpus), tuple(nodes))


def with_clients(topo: Topology, slots: list[Slot], groups: list[list[int]]) -> list[Slot]:
    """Each slot with its load generator's explicit CPUs (``slots.client_cpus``,
    one list per slot): present, online, and on no core of the server's, since
    a client beside the server it measures takes the CPU it times."""
    out = []
    for slot, group in zip(slots, groups, strict=True):
        where = "slots.client_cpus" if len(groups) == 1 else f"slots.client_cpus[{slot.index}]"
        client = _explicit_slot(topo, group, where, straddle=True)
        whole = tuple(sorted({*group, *sibling_cpus(topo, tuple(group))}))
        if shared := sorted(set(whole) & {*slot.cpus, *slot.siblings}):
            raise OmniError(
                f"{where} {format_cpulist(group)} shares physical cores with the server's CPUs "
                f"{format_cpulist(slot.cpus)} (CPU(s) {format_cpulist(shared)}): the load generator would take "
                "CPU time from the server it measures; give it cores of its own"
            )
        out.append(replace(slot, client=whole, client_mems=client.mems))
    return out


def _check_disjoint(slots: list[Slot]) -> None:
    for i, a in enumerate(slots):
        for j in range(i):
            b = slots[j]
            shared = set(a.owned) & set(b.owned) - (set(a.siblings) | set(b.siblings))
            if shared:
                raise OmniError(
                    f"slots.cpus[{j}] and slots.cpus[{i}] share CPU(s) {format_cpulist(shared)}; "
                    "slots run at the same time, so each CPU may belong to one slot only"
                )
            # a slot owns its cores' idle siblings: another slot running there
            # would share those cores while both run
            crossed = (set(a.siblings) & set(b.cpus)) | (set(b.siblings) & set(a.cpus))
            if crossed:
                raise OmniError(
                    f"slots.cpus[{j}] and slots.cpus[{i}] share physical cores: CPU(s) "
                    f"{format_cpulist(crossed)} are SMT siblings of the other slot's CPUs, and a slot owns its "
                    "cores' siblings; give each slot whole cores, or set slots.smt: shared to let slots "
                    "share cores (their runs then slow each other)"
                )


def allocate_slots(
    topo: Topology,
    *,
    cores: int | None = None,
    cpus: list[list[int]] | None = None,
    node: int | None = None,
    smt: bool | str = False,
    straddle: bool = False,
    count: int | None = None,
    client_cores: int | None = None,
    client_cpus: list[list[int]] | None = None,
) -> list[Slot]:
    """Cut the host into slots that run at the same time, each within one node.

    ``cpus`` asks for exactly those CPU lists (one slot each). Otherwise each
    node with CPUs (or only ``node``) gives ``len(cores_of_node) // cores``
    slots of physical cores (SMT siblings added when ``smt`` is true);
    ``cores=None`` makes a whole node one slot. ``count`` keeps the first
    ``count`` slots, taken alternately from each node so two slots use two
    nodes. Each slot owns the siblings of its cores it does not run on
    (:attr:`Slot.siblings`) unless ``smt`` is ``"shared"``.
    """
    mode = smt_mode(smt)
    if cpus:
        where = (lambda i: "slots.cpus") if len(cpus) == 1 else (lambda i: f"slots.cpus[{i}]")
        slots = [
            with_siblings(topo, replace(_explicit_slot(topo, group, where(i), straddle), index=i), mode)
            for i, group in enumerate(cpus)
        ]
        slots = with_clients(topo, slots, client_cpus) if client_cpus else slots
        _check_disjoint(slots)
        return _first(slots, count)
    if client_cores is not None and cores is None:
        raise OmniError("slots.client_cores needs slots.cores: how many of each slot's cores the server gets")
    if node is not None and node not in topo.nodes:
        raise OmniError(
            f"slots.node {node} does not exist on this host (nodes: {', '.join(map(str, sorted(topo.nodes)))})"
        )
    candidates = [topo.nodes[node]] if node is not None else list(topo.nodes.values())
    per_node: list[list[Slot]] = []
    for nd in candidates:
        if not nd.cpus:
            continue
        cores_of_node = physical_cores(topo, nd.cpus)
        per_slot = (cores or len(cores_of_node)) + (client_cores or 0)
        mine = []
        for start in range(0, len(cores_of_node) - per_slot + 1, per_slot):
            chosen = cores_of_node[start : start + per_slot - (client_cores or 0)]
            client = cores_of_node[start + len(chosen) : start + per_slot]
            if mode == "true":
                chosen = sorted({s for c in chosen for s in topo.siblings.get(c, (c,))})
            slot = with_siblings(topo, Slot(0, nd.id, tuple(chosen), (nd.id,)), mode)
            whole = tuple(sorted({*client, *sibling_cpus(topo, tuple(client))}))
            mine.append(replace(slot, client=whole, client_mems=(nd.id,) if whole else ()))
        per_node.append(mine)
    if not any(per_node):
        biggest = max((len(physical_cores(topo, n.cpus)) for n in candidates), default=0)
        with_cpus = ", ".join(str(n.id) for n in topo.nodes.values() if n.cpus) or "none"
        if biggest == 0:
            where = f"node {node}" if node is not None else "no node"
            raise OmniError(
                f"slots: {where} has no online CPUs (a memory-only node, e.g. CXL?); nodes with CPUs: {with_cpus}"
            )
        where = f"node {node}" if node is not None else "the largest node"
        client = f" + client_cores={client_cores}" if client_cores else ""
        also = ", the load generator's included" if client_cores else ""
        raise OmniError(
            f"slots.cores={cores}{client} does not fit: {where} has {biggest} physical core(s); "
            f"ask for at most {biggest} cores per slot{also}"
        )
    # Interleave nodes: slot 0 on node 0, slot 1 on node 1, ... so `count: 2`
    # uses both sockets rather than two halves of one.
    ordered = [s for group in itertools.zip_longest(*per_node) for s in group if s is not None]
    return _first([replace(s, index=i) for i, s in enumerate(ordered)], count)


def _first(slots: list[Slot], count: int | None) -> list[Slot]:
    if count is not None and count > len(slots):
        raise OmniError(
            f"slots.count={count} but the request gives only {len(slots)} slot(s) "
            f"({'; '.join(s.describe() for s in slots)}); ask for fewer slots or fewer cores each"
        )
    return slots[:count] if count is not None else slots
