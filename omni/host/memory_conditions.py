"""The host conditions of memory, each read into a
:class:`~omni.host.readings.Condition` with its verdict: transparent huge
pages, automatic NUMA balancing, KSM, swap in use, sub-NUMA clustering (nodes
per socket) and address-space randomization.
"""

from __future__ import annotations

from pathlib import Path

from omni.cpulist import format_cpulist
from omni.host.readings import ABSENT, CPU_DIR, SYSCTL_DIR, THP_DIR, Condition, one_file, read_line, selected
from omni.host.topology import read_topology


def read_thp_enabled(root: str | Path = "/") -> Condition:
    why = (
        "transparent huge pages cut TLB misses on gigabytes of weights and KV cache; "
        "with 'never' every access walks 4 KiB pages, and 'madvise' gives huge pages only where an engine asks"
    )
    fix = "echo always > /sys/kernel/mm/transparent_hugepage/enabled"
    path = Path(root) / THP_DIR / "enabled"
    return one_file("thp_enabled", path, why, {"always": "ok", "madvise": "info"}, "warn", fix, selected)


def read_thp_defrag(root: str | Path = "/") -> Condition:
    why = (
        "defrag 'always' makes a page fault compact memory synchronously: a KV-cache or activation "
        "allocation stalls for milliseconds, which shows as latency outliers"
    )
    verdicts = {"always": "warn", "defer": "ok", "never": "ok"}
    path = Path(root) / THP_DIR / "defrag"
    return one_file("thp_defrag", path, why, verdicts, "info", "omni host tune (writes defer)", selected)


def read_numa_balancing(root: str | Path = "/") -> Condition:
    why = (
        "automatic NUMA balancing unmaps pages to sample accesses and migrates pages and tasks "
        "behind a --membind/--physcpubind placement, adding faults and moving memory mid-run"
    )
    value = read_line(Path(root) / SYSCTL_DIR / "numa_balancing")
    if value is None:
        return Condition("numa_balancing", ABSENT, "unknown", why)
    nodes = len(read_topology(root).nodes)
    if value == "0":
        return Condition("numa_balancing", value, "ok", why)
    verdict = "warn" if nodes > 1 else "info"
    return Condition(
        "numa_balancing", value, verdict, why, "omni host tune (or: sysctl kernel.numa_balancing=0)", f"{nodes} node(s)"
    )


def read_ksm(root: str | Path = "/") -> Condition:
    why = (
        "KSM's ksmd scans memory for identical pages on some core, and a merged page is "
        "copy-on-write: a neighbour's CPU time and a fault where the run writes"
    )
    fix = "omni host tune (or: echo 0 > /sys/kernel/mm/ksm/run)"
    # 2: unmerge everything, then stop
    return one_file("ksm", Path(root) / "sys/kernel/mm/ksm/run", why, {"0": "ok", "2": "info"}, "warn", fix)


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as kB values: ``SwapTotal:  8388604 kB`` -> {"SwapTotal": 8388604}."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0])
    return values


def read_swap(root: str | Path = "/") -> Condition:
    why = (
        "weights or KV cache swapped out fault back at disk speed inside a run, "
        "and a neighbour's memory pressure decides which pages go"
    )
    try:
        info = parse_meminfo((Path(root) / "proc/meminfo").read_text())
    except OSError:
        info = {}
    if "SwapTotal" not in info:
        return Condition("swap_used_mb", ABSENT, "unknown", why)
    used_mb = (info["SwapTotal"] - info.get("SwapFree", info["SwapTotal"])) // 1024
    detail = f"swap {info['SwapTotal'] // 1024} MiB"
    if used_mb > 0:
        return Condition(
            "swap_used_mb", str(used_mb), "warn", why, "swapoff -a && swapon -a (needs the free RAM)", detail
        )
    return Condition("swap_used_mb", "0", "ok", why, "", detail)


def read_nodes_per_socket(root: str | Path = "/") -> Condition:
    why = (
        "sub-NUMA clustering (Intel SNC, AMD NPS) splits a socket into nodes with their own memory "
        "controllers: a slot per node is then a slot per cluster, with a fraction of the socket's bandwidth"
    )
    root = Path(root)
    topo = read_topology(root)
    sockets: dict[str, list[int]] = {}
    memory_only = []
    for node in topo.nodes.values():
        if not node.cpus:
            memory_only.append(node.id)  # CXL or HBM memory: a node without CPUs
            continue
        package = read_line(root / CPU_DIR / f"cpu{node.cpus[0]}" / "topology" / "physical_package_id")
        sockets.setdefault(package or "?", []).append(node.id)
    if not sockets:
        return Condition("nodes_per_socket", ABSENT, "unknown", why)
    most = max(len(nodes) for nodes in sockets.values())
    detail = "; ".join(f"socket {s}: nodes {format_cpulist(n)}" for s, n in sorted(sockets.items()))
    if memory_only:
        detail += f"; memory-only nodes {format_cpulist(memory_only)}"
    return Condition("nodes_per_socket", str(most), "ok" if most == 1 else "info", why, "", detail)


def read_aslr(root: str | Path = "/") -> Condition:
    why = (
        "with address randomization off every run gets the same memory layout, so run-to-run "
        "noise under-states what another boot would see (pyperf keeps full randomization, 2)"
    )
    path = Path(root) / SYSCTL_DIR / "randomize_va_space"
    return one_file("aslr", path, why, {"2": "ok", "1": "info"}, "warn", "omni host tune (writes 2)")
