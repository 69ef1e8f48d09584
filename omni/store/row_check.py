"""A run row checked against the column registry (:mod:`omni.store.columns`) and
coerced to its types before it is written: unknown keys name the nearest
column, a value of the wrong type names its column and what it must be.
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from omni.errors import OmniError
from omni.store.column_type import Column
from omni.store.columns import COLUMNS, COLUMNS_BY_NAME, REQUIRED, SCHEMA_VERSION


def validate_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Check a run row against the registry; return it complete and coerced.

    Unknown keys are rejected with the nearest known name; missing columns
    become None; ``schema_version`` is set. ``NaN``, ``pd.NA`` and ``NaT``
    count as missing, so a row read back with :func:`omni.store.reading.load_runs` validates.
    """
    for key in row:
        if key not in COLUMNS_BY_NAME:
            raise OmniError(f"unknown result column {key!r}{_suggest(key)}")
    clean = {col.name: _coerce(col, row.get(col.name)) for col in COLUMNS}
    clean["schema_version"] = SCHEMA_VERSION
    for name in REQUIRED:
        if clean[name] is None:
            raise OmniError(f"result row has no {name!r}: every run row needs {', '.join(REQUIRED)}")
    return clean


def _suggest(key: str) -> str:
    close = difflib.get_close_matches(key, COLUMNS_BY_NAME, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return "; the known columns are listed in omni.store.columns.COLUMNS"


def _is_missing(value: Any) -> bool:
    # pandas is imported only by readers (a run's writer stays light): if it
    # is not loaded (or still loading, in another thread), no value is pd.NA or pd.NaT
    pd = sys.modules.get("pandas")
    if value is None or any(value is getattr(pd, name, None) for name in ("NA", "NaT") if pd is not None):
        return True
    return isinstance(value, (float, np.floating)) and math.isnan(value)


def _coerce(col: Column, value: Any) -> Any:
    if _is_missing(value):
        return None
    kind = col.type
    if pa.types.is_string(kind):
        value = _to_json(col, value) if col.is_json else _to_str(col, value)
        if col.choices and value not in col.choices:
            _reject(col, value, f"one of {', '.join(col.choices)}")
        return value
    if pa.types.is_list(kind):
        return _to_list(col, value)
    if pa.types.is_timestamp(kind):
        return _to_time(col, value)
    return _to_scalar(col, kind, value)


def _to_scalar(col: Column, kind: pa.DataType, value: Any) -> Any:
    if pa.types.is_boolean(kind):
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        _reject(col, value, "a bool")
    is_bool = isinstance(value, (bool, np.bool_))
    if pa.types.is_integer(kind):
        if isinstance(value, numbers.Integral) and not is_bool:
            return _in_range(col, kind, int(value))
        _reject(col, value, f"an integer ({kind})")
    if isinstance(value, numbers.Real) and not is_bool and math.isfinite(value):
        return float(value)
    _reject(col, value, "a finite number (use None for a missing value)")


def _in_range(col: Column, kind: pa.DataType, value: int) -> int:
    limit = 2 ** (kind.bit_width - 1)
    if not -limit <= value < limit:
        _reject(col, value, f"an integer that fits {kind}")
    return value


def _to_str(col: Column, value: Any) -> str:
    if not isinstance(value, str):
        _reject(col, value, "a string")
    return value


def _to_json(col: Column, value: Any) -> str:
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            _reject(col, value, "a JSON string (or a dict/list to be dumped)")
        return value
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        _reject(col, value, "JSON-serialisable (dict, list, str, numbers)")


def _to_list(col: Column, value: Any) -> list:
    if not isinstance(value, (list, tuple, set, frozenset, range, np.ndarray)):
        _reject(col, value, f"a list ({col.type})")
    # Sets carry no order; sort them so equal sets store equal lists.
    items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    item_type = col.type.value_type
    if pa.types.is_string(item_type):
        if not all(isinstance(item, str) for item in items):
            _reject(col, value, "a list of strings")
        return items
    if not all(isinstance(i, numbers.Integral) and not isinstance(i, (bool, np.bool_)) for i in items):
        _reject(col, value, "a list of integers")
    return [_in_range(col, item_type, int(item)) for item in items]


def _to_time(col: Column, value: Any) -> datetime:
    if not isinstance(value, datetime):
        _reject(col, value, "a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        _reject(col, value, "a timezone-aware datetime (e.g. datetime.now(timezone.utc))")
    return value.astimezone(UTC)


def _reject(col: Column, value: Any, expected: str) -> NoReturn:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise OmniError(f"result column {col.name!r}: {shown} ({type(value).__name__}) is not {expected}")
