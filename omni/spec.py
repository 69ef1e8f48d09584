"""Sweep specs: the models, YAML/JSON loading, and errors that point at the file.

A spec is a mapping of sweep settings, ``arms:`` (one configuration each) and
optional ``matrix:`` blocks, each expanding into the cross product of its axes::

    name: mem-threads
    passes: 3
    arms:
      - {name: plain, engine: synthetic}
    matrix:
      - name: "mem{params.mem_mb}-t{threads}"   # one {axis} per axis
        base: {engine: synthetic, params: {procs: 3}}
        axes:
          params.mem_mb: [0, 512]               # dotted: a key inside params
          threads: [1, 2]

Matrix arms come after the explicit ones and are validated exactly like them;
a mistake in one is reported at the axis value or ``base`` key that caused it.

Every user mistake is one :class:`SpecError` listing each problem on its own
line as ``FILE:LINE FIELD: message``, e.g.
``arms/x.yaml:12 arms[1].threads: must be >= 1``.

The models are strict: a spec is typed data, so ``threads: "2"`` or
``crash: yes`` is more likely a slip than a wish, and is an error.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from omni.errors import OmniError, SpecError
from omni.topology import parse_cpulist
from omni.vllm_plugin import names as vllm_names

SUFFIXES = (".yaml", ".yml", ".json")
MAX_MATRIX_ARMS = 1000

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")
_NAME_MAX = 80
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]  # (where, plain message)


# --- problems: every validation error ends up as plain words at a location ---


def _problem(text: str) -> PydanticCustomError:
    """A validation error whose message is already plain English."""
    return PydanticCustomError("omni_spec", "{detail}", {"detail": text})


def _validation_error(title: str, problems: list[Problem]) -> ValidationError:
    details = [
        InitErrorDetails(type=_problem(text), loc=loc, input=None)
        for loc, text in dict.fromkeys(problems)
    ]
    return ValidationError.from_exception_data(title, details)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def _plain_text(err: dict[str, Any], model: type[_SpecModel] | None = None) -> str:
    """Pydantic's error in words a spec author reads without the pydantic docs."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "omni_spec":
        return ctx["detail"]
    if kind == "extra_forbidden":
        return _unknown_key_text(err["loc"], model)
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}, got {_show(err.get('input'))}"
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        bound = ctx[key]
        # Float fields get float bounds: say ">= 0", not ">= 0.0".
        return f"must be {op} {int(bound) if float(bound).is_integer() else bound}"
    if kind == "missing":
        return "is required"
    if kind == "literal_error":
        return f"must be {ctx['expected']}, got {_show(err.get('input'))}"
    if kind == "too_short":
        least = ctx.get("min_length")
        return "must not be empty" if least == 1 else f"must have at least {least} items"
    if kind == "value_error":
        return str(ctx["error"])
    return err["msg"]


def _unknown_key_text(loc: Loc, model: type[_SpecModel] | None) -> str:
    text = f"unknown key {loc[-1]!r}"
    # Only a loc of length 1 is a key of ``model`` itself; deeper ones belong
    # to nested models, which already named their own keys.
    if model is not None and len(loc) == 1:
        text += f" (known: {', '.join(model.known_keys())})"
    return text


# --- models ---


def _check_name(value: str) -> str:
    if len(value) > _NAME_MAX:
        raise _problem(f"must be at most {_NAME_MAX} characters, got {len(value)}")
    if not _NAME.match(value):
        raise _problem(
            f"{value!r} is not a valid name: use letters, digits and _ . = + - "
            "(starting with a letter or digit)"
        )
    return value


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise _problem(
            f"{value!r} is not an environment variable name "
            "(letters, digits and _, not starting with a digit)"
        )
    return value


Name = Annotated[str, AfterValidator(_check_name)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]


class _SpecModel(BaseModel):
    """Base of every spec model: unknown keys rejected, immutable, no coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="wrap")
    @classmethod
    def _plain_errors(cls, data: Any, handler: Any) -> Any:
        # Rewritten here, where the model is known, so "unknown key" can list
        # this model's keys and callers outside load_spec get plain words too.
        try:
            return cls._validate(data, handler)
        except ValidationError as err:
            problems = [(e["loc"], _plain_text(e, cls)) for e in err.errors()]
            raise _validation_error(cls.__name__, problems) from None

    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        """Hook for a model that reshapes its input first (Sweep expands matrix:)."""
        return handler(data)

    @classmethod
    def known_keys(cls) -> list[str]:
        return list(cls.model_fields)


class SyntheticParams(_SpecModel):
    """Parameters of the ``synthetic`` calibration engine: known memory, known CPU."""

    mem_mb: float = Field(0.0, ge=0)  # anonymous memory touched, split evenly over procs
    procs: int = Field(1, ge=1, le=64)  # main process + procs-1 children
    work_per_token: int = Field(20000, ge=0)  # busy-loop iterations per token per sequence
    prefill_work_per_token: int = Field(2000, ge=0)
    # seconds each decode step waits (not CPU): a decode speed this host's CPU
    # frequency swings cannot move, for tests of the statistics themselves
    step_sleep_ms: float = Field(0.0, ge=0)
    # timed generations in the one process; cheap here, and the same shape as the real engines'
    iterations: int = Field(5, ge=1, le=100)
    load_s: float = Field(0.0, ge=0)  # extra seconds spent "loading"
    hold_s: float = Field(0.3, ge=0)  # seconds holding memory after generating
    crash: bool = False  # die with an uncaught error after load
    hang: bool = False  # hang forever after load
    exit_code: int = Field(0, ge=0, le=255)  # non-zero: write nothing, exit with it
    daemonize: bool = False  # leave a setsid'ed daemon grandchild behind
    abort_at_exit: bool = False  # abort in teardown, after the result is written
    # escape the slot's memory binding after load, as a misbehaving engine would:
    # reset_policy: set_mempolicy(MPOL_DEFAULT) and allocate again;
    # migrate_pages: move every page to a node outside the slot
    escape: Literal["none", "reset_policy", "migrate_pages"] = "none"


class VllmParams(_SpecModel):
    """Parameters of the ``vllm`` engine (offline ``LLM`` on CPU)."""

    load_format: Literal["auto", "dummy"] = "auto"  # dummy: real shapes, random weights, no checkpoint
    prefix_caching: bool = False  # on, a repeated prompt's prefill would be a cache hit
    warmup: int = Field(1, ge=0, le=10)  # untimed generations before the timed ones
    # timed generations per engine start: 5, as `vllm bench latency` is run here;
    # on a tiny model they cost a few % of the 45-60 s start
    iterations: int = Field(5, ge=1, le=100)
    hold_s: float = Field(0.5, ge=0)  # seconds held in steady state for the memory sampler
    int4_group_size: Literal[32, 64, 128] = 128  # quantization: cpu_int4 only
    # False keeps the output head (lm_head) in bf16: the W4 setup once retracted for it
    int4_lm_head: bool = True


class LlamacppParams(_SpecModel):
    """Parameters of the ``llamacpp`` engine (llama-cpp-python's C API)."""

    gguf: Literal["bf16", "q8_0", "q4_0"] = "bf16"  # which GGUF of a model preset
    # mmap on: weights are file-backed pages, not RssAnon; memory is then not
    # comparable with an arm that reads them into anonymous memory
    mmap: bool = False
    warmup: int = Field(1, ge=0, le=10)
    iterations: int = Field(5, ge=1, le=100)  # timed generations per process: llama-bench's default -r 5
    hold_s: float = Field(0.5, ge=0)


# Engines known now; an arm's params are validated against its engine's model.
ENGINE_PARAMS: dict[str, type[BaseModel]] = {
    "synthetic": SyntheticParams,
    "vllm": VllmParams,
    "llamacpp": LlamacppParams,
}


class Arm(_SpecModel):
    """One configuration of a sweep, run for every pass."""

    name: Name
    engine: str
    engine_env: str | None = None  # None: the orchestrator's own python
    model: str | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = None
    quantization: str | None = None
    context_len: int | None = Field(None, ge=1)
    prompt_len: int = Field(128, ge=1)
    max_tokens: int = Field(32, ge=1)
    batch_size: int = Field(1, ge=1)
    threads: int | None = Field(None, ge=1)
    kv_cache_bytes: int | None = Field(None, ge=1)
    compile_mode: Literal["eager", "compiled"] | None = None
    # omni's vLLM patches: "all" unless the arm says (vLLM arms measure patched
    # vLLM by default; "none" measures stock); other engines have none
    patches: Literal["all", "none"] | list[str] = "none"
    env: dict[EnvName, str] = {}
    # Validated by ENGINE_PARAMS[engine] and stored with its defaults, also when
    # omitted, so an arm's identity does not depend on spelling defaults out.
    params: dict[str, Any] = Field(default_factory=dict, validate_default=True)

    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, dict) and "patches" not in data and data.get("engine") == "vllm":
            data = {**data, "patches": "all"}
        return handler(data)

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in ENGINE_PARAMS:
            raise _problem(f"unknown engine {value!r} (known: {', '.join(sorted(ENGINE_PARAMS))})")
        return value

    @field_validator("patches", mode="before")
    @classmethod
    def _patch_choice(cls, value: Any) -> Any:
        # Checked here so a bad value gets one message, not one per union member.
        if value in ("all", "none"):
            return value
        if isinstance(value, list) and all(isinstance(p, str) and p for p in value):
            unknown = [p for p in value if p not in vllm_names.PATCHES]
            if unknown:
                raise _problem(f"unknown patch(es) {unknown} (known: {', '.join(vllm_names.PATCHES)})")
            return value
        raise _problem(f"must be 'all', 'none' or a list of patch names, got {_show(value)}")

    @field_validator("quantization")
    @classmethod
    def _known_quantization(cls, value: str | None) -> str | None:
        if value is not None and value not in vllm_names.QUANTIZATIONS:
            raise _problem(f"unknown quantization {value!r} (known: {', '.join(vllm_names.QUANTIZATIONS)})")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        # YAML reads `OMP_NUM_THREADS: 4` as an int; an env var is text either way.
        if not isinstance(value, dict):
            return value
        return {k: _env_text(v) for k, v in value.items()}

    @field_validator("params", mode="before")
    @classmethod
    def _engine_params(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, BaseModel):
            value = value.model_dump()
        engine = info.data.get("engine")  # absent when the engine itself was bad
        if engine not in ENGINE_PARAMS or not isinstance(value, dict):
            return value
        return ENGINE_PARAMS[engine].model_validate(value).model_dump()

    def engine_params(self) -> BaseModel:
        """The validated params model of this arm's engine."""
        return ENGINE_PARAMS[self.engine].model_validate(self.params)


def _env_text(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


class SlotRequest(_SpecModel):
    """Where runs go: slots of ``cores`` physical cores, or explicit cpulists.

    Slots run at the same time, one run each. ``cpus: "56-79"`` is one slot,
    ``cpus: ["0-23", "56-79"]`` two; memory binds to the node owning a slot's
    CPUs, and a slot that spans nodes is refused unless ``straddle: true``.
    """

    cores: int | None = Field(None, ge=1)  # None: all cores of the node
    cpus: str | list[str] | None = None  # kernel cpulist(s), e.g. "0-3,8"
    node: int | None = Field(None, ge=0)
    smt: bool = False  # add each core's SMT siblings
    straddle: bool = False  # allow a cpulist across nodes (memory bound to all of them)
    count: int | None = Field(None, ge=1)  # at most this many slots

    @field_validator("cpus")
    @classmethod
    def _cpulist(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None:
            return value
        if isinstance(value, list) and not value:
            raise _problem("must name at least one cpulist, e.g. ['0-3', '4-7']")
        for text in [value] if isinstance(value, str) else value:
            try:
                cpus = parse_cpulist(text)
            except OmniError as err:
                raise _problem(str(err)) from None
            if not cpus:
                raise _problem("must name at least one CPU, e.g. '0-3'")
        return value

    @model_validator(mode="after")
    def _cores_or_cpus(self) -> SlotRequest:
        problems = []
        if self.cores is not None and self.cpus is not None:
            problems.append((("cpus",), "give cores or cpus, not both (cores: how many; cpus: which ones)"))
        if self.node is not None and self.cpus is not None:
            problems.append((("node",), "give node or cpus, not both (explicit CPUs already name their node)"))
        if problems:
            raise _validation_error("SlotRequest", problems)
        return self

    def cpu_lists(self) -> list[list[int]] | None:
        if self.cpus is None:
            return None
        return [parse_cpulist(text) for text in ([self.cpus] if isinstance(self.cpus, str) else self.cpus)]


def _axis_fields() -> list[str]:
    # The name comes from the block's template, so it is no axis.
    return [f for f in Arm.model_fields if f != "name"]


class MatrixBlock(_SpecModel):
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
            raise _validation_error("MatrixBlock", problems)
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
            return [] if _ENV_NAME.match(field) else [(loc, f"{field!r} is not an environment variable name")]
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


CONTROL_SUFFIX = ".control"


class Sweep(_SpecModel):
    """A set of arms, each run ``passes`` times in a seeded interleaved order."""

    name: Name
    description: str | None = None
    passes: int = Field(3, ge=1, le=1000)
    seed: int = 0
    timeout_s: float = Field(600.0, gt=0)
    busy_threshold_pct: float = Field(50.0, gt=0, le=100)  # a busier slot CPU refuses the run
    # seconds a run waits for its slot's CPUs to fall below the threshold,
    # re-checking, before it is refused; 0 refuses at once
    busy_wait_s: float = Field(0.0, ge=0, le=86400)
    baseline: str | None = None  # default: the first arm
    # the smallest relative effect that matters: one number for every metric,
    # or {default: 0.05, decode_tok_s: 0.02, ...}; unset: 5 % times, 1 % memory
    min_effect: float | dict[str, float] | None = None
    slots: SlotRequest = SlotRequest()
    # a live A/A control: a replica of the baseline arm, named
    # "<baseline>.control", interleaved like any arm; its verdict against the
    # baseline says whether the host behaved during this sweep.
    # None: on when there is something to compare (2 arms or more) and 3 passes or more
    control: bool | None = None
    arms: list[Arm] = []  # explicit arms, then those of matrix: blocks, then the control

    @field_validator("min_effect")
    @classmethod
    def _min_effect(cls, value: float | dict[str, float] | None) -> float | dict[str, float] | None:
        from omni.store import COLUMNS_BY_NAME  # the metrics a verdict is given for

        for key, effect in ({"default": value} if isinstance(value, (int, float)) else value or {}).items():
            if not 0 < effect < 1:
                raise _problem(f"{key}: {effect} is not a relative effect; give e.g. 0.05 for 5 %")
            if key != "default" and (key not in COLUMNS_BY_NAME or not COLUMNS_BY_NAME[key].better):
                metrics = sorted(c.name for c in COLUMNS_BY_NAME.values() if c.better)
                raise _problem(f"{key!r} is no judged metric; use default or one of {', '.join(metrics)}")
        return value

    @property
    def baseline_arm(self) -> str:
        return self.baseline if self.baseline is not None else self.arms[0].name

    @property
    def control_arm(self) -> str | None:
        """The name of the A/A control arm, None when the sweep has none."""
        name = f"{self.baseline_arm}{CONTROL_SUFFIX}"
        if self.control is None:
            planned = len([a for a in self.arms if a.name != name]) >= 2 and self.passes >= 3
        else:
            planned = self.control
        return name if planned else None

    def _with_control(self) -> "Sweep":
        """The sweep with its control arm appended (once: a sweep read back
        from its own dump already has it)."""
        name = self.control_arm
        if name is None or any(a.name == name for a in self.arms):
            return self
        base = next(a for a in self.arms if a.name == self.baseline_arm)
        return self.model_copy(update={"arms": [*self.arms, base.model_copy(update={"name": name})]})

    @classmethod
    def known_keys(cls) -> list[str]:
        return [*cls.model_fields, "matrix"]

    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        data, origins, problems = _merge_matrix(data)
        try:
            sweep = handler(data)
        except ValidationError as err:
            problems += [(e["loc"], _plain_text(e, cls)) for e in err.errors()]
        else:
            problems += sweep._arm_problems()
        if problems:
            raise _validation_error(cls.__name__, [_relocate(p, origins) for p in problems])
        return sweep._with_control()

    def _arm_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        seen: set[str] = set()
        for i, arm in enumerate(self.arms):
            if arm.name in seen:
                problems.append((("arms", i, "name"), f"arm name {arm.name!r} is used by an earlier arm too"))
            if arm.name.endswith(CONTROL_SUFFIX) and arm.name != f"{self.baseline_arm}{CONTROL_SUFFIX}":
                problems.append((("arms", i, "name"), f"arm names ending in {CONTROL_SUFFIX!r} are kept for the "
                                 "A/A control arm omni adds (control: true); rename the arm"))  # fmt: skip
            seen.add(arm.name)
        if self.baseline is not None and self.baseline not in seen:
            names = ", ".join(a.name for a in self.arms)
            problems.append((("baseline",), f"no arm is named {self.baseline!r} (arms: {names})"))
        return problems


def _merge_matrix(data: dict[str, Any]) -> tuple[dict[str, Any], Origins, list[Problem]]:
    """Append the arms of ``matrix:`` blocks to ``arms:``, remembering where each came from."""
    data = dict(data)
    raw_blocks = data.pop("matrix", [])
    explicit = data.setdefault("arms", [])
    if not isinstance(explicit, list):
        return data, {}, []  # "arms must be a list" says it all
    try:
        blocks = _MATRIX.validate_python(raw_blocks)
    except ValidationError as err:
        return data, {}, [(("matrix", *e["loc"]), _plain_text(e)) for e in err.errors()]
    arms, origins = list(explicit), {}
    for b, block in enumerate(blocks):
        for arm, picks in block.expand():
            origins[len(arms)] = (b, picks)
            arms.append(arm)
    problems = [] if arms else [(("arms",), "no arms: list them under arms: or generate them with matrix:")]
    return {**data, "arms": arms}, origins, problems


def _relocate(problem: Problem, origins: Origins) -> Problem:
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


# --- loading ---


@dataclass(frozen=True)
class LoadedSpec:
    sweep: Sweep
    path: Path  # resolved
    sha256: str  # of the file's bytes
    text: str


def load_spec(path: str | Path) -> LoadedSpec:
    """Read, parse and validate a ``.yaml``/``.yml``/``.json`` sweep spec."""
    path = Path(path)
    source = str(path)
    raw = _read_spec_bytes(path)
    text = _decode(raw, source)
    parse = _parse_json if path.suffix.lower() == ".json" else _parse_yaml
    data, lines = parse(text, source)
    sweep = validate_sweep(data, source=source, lines=lines)
    return LoadedSpec(sweep=sweep, path=path.resolve(), sha256=hashlib.sha256(raw).hexdigest(), text=text)


def validate_sweep(data: Any, source: str = "spec", lines: dict[Loc, int] | None = None) -> Sweep:
    """Validate parsed spec data; every problem in one SpecError, located via ``lines``."""
    try:
        return Sweep.model_validate(data)
    except ValidationError as err:
        raise SpecError(_describe(err, source, lines or {})) from None


def _describe(err: ValidationError, source: str, lines: dict[Loc, int]) -> str:
    found = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if p != "[key]")  # pydantic's marker of a bad dict key
        line = _line_of(loc, lines)
        found.append((line, _problem_line(source, line, loc, _plain_text(e, Sweep))))
    found.sort(key=lambda item: item[0] or 0)  # read top to bottom, like the file
    return "\n".join(dict.fromkeys(text for _, text in found))


def _line_of(loc: Loc, lines: dict[Loc, int]) -> int | None:
    """Line of the deepest part of ``loc`` present in the file."""
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _problem_line(source: str, line: int | None, loc: Loc, text: str) -> str:
    where = f"{source}:{line}" if line else source
    field = _field_path(loc)
    return f"{where} {field}: {text}" if field else f"{where} {text}"


def _field_path(loc: Loc) -> str:
    """``("arms", 1, "params", "mem_mb")`` -> ``arms[1].params.mem_mb``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def _read_spec_bytes(path: Path) -> bytes:
    if path.is_dir():
        raise SpecError(f"{path}: is a directory; give a spec file inside it")
    if path.suffix.lower() not in SUFFIXES:
        kind = path.suffix or "(no extension)"
        raise SpecError(f"{path}: unsupported spec type {kind!r}; use .yaml, .yml or .json")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise SpecError(f"{path}: no such file{where}") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror}") from None


def _decode(raw: bytes, source: str) -> str:
    try:
        text = raw.decode("utf-8-sig")  # -sig: editors on Windows write a BOM
    except UnicodeDecodeError as err:
        raise SpecError(f"{source}: not UTF-8 text (bad byte at offset {err.start})") from None
    if not text.strip():
        raise SpecError(f"{source}: the file is empty; a spec needs at least name: and arms:")
    return text


def _require_mapping(data: Any, source: str) -> None:
    if data is None:
        raise SpecError(f"{source}: the file holds no data (only comments?); a spec needs name: and arms:")
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the top level must be a mapping of sweep keys (name:, arms:, ...), "
            f"got a {type(data).__name__}"
        )


# --- YAML ---


class _YamlProblem(Exception):
    def __init__(self, line: int, text: str, loc: Loc = (), duplicate: bool = False):
        super().__init__(text)
        self.line, self.text, self.loc, self.duplicate = line, text, loc, duplicate

    def message(self, source: str) -> str:
        return _problem_line(source, self.line, self.loc, self.text)


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader that notes explicit tags and anchors, to be refused with their field path.

    Tags (``!!python/object``, ``!foo``, even ``!!str``) are refused: a spec is
    plain data. Anchors and aliases are refused too: an error inside an alias
    would point at the anchor, not at the arm that used it; ``matrix:`` is the
    way to share settings between arms.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self.refused: dict[int, str] = {}  # id(node) -> why

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        node = super().compose_node(parent, index)
        if isinstance(event, yaml.AliasEvent):
            return node  # its anchor is refused where it was set
        if event.tag is not None:
            tag = _short_tag(event.tag)
            self.refused[id(node)] = f"YAML tag {tag!r} is not allowed; a spec holds plain values"
        elif event.anchor is not None:
            self.refused[id(node)] = (
                f"anchor &{event.anchor} is not supported (nor are aliases); use matrix: to share settings"
            )
        return node


# YAML 1.1 reads 2024-01-01 as a date and '=' and '<<' as special keys; in a
# spec they stay text, and validation says what is wrong with them, if anything.
_TEXT_TAGS = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value", "tag:yaml.org,2002:merge"}
_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _TEXT_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# YAML 1.1 wants a dot in a float, so `mem_mb: 1e3` would be the text '1e3';
# read it as YAML 1.2 and JSON do.
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def _short_tag(tag: str) -> str:
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix) :] if tag.startswith(prefix) else tag


def _parse_yaml(text: str, source: str) -> tuple[Any, dict[Loc, int]]:
    loader = _SpecLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            data, lines = None, {}
        else:
            lines = _index_lines(node, loader.refused)  # first: refuses before constructing
            data = loader.construct_document(node)
    except _YamlProblem as problem:
        raise SpecError(problem.message(source)) from None
    except yaml.MarkedYAMLError as err:
        raise SpecError(_yaml_error_text(err, source)) from None
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: cannot read YAML: {err}") from None
    finally:
        loader.dispose()
    _require_mapping(data, source)
    return data, lines


def _yaml_error_text(err: yaml.MarkedYAMLError, source: str) -> str:
    mark = err.problem_mark or err.context_mark
    where = f"{source}:{mark.line + 1}" if mark else source
    context = f" ({err.context})" if err.context else ""
    return f"{where} YAML syntax error: {err.problem or 'unreadable'}{context}"


def _index_lines(root: yaml.Node, refused: dict[int, str]) -> dict[Loc, int]:
    """Line of every key and list item, by path; refuses duplicate keys, tags and anchors."""
    lines: dict[Loc, int] = {(): root.start_mark.line + 1}
    _index_node(root, (), lines, refused)
    return lines


def _index_node(node: yaml.Node, path: Loc, lines: dict[Loc, int], refused: dict[int, str]) -> None:
    if id(node) in refused:
        raise _YamlProblem(node.start_mark.line + 1, refused[id(node)], path)
    if isinstance(node, yaml.MappingNode):
        _index_mapping(node, path, lines, refused)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _index_node(item, (*path, i), lines, refused)


def _index_mapping(node: yaml.MappingNode, path: Loc, lines: dict[Loc, int], refused: dict[int, str]) -> None:
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if id(key_node) in refused:
            raise _YamlProblem(line, refused[id(key_node)], path)
        if not isinstance(key_node, yaml.ScalarNode):
            raise _YamlProblem(line, "a key must be a plain name, not a list or mapping", path)
        loc = (*path, key_node.value)
        if loc in lines:
            text = f"duplicate key {key_node.value!r} (first at line {lines[loc]}, again at line {line})"
            raise _YamlProblem(line, text, loc, duplicate=True)
        lines[loc] = line
        _index_node(value_node, loc, lines, refused)


# --- JSON ---


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse_json(text: str, source: str) -> tuple[Any, dict[Loc, int]]:
    lines = _json_lines(text, source)
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as err:
        raise SpecError(f"{source}:{err.lineno} JSON syntax error: {err.msg} (column {err.colno})") from None
    except _DuplicateKey as dup:
        raise SpecError(f"{source}: duplicate key {dup.args[0]!r}") from None
    _require_mapping(data, source)
    return data, lines


def _json_lines(text: str, source: str) -> dict[Loc, int]:
    """Key lines of a JSON spec, read as YAML flow style; {} where YAML disagrees."""
    loader = _SpecLoader(text)
    try:
        node = loader.get_single_node()
        return _index_lines(node, {}) if node is not None else {}
    except _YamlProblem as problem:
        if problem.duplicate:
            raise SpecError(problem.message(source)) from None
        return {}
    except yaml.YAMLError:
        return {}  # e.g. tab indentation: fine JSON, no YAML; json.loads decides
    finally:
        loader.dispose()


# --- helpers for other modules ---


def canonical_arm_json(arm: Arm) -> str:
    """Deterministic JSON of the arm, defaults included: the run identity.

    Every field takes part, so adding an Arm field changes every hash (a resume
    across such a change reruns everything, which is the safe side).
    """
    return json.dumps(arm.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), allow_nan=False)


def arm_hash(arm: Arm) -> str:
    return hashlib.sha256(canonical_arm_json(arm).encode()).hexdigest()


def expanded_arms_table(sweep: Sweep) -> list[dict[str, Any]]:
    """One row per arm, matrix arms included, for ``omni validate`` to print."""
    return [
        {
            "name": arm.name,
            "engine": arm.engine,
            "engine_env": arm.engine_env,
            "model": arm.model,
            "prompt_len": arm.prompt_len,
            "max_tokens": arm.max_tokens,
            "batch_size": arm.batch_size,
            "threads": arm.threads,
            "params": _params_summary(arm),
            "hash": arm_hash(arm)[:12],
        }
        for arm in sweep.arms
    ]


def _params_summary(arm: Arm) -> str:
    """Params that differ from the engine's defaults: ``mem_mb=64.0 procs=2``."""
    defaults = type(arm.engine_params())().model_dump()
    return " ".join(f"{k}={v}" for k, v in arm.params.items() if defaults.get(k) != v)
