"""Spec problems in plain words, each at a location and then at a file line.

Every check of a spec, pydantic's own and omni's, ends up as a
:class:`~pydantic.ValidationError` whose entries are ``(loc, text)``; here
they become the lines of one :class:`~omni.errors.SpecError`:
``FILE:LINE FIELD: message``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]  # (where, plain message)
Lines = dict[Loc, int]  # location -> its line in the file

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def problem(text: str) -> PydanticCustomError:
    """A validation error whose message is already plain English."""
    return PydanticCustomError("omni_spec", "{detail}", {"detail": text})


def validation_error(title: str, problems: list[Problem]) -> ValidationError:
    details = [InitErrorDetails(type=problem(text), loc=loc, input=None) for loc, text in dict.fromkeys(problems)]
    return ValidationError.from_exception_data(title, details)


def show(value: Any) -> str:
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


def plain_text(err: dict[str, Any], model: Any = None) -> str:
    """Pydantic's error in words a spec author reads without the pydantic docs.

    ``model``, the spec model being validated, lets an unknown key list the
    keys it knows.
    """
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "omni_spec":
        return ctx["detail"]
    if kind == "extra_forbidden":
        return _unknown_key_text(err["loc"], model)
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}, got {show(err.get('input'))}"
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        bound = ctx[key]
        # Float fields get float bounds: say ">= 0", not ">= 0.0".
        return f"must be {op} {int(bound) if float(bound).is_integer() else bound}"
    if kind == "invalid_key":
        return f"a key must be a name (text), got {show(err['loc'][-1])}"
    if kind == "missing":
        return "is required"
    if kind == "literal_error":
        return f"must be {ctx['expected']}, got {show(err.get('input'))}"
    if kind == "too_short":
        least = ctx.get("min_length")
        return "must not be empty" if least == 1 else f"must have at least {least} items"
    if kind == "value_error":
        return str(ctx["error"])
    return err["msg"]


def _unknown_key_text(loc: Loc, model: Any) -> str:
    text = f"unknown key {loc[-1]!r}"
    # Only a loc of length 1 is a key of ``model`` itself; deeper ones belong
    # to nested models, which already named their own keys.
    if model is not None and len(loc) == 1:
        text += f" (known: {', '.join(model.known_keys())})"
    return text


def describe(err: ValidationError, source: str, lines: Lines, model: Any) -> str:
    """The SpecError text of ``err``: one problem per line, in file order."""
    found = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if p != "[key]")  # pydantic's marker of a bad dict key
        line = line_of(loc, lines)
        found.append((line, problem_line(source, line, loc, plain_text(e, model))))
    found.sort(key=lambda item: item[0] or 0)  # read top to bottom, like the file
    return "\n".join(dict.fromkeys(text for _, text in found))


def line_of(loc: Loc, lines: Lines) -> int | None:
    """Line of the deepest part of ``loc`` present in the file; for a key the
    file lacks at the top (a required name:), the document's. None only when
    the file's lines are unknown."""
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


# characters str.splitlines() breaks at: a key or value holding one must not split a problem in two
_BREAKS = {c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def problem_line(source: str, line: int | None, loc: Loc, text: str) -> str:
    """One problem, on one line: ``FILE:LINE FIELD: message``."""
    where = f"{source}:{line}" if line else source
    field = field_path(loc)
    out = f"{where} {field}: {text}" if field else f"{where} {text}"
    return "".join(_BREAKS.get(c, c) for c in out)


def field_path(loc: Loc) -> str:
    """``("arms", 1, "params", "mem_mb")`` -> ``arms[1].params.mem_mb``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and _IDENTIFIER.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out
