"""The ``Column`` type of the run registry, and the shorthands its declarations
use (Arrow types, ``better`` and JSON flags, :func:`declare` for a group). The
columns themselves are declared in ``omni.store.columns_*`` and assembled by
:mod:`omni.store.columns`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    """One Parquet column, declared once.

    ``better`` says which direction is an improvement for a metric, so
    statistics never hard-code it. ``choices`` restricts a string column to a
    closed set. ``is_json`` marks a string column that holds JSON: dicts and
    lists given for it are dumped with sorted keys.
    """

    name: str
    type: pa.DataType
    unit: str | None
    meaning: str
    group: str
    better: Literal["higher", "lower"] | None = None
    choices: tuple[str, ...] | None = None
    is_json: bool = False


STR = pa.string()
I16 = pa.int16()
I32 = pa.int32()
I64 = pa.int64()
F64 = pa.float64()
BOOL = pa.bool_()
STRS = pa.list_(pa.string())
INTS = pa.list_(pa.int32())
I64S = pa.list_(pa.int64())
TIME = pa.timestamp("us", tz="UTC")


def declare(group: str, *specs: tuple) -> tuple[Column, ...]:
    # spec: (name, type, unit, meaning[, dict of further Column fields])
    columns = []
    for spec in specs:
        extras = spec[4] if len(spec) > 4 else {}
        columns.append(Column(spec[0], spec[1], spec[2], spec[3], group, **extras))
    return tuple(columns)


LOWER = {"better": "lower"}
HIGHER = {"better": "higher"}
JSON = {"is_json": True}
