"""What engine envs this machine holds: each declared env's state, versions,
commit and size (``omni env list``), and the built envs nothing needs any
more (``omni env prune``).

An env is needed while envs.yaml declares it as it is built, or while a
stored row that is not retracted ran in it (its ``engine_env_key``): a
result's env stays until the result is retracted, so it can be run again.
The machine's kept copies (``OMNI_ENV_CACHE``) are pruned by the same rule.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from omni.envs.build import STAMP, env_cache, env_dir, installed_versions, read_stamp, tools_commit
from omni.spec.envs import Declared, EnvSpec


@dataclass(frozen=True)
class EnvEntry:
    name: str
    state: str  # built, not built, stale (declared differently), follows newest, no venv
    versions: dict[str, str]
    commit: str | None
    size_bytes: int | None
    built_at: str | None
    key: str | None


def tree_bytes(path: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes on disk under ``path``, each hard-linked file once (a kept copy
    shares them); ``seen``: files counted already (a prune's earlier items)."""
    seen = set() if seen is None else seen
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def entry(repo_root: Path, name: str, spec: EnvSpec) -> EnvEntry:
    if not spec.venv:
        return EnvEntry(name, "no venv (omni's own python)", {}, None, None, None, spec.key())
    stamp = read_stamp(repo_root, name)
    if stamp is None:
        state = "partly built" if env_dir(repo_root, name).exists() else "not built"
    elif spec.newest:
        state = f"built, follows the newest {spec.newest}"  # current if the index's newest is what it holds
    else:
        state = "built" if stamp.get("key") == spec.key() else "stale (declared differently; rebuilt when used)"
    target = env_dir(repo_root, name)
    return EnvEntry(
        name,
        state,
        installed_versions(repo_root, name, spec) if stamp else {},
        (stamp or {}).get("commit") or (tools_commit(target, spec) if stamp and spec.tools else None),
        tree_bytes(target) if target.exists() else None,
        (stamp or {}).get("built_at"),
        (stamp or {}).get("key"),
    )


def list_envs(repo_root: Path, declared: Declared) -> list[EnvEntry]:
    return [entry(repo_root, name, spec) for name, spec in sorted(declared.envs.items())]


@dataclass(frozen=True)
class Prunable:
    path: Path
    key: str | None
    size_bytes: int
    why: str


BUILDING_S = 3 * 3600  # an env without a stamp touched this recently may be a build under way


def prunable(repo_root: Path, declared: Declared, used_keys: set[str]) -> list[Prunable]:
    """Built envs and kept copies whose key no declaration and no stored row
    needs. Sizes count each file once over the whole list: a file an env
    shares with its kept copy is counted where it is first met, so the
    total is what removing them all frees (a file another clone's env still
    links stays on disk, and is not freed)."""
    wanted = {spec.key() for spec in declared.envs.values() if not spec.newest}
    following = {name for name, spec in declared.envs.items() if spec.newest}
    found: list[Prunable] = []
    seen: set[tuple[int, int]] = set()
    venvs = repo_root / ".venvs"
    for path in sorted(venvs.iterdir()) if venvs.is_dir() else []:
        if not path.is_dir():
            continue
        key = (read_stamp(repo_root, path.name) or {}).get("key")
        if path.name in following or key in wanted or key in used_keys:
            continue
        if key is None and time.time() - path.stat().st_mtime < BUILDING_S:
            continue  # possibly a build under way
        why = "no stamp (an interrupted build)" if key is None else "declared by no env and used by no stored row"
        found.append(Prunable(path, key, tree_bytes(path, seen), why))
    cache = env_cache("x", EnvSpec(requirements=("x",)))
    for path in sorted(cache.parent.iterdir()) if cache and cache.parent.is_dir() else []:
        try:
            key = json.loads((path / STAMP).read_text()).get("key")
        except (OSError, ValueError):
            key = None
        if key in wanted or key in used_keys or path.name.endswith(".partial"):
            continue
        found.append(Prunable(path, key, tree_bytes(path, seen), "a kept copy no declaration or stored row needs"))
    return found


def prune(found: list[Prunable]) -> None:
    for item in found:
        shutil.rmtree(item.path, ignore_errors=True)
        item.path.with_name(f"{item.path.name}.build.log").unlink(missing_ok=True)
