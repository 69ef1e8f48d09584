"""Sweep specs: a YAML/JSON file of sweep settings, ``arms:`` and ``matrix:``
blocks (examples in :mod:`omni.spec.settings` and :mod:`omni.spec.matrix`).

Every user mistake is one :class:`~omni.errors.SpecError` listing each
problem on its own line as ``FILE:LINE FIELD: message``, e.g.
``arms/x.yaml:12 arms[1].threads: must be >= 1``.

The package, by what each file holds:

- :mod:`~omni.spec.source`: reading the file, YAML/JSON, the line of every key;
- :mod:`~omni.spec.base`: strict models with plain-word errors, and names;
- :mod:`~omni.spec.arm`: an arm, its engine's params, hosts, arm identity;
- :mod:`~omni.spec.load`: a serving arm's load, its SLO, its search;
- :mod:`~omni.spec.envs`: engine envs as data (envs.yaml, a spec's ``envs:``);
- :mod:`~omni.spec.slots`: where runs go on a host;
- :mod:`~omni.spec.matrix`: ``matrix:`` expansion;
- :mod:`~omni.spec.settings`: the sweep and its control arm;
- :mod:`~omni.spec.prompts`: a serving arm's prompts file, checked line by line;
- :mod:`~omni.spec.problems`: validation errors in plain words at a file line.

A path in a spec (``load.prompts``) is relative to the spec file's folder.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from omni.errors import SpecError
from omni.spec.arm import (
    ENGINE_PARAMS,
    Arm,
    Hosts,
    LlamacppParams,
    LoadRequest,
    ProfileRequest,
    Slo,
    SyntheticParams,
    VllmParams,
    arm_hash,
    canonical_arm_json,
)
from omni.spec.matrix import MAX_MATRIX_ARMS, MatrixBlock
from omni.spec.problems import Lines, describe
from omni.spec.settings import CONTROL_SUFFIX, Sweep
from omni.spec.slots import SlotRequest
from omni.spec.source import SUFFIXES, read_spec

__all__ = [
    "CONTROL_SUFFIX",
    "ENGINE_PARAMS",
    "MAX_MATRIX_ARMS",
    "SUFFIXES",
    "Arm",
    "Hosts",
    "LlamacppParams",
    "LoadRequest",
    "LoadedSpec",
    "MatrixBlock",
    "ProfileRequest",
    "Slo",
    "SlotRequest",
    "Sweep",
    "SyntheticParams",
    "VllmParams",
    "arm_hash",
    "canonical_arm_json",
    "load_spec",
    "validate_sweep",
]


@dataclass(frozen=True)
class LoadedSpec:
    sweep: Sweep
    path: Path  # resolved
    sha256: str  # of the file's bytes
    text: str


def load_spec(path: str | Path, *, base: Path | None = None, read_files: bool = True) -> LoadedSpec:
    """Read, parse and validate a ``.yaml``/``.yml``/``.json`` sweep spec.

    Its relative paths are ``base``'s, the spec file's folder unless given (a
    sweep's spec copy is read with its original's). ``read_files`` false
    leaves the files it names unread (a copy read for its settings alone,
    where they may be gone)."""
    path = Path(path)
    raw, text, data, lines = read_spec(path)
    sweep = validate_sweep(
        data, source=str(path), lines=lines, base=base or path.resolve().parent, read_files=read_files
    )
    return LoadedSpec(sweep=sweep, path=path.resolve(), sha256=hashlib.sha256(raw).hexdigest(), text=text)


def validate_sweep(
    data: Any,
    source: str = "spec",
    lines: Lines | None = None,
    *,
    base: Path | None = None,
    read_files: bool = True,
) -> Sweep:
    """Validate parsed spec data; every problem in one SpecError, located via
    ``lines``. Relative paths are ``base``'s (None: the working directory's)."""
    try:
        return Sweep.model_validate(data, context={"spec_dir": base, "read_files": read_files})
    except ValidationError as err:
        raise SpecError(describe(err, source, lines or {}, Sweep)) from None
