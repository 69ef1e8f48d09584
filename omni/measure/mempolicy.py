"""Where a process's memory may go (its NUMA memory policy) and where it is.

``numactl --membind=N`` sets a memory *policy*; it does not touch the cpuset.
``/proc/PID/status`` ``Mems_allowed_list`` is the cpuset, so in a two-node
guest ``numactl --membind=1 --physcpubind=1`` still shows ``0-1`` there,
while ``/proc/PID/numa_maps`` shows ``bind:1`` on every mapping. This module
reads the policy and the per-node page counts from ``numa_maps``:

    557868b7a000 bind:1 file=/usr/bin/cat anon=1 dirty=1 active=0 N1=1 kernelpagesize_kB=4
    557887032000 bind:1 heap anon=1 dirty=1 active=0 N1=1 kernelpagesize_kB=4
    7ffdd6135000 bind:1

The policy printed on a mapping is the mapping's own (``mbind``) or, when it
has none, the policy of the task the file belongs to (Linux
``show_numa_map``: ``__get_vma_policy`` else ``task_mempolicy``). So one read
of ``/proc/PID/numa_maps`` shows the thread-group leader's policy, and
``/proc/PID/task/TID/numa_maps`` that thread's (``set_mempolicy`` is per
thread). Page counts ``N<node>=`` are in units of ``kernelpagesize_kB``.

Reading ``numa_maps`` walks the page tables of every mapping, which is why
the sampler paces it by its cost (see :mod:`omni.measure.numa_pages`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from omni.cpulist import parse_cpulist

# mpol_to_str(): "default", "local", "bind:0-1", "prefer:1", "interleave:0-1",
# "bind=static:1", "preferred-many:0-1", "weighted interleave:0-1"
_POLICY = re.compile(r"^(?P<mode>[a-z][a-z -]*?)(?:=(?P<flags>[a-z|]+))?(?::(?P<nodes>[0-9,-]+))?$")
_NODE_PAGES = re.compile(r"^N(\d+)=(\d+)$")
# Policies that keep allocations on their nodes (interleave spreads them
# round-robin but never elsewhere); "prefer" and "default" fall back anywhere.
CONFINING_MODES = ("bind", "interleave", "weighted interleave")


@dataclass(frozen=True)
class Policy:
    """One memory policy as the kernel prints it, parsed."""

    mode: str
    nodes: tuple[int, ...]
    text: str

    def confines_to(self, mems: tuple[int, ...] | list[int], allow_interleave: bool) -> bool:
        """True when every allocation under this policy lands on exactly ``mems``."""
        modes = CONFINING_MODES if allow_interleave else ("bind",)
        return self.mode in modes and set(self.nodes) == set(mems)

    def stays_within(self, mems: tuple[int, ...] | list[int]) -> bool:
        """For a mapping's own policy (``mbind``): names no node outside ``mems``.

        ``local`` allocates on the node of the CPU that touches the page,
        which is the slot's node while the CPUs are confined to it. OpenBLAS
        (numpy, torch) mbinds its 32 MiB buffers this way (MPOL_PREFERRED with
        an empty mask, printed ``local``). The pages are checked separately.
        """
        return self.mode == "local" or (bool(self.nodes) and set(self.nodes) <= set(mems) and self.mode != "default")


def parse_policy(text: str) -> Policy:
    """``bind:1`` -> Policy("bind", (1,), "bind:1"); unknown text keeps its words."""
    match = _POLICY.match(text)
    if not match:
        return Policy(text, (), text)
    nodes = tuple(parse_cpulist(match["nodes"])) if match["nodes"] else ()
    return Policy(match["mode"].strip(), nodes, text)


@dataclass
class NumaMaps:
    """One read of a ``numa_maps`` file, reduced.

    ``anon_kib``: pages of anonymous mappings (heap, stack, anonymous mmap)
    and of file mappings that are wholly copy-on-write (``anon=`` equals the
    pages mapped), per node. File mappings with pages on several kinds are
    counted as file pages: numa_maps gives one node split per mapping, not
    per kind, and such mappings are a library's few relocated pages.
    ``policies``: each distinct policy text -> KiB resident under it.
    ``task_policy``: the policy of the process itself (see :func:`policy_of_thread`).
    """

    anon_kib: dict[int, int] = field(default_factory=dict)
    file_kib: dict[int, int] = field(default_factory=dict)
    policies: dict[str, int] = field(default_factory=dict)
    mappings: int = 0
    # the first mapping's policy: the executable's text never has one of its
    # own, so this is the task's policy (the one every other mapping inherits)
    task_policy: str | None = None

    @property
    def anon_total_kib(self) -> int:
        return sum(self.anon_kib.values())


def parse_numa_maps(data: bytes | str) -> NumaMaps:
    """Reduce ``numa_maps`` text (bytes as read from /proc) to per-node KiB."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    out = NumaMaps()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        out.mappings += 1
        policy, page_kib, anon, is_file = fields[1], 4, 0, False
        if out.task_policy is None:
            out.task_policy = policy
        per_node: dict[int, int] = {}
        for token in fields[2:]:
            if token.startswith("N") and (m := _NODE_PAGES.match(token)):
                per_node[int(m[1])] = int(m[2])
            elif token.startswith("kernelpagesize_kB="):
                page_kib = int(token.split("=", 1)[1])
            elif token.startswith("anon="):
                anon = int(token.split("=", 1)[1])
            elif token.startswith("file="):
                is_file = True
        pages = sum(per_node.values())
        out.policies[policy] = out.policies.get(policy, 0) + pages * page_kib
        target = out.file_kib if is_file and anon < pages else out.anon_kib
        for node, count in per_node.items():
            target[node] = target.get(node, 0) + count * page_kib
    return out


def policy_of_thread(data: bytes | str) -> str | None:
    """The task policy from the first mapping of a thread's ``numa_maps``.

    The first mapping is the executable's text, which never carries an
    ``mbind`` policy of its own, so what it shows is the thread's policy.
    Only the first line is needed: callers read a few KiB, not the file.
    """
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            return fields[1]
    return None


def node_list(kib_by_node: dict[int, int]) -> list[int]:
    """``{0: 8, 2: 4}`` -> ``[8, 0, 4]``: KiB per node, indexed by node id."""
    if not kib_by_node:
        return []
    return [kib_by_node.get(node, 0) for node in range(max(kib_by_node) + 1)]


def local_fraction(kib_by_node: dict[int, int], mems: tuple[int, ...] | list[int]) -> float | None:
    """Share of the pages that sit on ``mems``; ``None`` when there are none."""
    total = sum(kib_by_node.values())
    if total == 0:
        return None
    return sum(v for node, v in kib_by_node.items() if node in set(mems)) / total


def describe_nodes(kib_by_node: dict[int, int]) -> str:
    """``{0: 2048, 1: 512}`` -> ``"node 0 2.0 MiB, node 1 0.5 MiB"``."""
    return ", ".join(f"node {n} {kib / 1024:.1f} MiB" for n, kib in sorted(kib_by_node.items()) if kib)


def add_kib(total: dict[int, int], more: dict[int, int]) -> dict[int, int]:
    for node, kib in more.items():
        total[node] = total.get(node, 0) + kib
    return total
