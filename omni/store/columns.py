"""The column registry: every Parquet column omni writes, declared once.

Each run row column has a type, a unit, a meaning and a group (:data:`COLUMNS`);
metrics say which direction is better, so statistics never hard-code it. The
columns are declared by what they describe (:mod:`omni.store.columns_run`,
:mod:`omni.store.columns_placement`, :mod:`omni.store.columns_metrics`, :mod:`omni.store.columns_roofs`,
:mod:`omni.store.columns_validity`, each of the type in
:mod:`omni.store.column_type`); this module puts them in their one order and
answers for them: lookup by name, the metrics, the schema.
:func:`schema` is the Arrow schema they make
(:func:`omni.store.row_check.validate_row` checks and coerces a row against it before
it is written), and ``SCHEMA_VERSION`` is stamped on every row so older files
can be read through an upgrade per bump (:func:`omni.store.upgrades.upgrade_table`).
The side tables' schemas are in :mod:`omni.store.side_tables`.
"""

from __future__ import annotations

import functools

import pyarrow as pa

from omni.store.column_type import Column
from omni.store.columns_metrics import METRICS, SERVING
from omni.store.columns_placement import PLACEMENT
from omni.store.columns_roofs import ROOFS
from omni.store.columns_run import ARM, IDENTITY, PROVENANCE
from omni.store.columns_validity import VALIDITY

SCHEMA_VERSION = 19

# Columns that make a row addressable: without them it cannot be filed.
REQUIRED = ("run_id", "sweep_id", "status")

COLUMNS: tuple[Column, ...] = (*IDENTITY, *ARM, *PLACEMENT, *METRICS, *SERVING, *ROOFS, *PROVENANCE, *VALIDITY)

COLUMNS_BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}


def metric_columns() -> list[str]:
    """Metrics the registry says which way is better: the ones summaries judge."""
    return [c.name for c in COLUMNS if c.group == "metrics" and c.better]


@functools.cache
def schema() -> pa.Schema:
    """The current Arrow schema; unit, meaning and group ride in field metadata."""
    fields = []
    for col in COLUMNS:
        meta = {"meaning": col.meaning, "group": col.group}
        meta.update({k: v for k, v in (("unit", col.unit), ("better", col.better)) if v})
        fields.append(pa.field(col.name, col.type, metadata=meta))
    return pa.schema(fields, metadata={"omni.schema_version": str(SCHEMA_VERSION)})


@functools.cache
def file_schema() -> pa.Schema:
    """:func:`schema` without the per-field meaning and unit: a one-row file
    would carry 20 KB of the registry's text in its footer, and readers take
    them from the registry anyway (:func:`omni.store.upgrades.upgrade_table`)."""
    return pa.schema([pa.field(f.name, f.type) for f in schema()], metadata=schema().metadata)
