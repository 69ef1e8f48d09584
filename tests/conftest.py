"""Shared by every layer: canned sysfs trees, hogs, a clean run-id namespace,
``omni`` run as a user runs it, and the marking of each test by its folder.

The layers are folders (tests/unit, harness, engines, stack, numa_vm,
reliability); each folder's conftest.py marks what it collects with the
folder's name, so ``-m unit`` or ``pytest tests/unit`` pick the same tests.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from omni.cpulist import format_cpulist
from omni.run.reaper import RUN_ID_VAR, find_run_processes, reap_run

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
LAYERS = ("unit", "harness", "engines", "stack", "numa_vm", "reliability")


@pytest.fixture(autouse=True, scope="session")
def local_engine_files(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Engine files of s3:// runs (``OMNI_LOCAL_DIR``) go under the session's
    temporary directory, for omni run here and for the workers it starts."""
    os.environ["OMNI_LOCAL_DIR"] = str(tmp_path_factory.mktemp("omni-local"))
    # the slots' limits (omni host limits) too: measured once per session, shared by its sweeps
    os.environ["OMNI_LIMITS_DIR"] = str(tmp_path_factory.mktemp("omni-limits"))


def mark_layer(items: list[pytest.Item], conftest: str) -> None:
    """Mark every collected test under the folder of ``conftest`` (a layer's
    conftest.py) with the folder's name. pytest hands every conftest's hook all
    items of the session, so each marks only its own."""
    folder = Path(conftest).parent
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(folder.name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test file belongs in exactly one layer folder."""
    layers = {REPO / "tests" / layer for layer in LAYERS}
    stray = [i.nodeid for i in items if i.path.is_relative_to(REPO / "tests") and i.path.parent not in layers]
    if stray:
        raise pytest.UsageError(f"tests outside a layer folder (tests/{{{','.join(LAYERS)}}}/): {', '.join(stray)}")


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
    load from its own process tree, and a real neighbour is not in it. It
    starts a session of its own, as another user's job has: with the
    kernel's autogroup scheduling each session is one group sharing the CPU
    fairly with the others, so two loops in our session would take no more
    CPU from an engine than one.
    """
    tag = f"hog-{uuid.uuid4().hex[:8]}"

    def start(cpu: int, duty: float = 1.0) -> int:
        """``duty``: the share of one CPU it uses, as work of ``duty`` x 100 ms
        of CPU time each 100 ms (it sleeps the rest), so a neighbour sharing
        the CPU delays its work rather than shrinking it."""
        loop = (
            "while True: pass\n"
            if duty >= 1
            else (
                "import time\n"
                "while True:\n"
                "    start, cpu = time.monotonic(), time.thread_time()\n"
                f"    while time.thread_time() - cpu < {0.1 * duty}: pass\n"
                "    time.sleep(max(0.0, start + 0.1 - time.monotonic()))\n"
            )
        )
        script = (
            "import os\n"
            "if os.fork(): os._exit(0)\n"
            "os.setsid()\n"
            f"os.sched_setaffinity(0, [{cpu}])\n"
            "print(os.getpid(), flush=True)\n"
            "os.close(1); os.close(2)\n" + loop
        )
        out = subprocess.run([sys.executable, "-c", script], env=run_env(tag), capture_output=True, check=True)
        return int(out.stdout)

    yield start
    reap_run(tag, grace_s=0.5)


def reap_budget_s(grace_s: float | None = None) -> float:
    """The longest ``reap_run`` takes by its own contract: its SIGTERM grace, then
    its SIGKILL scans. A bound a test derives from the code, not from this host's speed."""
    defaults = inspect.signature(reap_run).parameters
    return (defaults["grace_s"].default if grace_s is None else grace_s) + defaults["limit_s"].default


def run_env(run_id: str) -> dict[str, str]:
    return {**os.environ, RUN_ID_VAR: run_id}


def survivors(run_id: str) -> set[int]:
    return find_run_processes(run_id)


OMNI = [sys.executable, "-m", "omni.cli.main"]


def omni(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "COLUMNS": "200"}
    return subprocess.run([*OMNI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
