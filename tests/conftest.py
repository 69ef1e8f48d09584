"""Shared fixtures: canned sysfs trees, hogs, and a clean run-id namespace."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from omni.reaper import RUN_ID_VAR, find_run_processes, reap_run
from omni.topology import format_cpulist

REPO = Path(__file__).resolve().parent.parent


def make_sysfs(
    root: Path,
    nodes: dict[int, list[int]],
    siblings: dict[int, list[int]] | None = None,
    offline: list[int] = (),
    mem_kb: dict[int, int] | None = None,
) -> Path:
    """Write a minimal sysfs tree: node cpulists and memory, present/online/offline CPUs, SMT siblings."""
    system = root / "sys" / "devices" / "system"
    all_cpus = sorted({c for cpus in nodes.values() for c in cpus})
    online = [c for c in all_cpus if c not in offline]
    (system / "cpu").mkdir(parents=True, exist_ok=True)
    (system / "cpu" / "online").write_text(format_cpulist(online) + "\n")
    (system / "cpu" / "present").write_text(format_cpulist(all_cpus) + "\n")
    (system / "cpu" / "offline").write_text(format_cpulist(offline) + "\n")
    for node, cpus in nodes.items():
        node_dir = system / "node" / f"node{node}"
        node_dir.mkdir(parents=True, exist_ok=True)
        # the kernel drops an offline CPU from its node's cpulist
        (node_dir / "cpulist").write_text(format_cpulist([c for c in cpus if c not in offline]) + "\n")
        kb = (mem_kb or {}).get(node, 1 << 20)
        (node_dir / "meminfo").write_text(f"Node {node} MemTotal:       {kb} kB\n")
    for cpu in online:
        topo = system / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True, exist_ok=True)
        sibs = (siblings or {}).get(cpu, [cpu])
        (topo / "thread_siblings_list").write_text(format_cpulist(sibs) + "\n")
    return root


def xeon_8480c_2s(root: Path) -> Path:
    """2-socket Xeon 8480C: node 0 = 0-55,112-167; node 1 = 56-111,168-223."""
    nodes = {0: [*range(0, 56), *range(112, 168)], 1: [*range(56, 112), *range(168, 224)]}
    siblings = {}
    for core in range(112):
        siblings[core] = siblings[core + 112] = [core, core + 112]
    return make_sysfs(root, nodes, siblings)


@pytest.fixture
def run_id() -> str:
    """A unique run id; any process still carrying it at teardown is killed."""
    rid = f"test-{uuid.uuid4().hex[:12]}"
    yield rid
    reap_run(rid, grace_s=0.5)


@pytest.fixture
def hog():
    """Start busy loops pinned to one CPU each, as another user's job would be.

    The loop double-forks so it is not our descendant: omni rightly ignores
    load from its own process tree, and a real neighbour is not in it.
    """
    tag = f"hog-{uuid.uuid4().hex[:8]}"

    def start(cpu: int) -> int:
        script = (
            "import os\n"
            "if os.fork(): os._exit(0)\n"
            f"os.sched_setaffinity(0, [{cpu}])\n"
            "print(os.getpid(), flush=True)\n"
            "os.close(1); os.close(2)\n"
            "while True: pass\n"
        )
        out = subprocess.run([sys.executable, "-c", script], env=run_env(tag), capture_output=True, check=True)
        return int(out.stdout)

    yield start
    reap_run(tag, grace_s=0.5)


def run_env(run_id: str) -> dict[str, str]:
    return {**os.environ, RUN_ID_VAR: run_id}


def survivors(run_id: str) -> set[int]:
    return find_run_processes(run_id)
