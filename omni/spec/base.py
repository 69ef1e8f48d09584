"""What every spec model shares: strict models with plain-word errors, and
the names a spec gives (arms, hosts, environment variables)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator

from omni.spec.problems import plain_text, problem, validation_error

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")
_NAME_MAX = 80
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_name(value: str) -> str:
    if len(value) > _NAME_MAX:
        raise problem(f"must be at most {_NAME_MAX} characters, got {len(value)}")
    if not _NAME.match(value):
        raise problem(
            f"{value!r} is not a valid name: use letters, digits and _ . = + - (starting with a letter or digit)"
        )
    return value


def _matching(pattern: re.Pattern, what: str):
    """A validator: the value must match ``pattern``, else it is not ``what``."""

    def check(value: str) -> str:
        if not pattern.match(value):
            raise problem(f"{value!r} is not {what}")
        return value

    return check


_check_env_name = _matching(ENV_NAME, "an environment variable name (letters, digits and _, not starting with a digit)")
HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_check_host_name = _matching(
    HOST_NAME,
    "a fleet host name: lower-case letters, digits, _ and - (starting with a "
    "letter or digit, at most 63), as given to omni worker --host",
)


Name = Annotated[str, AfterValidator(_check_name)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]


class SpecModel(BaseModel):
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
            problems = [(e["loc"], plain_text(e, cls)) for e in err.errors()]
            raise validation_error(cls.__name__, problems) from None

    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        """Hook for a model that reshapes its input first (Sweep expands matrix:)."""
        return handler(data)

    @classmethod
    def known_keys(cls) -> list[str]:
        return list(cls.model_fields)
