"""Provenance: small collectors, one source each, merged into one dict.

Each ``collect_*(meta)`` writes typed raw values (lists of ints, bools, dicts)
into ``meta`` under the result column names of :mod:`omni.store.columns`, and leaves
its keys out when its source is missing. The standard library only (no
pyarrow): the engine side reports the variables it ran under with the same
rule (:func:`omni.engines.protocol.behaviour_env`), which this module reuses.
"""

from __future__ import annotations

import copy
import functools
import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import omni
from omni.engines.protocol import REDACTED, behaviour_env  # noqa: F401 - REDACTED: what a secret reads as
from omni.host.topology import read_topology

# ISA extensions that decide which kernels an inference engine can use
# (oneDNN / llama.cpp pick AMX, AVX512-BF16, VNNI paths from these).
ISA_FLAGS = frozenset(
    {
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512cd",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx512vbmi",
        "avx_vnni",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
        "amx_fp16",
    }
)


def collect_harness(meta: dict[str, Any]) -> None:
    """omni's version, and the git commit of the checkout it runs from."""
    meta["harness_version"] = omni.__version__
    sha, dirty = _git_state(Path(omni.__file__).resolve().parent)  # the omni package dir
    if sha is not None:
        meta["harness_git_sha"] = sha
        meta["harness_git_dirty"] = dirty


@functools.cache
def _git_state(package_dir: Path) -> tuple[str | None, bool | None]:
    top = _git(package_dir, "rev-parse", "--show-toplevel")
    # An omni installed into a venv that sits inside some checkout would
    # otherwise report that checkout's commit: require omni/ at its top.
    if top is None or Path(top).resolve() != package_dir.parent:
        return None, None
    sha = _git(package_dir, "rev-parse", "HEAD")
    status = _git(package_dir, "status", "--porcelain")
    if sha is None or status is None:
        return None, None
    return sha, bool(status)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git, or a hung network filesystem
    return done.stdout.strip() if done.returncode == 0 else None


def collect_python(meta: dict[str, Any]) -> None:
    meta["python_version"] = platform.python_version()


HOST_VAR = "OMNI_HOST"  # set by omni worker --host NAME for the flow runs it starts (omni.fleet.hosts)


def collect_host(meta: dict[str, Any]) -> None:
    """host: the fleet host name a worker serves (``OMNI_HOST``), else the
    machine's name; hostname: always the machine's name."""
    node = platform.node()
    for key, value in (("host", os.environ.get(HOST_VAR) or node), ("hostname", node), ("kernel", platform.release())):
        if value:
            meta[key] = value


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """CPU model and inference ISA flags from ``/proc/cpuinfo`` text.

    Reads the first processor block: x86 lists the same flags for every
    processor. ``model name\\t: Intel(R) Xeon(R) Platinum 8480+``. Returns {}
    when the text has no x86 ``flags`` line (e.g. aarch64 says ``Features``).
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    facts: dict[str, Any] = {}
    if fields.get("model name"):
        facts["cpu_model"] = fields["model name"]
    if "flags" in fields:
        flags = set(fields["flags"].split())
        facts["cpu_flags"] = sorted(flags & ISA_FLAGS)
        for flag in ("avx512_bf16", "amx_bf16", "amx_int8"):
            facts[f"isa_{flag}"] = flag in flags
    return facts


def collect_cpu(meta: dict[str, Any], *, root: str | Path = "/") -> None:
    """cpu_model, cpu_flags and isa_* from ``root``/proc/cpuinfo."""
    try:
        text = (Path(root) / "proc" / "cpuinfo").read_text()
    except OSError:
        return
    meta.update(parse_cpuinfo(text))


def collect_numa(meta: dict[str, Any], *, root: str | Path = "/") -> None:
    """numa_nodes and numa_topology ({"0": [0, 1, ...]}) from ``root``/sys."""
    topology = read_topology(root)
    # Without sysfs, read_topology still returns a node 0, but with no CPUs.
    if not any(node.cpus for node in topology.nodes.values()):
        return
    meta["numa_nodes"] = len(topology.nodes)
    meta["numa_topology"] = topology.as_dict()


def collect_env(meta: dict[str, Any], *, environ: Mapping[str, str] | None = None) -> None:
    """env_vars: the behaviour-changing variables set, sorted by name."""
    meta["env_vars"] = behaviour_env(environ)


@functools.cache
def _static_provenance(root: str) -> dict[str, Any]:
    # Facts that cannot change while the process lives (git is read once:
    # the sweep records the checkout it started from).
    meta: dict[str, Any] = {}
    collect_harness(meta)
    collect_python(meta)
    collect_host(meta)
    collect_cpu(meta, root=root)
    collect_numa(meta, root=root)
    return meta


def collect_host_provenance(*, root: str | Path = "/", environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything the orchestrator knows about itself and its host, merged.

    Host facts are cached per process; the dict returned is always a fresh
    copy that the caller may change.
    """
    meta = copy.deepcopy(_static_provenance(str(root)))
    collect_env(meta, environ=environ)
    return meta


# Engine result JSON key -> result column.
_ENGINE_KEYS = {
    "engine_version": "engine_version",
    "engine_commit": "engine_commit",
    "torch_version": "torch_version",
    "python_version": "engine_python_version",
    "env_vars": "env_vars",
}


def merge_engine_provenance(meta: dict[str, Any], engine_prov: Mapping[str, Any] | None) -> None:
    """Map the engine's self-reported provenance onto result columns.

    Known keys get their own columns (the engine's ``python_version`` becomes
    ``engine_python_version``: the orchestrator's is ``python_version``);
    everything else is kept, as reported, in ``engine_provenance``.
    """
    if not engine_prov:
        return
    rest = dict(meta.get("engine_provenance") or {})
    for key, value in engine_prov.items():
        if key in _ENGINE_KEYS:
            meta[_ENGINE_KEYS[key]] = value
        else:
            rest[key] = value
    if rest:
        meta["engine_provenance"] = rest
