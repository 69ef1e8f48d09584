"""``matrix:`` blocks: arms from the cross product of axes over a base.

::

    matrix:
      - name: "mem{params.mem_mb}-t{threads}"   # one {axis} per axis
        base: {engine: synthetic, params: {procs: 3}}
        axes:
          params.mem_mb: [0, 512]               # dotted: a key inside params
          threads: [1, 2]

Matrix arms come after the explicit ones and are validated exactly like them;
:func:`relocate` moves a mistake in one to the axis value or ``base`` key that
caused it.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from omni.spec.arm import ENGINE_PARAMS, ENV_NAME, Arm, SpecModel
from omni.spec.problems import Problem, plain_text, validation_error

MAX_MATRIX_ARMS = 1000
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _axis_fields() -> list[str]:
    # The name comes from the block's template, so it is no axis.
    return [f for f in Arm.model_fields if f != "name"]


class MatrixBlock(SpecModel):
    """One ``matrix:`` entry: arms from the cross product of ``axes`` over ``base``."""

    name: str = Field(min_length=1)  # template: "mem{params.mem_mb}-t{threads}"
    base: dict[str, Any] = {}
    axes: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_block(self) -> MatrixBlock:
        problems = [p for key in self.axes for p in self._axis_problems(key)]
        problems += self._template_problems()
        if "name" in self.base:
            problems.append((("base", "name"), "remove it: arm names come from the name template"))
        if not problems:
            problems = self._size_problems() or self._duplicate_name_problems()
        if problems:
            raise validation_error("MatrixBlock", problems)
        return self

    def _axis_problems(self, key: str) -> list[Problem]:
        head, dotted, field = key.partition(".")
        loc = ("axes", key)
        if head not in _axis_fields():
            known = ", ".join([*_axis_fields(), "params.<name>", "env.<NAME>"])
            return [(loc, f"{key!r} is not an arm field (axes can set: {known})")]
        if not dotted:
            return []
        if head == "env":
            return [] if ENV_NAME.match(field) else [(loc, f"{field!r} is not an environment variable name")]
        if head != "params":
            return [(loc, f"{head} has no keys inside it; write {head!r}")]
        problems = []
        for engine in self._engines():
            fields = list(ENGINE_PARAMS[engine].model_fields)
            if field not in fields:
                text = f"{field!r} is not a parameter of engine {engine!r} (known: {', '.join(fields)})"
                problems.append((loc, text))
        return problems

    def _engines(self) -> list[str]:
        named = [self.base.get("engine"), *self.axes.get("engine", [])]
        return sorted({e for e in named if isinstance(e, str) and e in ENGINE_PARAMS})

    def _template_problems(self) -> list[Problem]:
        return [
            (("name",), f"{{{p}}} is not an axis (axes: {', '.join(self.axes)})")
            for p in _PLACEHOLDER.findall(self.name)
            if p not in self.axes
        ]

    def _size_problems(self) -> list[Problem]:
        size = math.prod(len(values) for values in self.axes.values())
        if size <= MAX_MATRIX_ARMS:
            return []
        return [(("axes",), f"expands to {size} arms; at most {MAX_MATRIX_ARMS} per block")]

    def _duplicate_name_problems(self) -> list[Problem]:
        names = [arm["name"] for arm, _ in self.expand()]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if not repeated:
            return []
        used = set(_PLACEHOLDER.findall(self.name))
        missing = [f"{{{k}}}" for k, values in self.axes.items() if len(values) > 1 and k not in used]
        hint = f"; add {', '.join(missing)}" if missing else ""
        return [(("name",), f"the template gives several arms the name {repeated[0]!r}{hint}")]

    def expand(self) -> list[tuple[dict[str, Any], dict[str, int]]]:
        """Raw arm dicts of the cross product, each with the value index picked per axis."""
        keys = list(self.axes)
        out = []
        for picks in itertools.product(*(range(len(self.axes[k])) for k in keys)):
            chosen = dict(zip(keys, picks))
            values = {k: copy.deepcopy(self.axes[k][i]) for k, i in chosen.items()}
            arm = {"name": _fill_template(self.name, values), **copy.deepcopy(self.base)}
            for key, value in values.items():
                _set_axis(arm, key, value)
            out.append((arm, chosen))
        return out


def _fill_template(template: str, values: dict[str, Any]) -> str:
    # Not str.format: "{params.mem_mb}" would be read as attribute access.
    return _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), template)


def _set_axis(arm: dict[str, Any], key: str, value: Any) -> None:
    head, _, field = key.partition(".")
    if not field:
        arm[head] = value
    elif head not in arm:
        arm[head] = {field: value}
    elif isinstance(arm[head], dict):
        arm[head] = {**arm[head], field: value}
    # else: base gave a non-mapping there; the arm's validation reports it.


_MATRIX = TypeAdapter(list[MatrixBlock])

# expanded arm index -> (matrix block index, value index picked per axis)
Origins = dict[int, tuple[int, dict[str, int]]]


def merge_matrix(data: dict[str, Any]) -> tuple[dict[str, Any], Origins, list[Problem]]:
    """Append the arms of ``matrix:`` blocks to ``arms:``, remembering where each came from."""
    data = dict(data)
    raw_blocks = data.pop("matrix", [])
    explicit = data.setdefault("arms", [])
    if not isinstance(explicit, list):
        return data, {}, []  # "arms must be a list" says it all
    try:
        blocks = _MATRIX.validate_python(raw_blocks)
    except ValidationError as err:
        return data, {}, [(("matrix", *e["loc"]), plain_text(e)) for e in err.errors()]
    arms, origins = list(explicit), {}
    for b, block in enumerate(blocks):
        for arm, picks in block.expand():
            origins[len(arms)] = (b, picks)
            arms.append(arm)
    problems = [] if arms else [(("arms",), "no arms: list them under arms: or generate them with matrix:")]
    return {**data, "arms": arms}, origins, problems


def relocate(problem: Problem, origins: Origins) -> Problem:
    """Move a problem of an expanded arm to the matrix line that caused it."""
    loc, text = problem
    if len(loc) < 2 or loc[0] != "arms" or loc[1] not in origins:
        return problem
    block, picks = origins[loc[1]]
    rest = loc[2:]
    for key, index in picks.items():
        parts = tuple(key.split("."))
        if rest[: len(parts)] == parts:
            return ("matrix", block, "axes", key, index, *rest[len(parts) :]), text
    if rest[:1] == ("name",):
        return ("matrix", block, "name"), text
    return ("matrix", block, "base", *rest), text
