"""The results dataset: one Parquet file per run, one column registry.

Layout: ``results/runs/sweep=<sweep_id>/<run_id>.parquet``. Each file holds a
single row with the full schema, so ``pandas.read_parquet("results/runs")``
works on the directory as it stands (the hive directory adds a ``sweep``
column, which no registry column is named). Files are written once, atomically,
the moment a run ends and never rewritten; old files stay readable through
:func:`upgrade_table`.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import math
import numbers
import os
import re
import secrets
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from omni.errors import OmniError, naming
from omni.objstore import ResultsPath, S3Path, arrow_source, results_root

if TYPE_CHECKING:
    import pandas as pd

# a results location as callers give it: a directory, or s3://bucket/prefix
Results = str | Path | ResultsPath

SCHEMA_VERSION = 8

STATUSES = ("ok", "failed", "timeout", "refused", "invalid")
BINDING_METHODS = ("numactl", "sched_setaffinity", "none")

# Columns that make a row addressable: without them it cannot be filed.
REQUIRED = ("run_id", "sweep_id", "status")


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


_STR = pa.string()
_I16 = pa.int16()
_I32 = pa.int32()
_I64 = pa.int64()
_F64 = pa.float64()
_BOOL = pa.bool_()
_STRS = pa.list_(pa.string())
_INTS = pa.list_(pa.int32())
_I64S = pa.list_(pa.int64())
_TIME = pa.timestamp("us", tz="UTC")


def _group(group: str, *specs: tuple) -> tuple[Column, ...]:
    # spec: (name, type, unit, meaning[, dict of further Column fields])
    columns = []
    for spec in specs:
        extras = spec[4] if len(spec) > 4 else {}
        columns.append(Column(spec[0], spec[1], spec[2], spec[3], group, **extras))
    return tuple(columns)


_LOWER = {"better": "lower"}
_HIGHER = {"better": "higher"}
_JSON = {"is_json": True}

COLUMNS: tuple[Column, ...] = (
    *_group(
        "identity",
        ("schema_version", _I16, None, "version of this registry the row was written with"),
        ("run_id", _STR, None, "unique id of the run: hash of the sweep id, canonical arm and pass"),
        ("sweep_id", _STR, None, "unique id of the sweep the run belongs to"),
        ("sweep_name", _STR, None, "human name of the sweep, from the spec"),
        ("arm", _STR, None, "name of the arm (configuration) this run executed"),
        ("pass_index", _I32, None, "which pass over all arms, from 0"),
        ("order_index", _I32, None, "position of the run in the sweep's interleaved schedule"),
        ("attempt", _I32, None, "attempt number for this arm and pass, from 1"),
        ("status", _STR, None, "outcome of the run", {"choices": STATUSES}),
        ("error", _STR, None, "why the run did not succeed, for people"),
        ("exit_code", _I32, None, "exit status of the engine process; negative = killed by signal"),
        ("stderr_tail", _STR, None, "last lines of the engine's stderr"),
        ("forced", _BOOL, None, "run despite a refusal (e.g. busy cores), by request"),
        (
            "profiled",
            _BOOL,
            None,
            "a profiled pass (the arm's profile:): per-op times in results/ops, its "
            "timings distorted by the profiler and kept out of every verdict (v5; null before: not profiled)",
        ),
    ),
    *_group(
        "arm",
        ("engine", _STR, None, "engine kind: vllm, llamacpp, synthetic"),
        ("engine_env", _STR, None, "name of the engine environment (.venvs/<name>)"),
        ("model", _STR, None, "model path or name as given in the arm"),
        ("model_digest", _STR, None, "content digest of the model files"),
        ("dtype", _STR, None, "compute dtype of the model weights/activations"),
        ("quantization", _STR, None, "quantization method, None when unquantized"),
        ("kv_cache_bytes", _I64, "B", "KV cache budget requested by the arm"),
        ("context_len", _I32, "tok", "maximum context length requested"),
        ("prompt_len", _I32, "tok", "prompt length per sequence"),
        ("max_tokens", _I32, "tok", "tokens generated per sequence"),
        ("batch_size", _I32, "seq", "sequences per batch"),
        (
            "prompt_seed",
            _I32,
            None,
            "seed of the timed prompts, the arm's prompt_seed (v7; null before, "
            "when every run timed the prompts of seed 0)",
        ),
        ("threads", _I32, None, "compute threads requested"),
        ("compile_mode", _STR, None, "graph compilation mode (eager, compiled, cached...)"),
        ("patches", _STRS, None, "omni runtime patches enabled for this arm"),
        (
            "patch_report",
            _STR,
            None,
            "per vLLM process: each patch applied / not needed / failed, JSON list (v2)",
            _JSON,
        ),
        ("env_overrides", _STR, None, "environment variables set by the arm, JSON object", _JSON),
        ("engine_params", _STR, None, "engine-specific parameters, JSON object", _JSON),
        ("arm_json", _STR, None, "canonical JSON of the whole arm", _JSON),
        ("arm_hash", _STR, None, "hash of arm_json: same hash, same configuration"),
        ("threads_checked", _I32, None, "threads whose own affinity was checked in steady state (v2)"),
        ("mmap", _BOOL, None, "weights memory-mapped from the file: file-backed pages, not RssAnon (v2)"),
    ),
    *_group(
        "placement",
        ("slot_index", _I32, None, "NUMA slot the run was placed in"),
        ("numa_node", _I32, None, "NUMA node of the slot"),
        ("cpus", _INTS, None, "CPUs the run was bound to"),
        ("membind", _INTS, None, "NUMA nodes memory was bound to"),
        ("binding_method", _STR, None, "how the binding was applied", {"choices": BINDING_METHODS}),
        ("cpus_allowed_seen", _INTS, None, "Cpus_allowed_list seen, union over the process tree"),
        (
            "mems_allowed_seen",
            _INTS,
            None,
            "Mems_allowed_list seen, union over the tree: the cpuset's nodes, "
            "not the memory policy (numactl --membind does not change it)",
        ),
        ("binding_ok", _BOOL, None, "CPUs, memory policy and page placement seen matched the slot"),
        ("binding_procs_checked", _I32, None, "processes whose binding was checked"),
        ("straddle", _BOOL, None, "the slot spans several NUMA nodes, memory bound to all of them (v3)"),
        ("slots_override", _STR, None, "slots given on the command line (--cores/--node) instead of the spec's (v3)"),
        ("mempolicies_seen", _STRS, None, "memory policies seen in numa_maps, every process and thread, distinct (v3)"),
        (
            "mem_anon_kib_by_node",
            _I64S,
            "KiB",
            "the tree's anonymous memory per NUMA node (index = node), steady state (v3)",
        ),
        (
            "mem_file_kib_by_node",
            _I64S,
            "KiB",
            "the tree's mapped file pages per NUMA node (index = node), steady state (v3)",
        ),
        (
            "mem_local_fraction",
            _F64,
            None,
            "share of the tree's anonymous memory on the slot's nodes, steady state (v3)",
        ),
        ("mem_file_local_fraction", _F64, None, "share of the tree's mapped file pages on the slot's nodes (v3)"),
        ("numa_by_proc", _STR, None, "per process: pid, name, policies, anon/file KiB per node, JSON list (v3)", _JSON),
        ("numa_maps_reads", _I32, None, "reads of the whole tree's numa_maps during the run (v3)"),
        ("numa_maps_cpu_ms", _F64, "ms", "CPU the sampler spent reading numa_maps, all reads (v3)"),
        (
            "numa_steady_missing",
            _I32,
            None,
            "processes of the tree at the steady mark with no numa_maps read in "
            "steady state: their memory per node is from an earlier read; null: the run never got to steady (v6)",
        ),
        ("busy_max_pct", _F64, "%", "busiest slot CPU's load just before the run"),
        ("busy_waited_s", _F64, "s", "time the run waited for its slot's CPUs to fall below the busy threshold (v4)"),
        ("command", _STR, None, "engine command line, JSON argv list", _JSON),
    ),
    *_group(
        "metrics",
        ("load_s", _F64, "s", "engine start to model ready (includes compile)", _LOWER),
        ("ttft_ms", _F64, "ms", "time to first token of the whole batch", _LOWER),
        ("prefill_tok_s", _F64, "tok/s", "prompt tokens processed per second", _HIGHER),
        ("decode_tok_s", _F64, "tok/s", "tokens generated per second", _HIGHER),
        ("e2e_s", _F64, "s", "end-to-end generation time, engine-measured", _LOWER),
        ("tpot_ms", _F64, "ms", "time per output token after the first, per sequence (v4)", _LOWER),
        (
            "itl_p50_ms",
            _F64,
            "ms",
            "inter-token latency, median over every decode step of every iteration (v4)",
            _LOWER,
        ),
        ("itl_p90_ms", _F64, "ms", "inter-token latency, 90th percentile over every decode step (v4)", _LOWER),
        ("itl_p99_ms", _F64, "ms", "inter-token latency, 99th percentile over every decode step (v4)", _LOWER),
        (
            "iterations",
            _I32,
            None,
            "timed iterations in the run's one engine process; ttft, rates, e2e and "
            "tpot are their median, every iteration is in results/iterations (v4)",
        ),
        *[
            (
                f"{m}_iter_sd_log",
                _F64,
                None,
                f"within-run spread of {m}: sd of the log iteration values, about the relative sd (v4)",
            )
            for m in ("ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_s", "tpot_ms")
        ],
        ("wall_s", _F64, "s", "wall time of the whole run, orchestrator-measured", _LOWER),
        ("rss_anon_tree_mb", _F64, "MiB", "peak RssAnon summed over the process tree", _LOWER),
        ("rss_anon_after_load_mb", _F64, "MiB", "tree RssAnon when the model is loaded", _LOWER),
        ("rss_anon_steady_mb", _F64, "MiB", "tree RssAnon during steady generation", _LOWER),
        ("pss_anon_tree_mb", _F64, "MiB", "peak anonymous Pss summed over the tree", _LOWER),
        ("pss_anon_after_load_mb", _F64, "MiB", "tree anonymous Pss when loaded", _LOWER),
        ("pss_anon_steady_mb", _F64, "MiB", "tree anonymous Pss during generation", _LOWER),
        ("rss_samples", _I32, None, "RssAnon samples taken"),
        ("rss_interval_ms", _F64, "ms", "interval between RssAnon samples"),
        ("pss_samples", _I32, None, "Pss samples taken"),
        ("pss_interval_ms", _F64, "ms", "interval between Pss samples"),
        ("kv_cache_bytes_effective", _I64, "B", "KV cache the engine actually allocated"),
        ("n_procs", _I32, None, "most processes seen at once in the engine's tree"),
        ("profile_steps", _I32, None, "engine steps traced by a profiled run, one row each per op in results/ops (v5)"),
        (
            "profile_overhead",
            _F64,
            None,
            "a profiled run's median decode step time while traced over the same "
            "run's untraced one: what the profiler costs (v5)",
        ),
        (
            "engine_perf",
            _STR,
            None,
            "the engine's own phase totals (llama.cpp: llama_perf_context's load, "
            "prompt eval and eval ms and token counts), JSON object (v5)",
            _JSON,
        ),
    ),
    *_group(
        "provenance",
        ("harness_version", _STR, None, "omni version"),
        ("harness_git_sha", _STR, None, "git commit of the omni checkout"),
        ("harness_git_dirty", _BOOL, None, "the omni checkout had uncommitted changes"),
        ("engine_version", _STR, None, "engine package version, engine-reported"),
        ("engine_commit", _STR, None, "engine source commit, engine-reported"),
        ("torch_version", _STR, None, "torch version in the engine env"),
        ("python_version", _STR, None, "Python of the orchestrator"),
        ("engine_python_version", _STR, None, "Python of the engine env"),
        ("host", _STR, None, "host name: the fleet host (omni worker --host) that ran it, else the machine's name"),
        ("hostname", _STR, None, "the machine's name (two fleet hosts may be one machine) (v6)"),
        ("kernel", _STR, None, "kernel release"),
        ("cpu_model", _STR, None, "CPU model name from /proc/cpuinfo"),
        ("cpu_flags", _STRS, None, "inference-relevant ISA flags present on the CPU"),
        ("isa_avx512_bf16", _BOOL, None, "CPU has AVX512-BF16"),
        ("isa_amx_bf16", _BOOL, None, "CPU has AMX-BF16"),
        ("isa_amx_int8", _BOOL, None, "CPU has AMX-INT8"),
        ("numa_nodes", _I32, None, "NUMA nodes on the host"),
        ("numa_topology", _STR, None, 'node -> CPUs, JSON object {"0": [0, 1]}', _JSON),
        ("spec_path", _STR, None, "path of the sweep spec file"),
        ("spec_sha256", _STR, None, "sha256 of the sweep spec file's bytes"),
        (
            "env_vars",
            _STR,
            None,
            "behaviour-changing environment variables of the engine process: what omni "
            "passed and the engine set (v4; before, the orchestrator's), JSON",
            _JSON,
        ),
        ("started_at", _TIME, None, "when the run started"),
        ("finished_at", _TIME, None, "when the run finished"),
        ("prefect_flow_run_id", _STR, None, "Prefect flow run, None outside Prefect"),
        ("engine_provenance", _STR, None, "other engine-reported facts, JSON object", _JSON),
        ("engine_env_key", _STR, None, "hash of the engine env's declaration in omni/envs.py (v2)"),
        (
            "engine_env_freeze_sha256",
            _STR,
            None,
            "sha256 of the engine env's pip freeze less omni's own editable "
            "install (v2; v4: before, omni's line was in it, so it moved with every omni commit)",
        ),
        (
            "engine_config",
            _STR,
            None,
            "the engine's effective configuration as it reported it (OMP bind, KV "
            "blocks, max_model_len, n_ctx...), JSON object (v4)",
            _JSON,
        ),
        (
            "compile_cache",
            _STR,
            None,
            "vLLM compiled mode, from the engine's log: how this start got its "
            "compiled graph: loaded (a warm AOT artifact, nothing compiled), compiled (no artifact to load; "
            "inductor's own caches may still have served parts), recompiled (an artifact failed to load); null: "
            "eager, AOT off, another engine, or a row before v8. The artifact's key covers the CPU binding: a "
            "warm start on other CPUs compiles (v8)",
        ),
    ),
    *_group(
        "validity",
        ("warnings", _STRS, None, "reasons to doubt this row's numbers"),
        ("warning_rules", _STRS, None, "the rule that raised each warning, same order"),
        (
            "tokens_mismatch_iterations",
            _I32,
            None,
            "timed iterations in which a sequence generated other than "
            "max_tokens, as the engine counted them (each iteration's counts: results/iterations tokens); "
            "above 0 the run is invalid (tokens_mismatch); null: not counted (v7)",
        ),
        (
            "audit_repeat_ttft_ratio",
            _F64,
            None,
            "median TTFT of timed iterations 1.. (repeats of iteration 0's "
            "prompts) over the faster first sight: iteration 0's, or audit_fresh_ttft_ms; well below 1, a cache "
            "served the repeats (repeat_faster); null below 3 iterations (v7)",
        ),
        (
            "audit_fresh_ttft_ms",
            _F64,
            "ms",
            "TTFT of a batch of fresh prompts the engine timed once after the "
            "timed iterations, the second first sight of the repeat audit; not in any metric (v7)",
        ),
        (
            "audit_repeat_ttft_cv",
            _F64,
            None,
            "robust CV of the TTFT of timed iterations 1.., the noise repeat_faster allows for (v7)",
        ),
    ),
)

COLUMNS_BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}


@functools.cache
def schema() -> pa.Schema:
    """The current Arrow schema; unit, meaning and group ride in field metadata."""
    fields = []
    for col in COLUMNS:
        meta = {"meaning": col.meaning, "group": col.group}
        meta.update({k: v for k, v in (("unit", col.unit), ("better", col.better)) if v})
        fields.append(pa.field(col.name, col.type, metadata=meta))
    return pa.schema(fields, metadata={"omni.schema_version": str(SCHEMA_VERSION)})


# ----------------------------------------------------------------- validation


def validate_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Check a run row against the registry; return it complete and coerced.

    Unknown keys are rejected with the nearest known name; missing columns
    become None; ``schema_version`` is set. ``NaN``, ``pd.NA`` and ``NaT``
    count as missing, so a row read back with :func:`load_runs` validates.
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
    return "; the known columns are listed in omni.store.COLUMNS"


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


# ----------------------------------------------------------------------- files

# Ids become path components and hive partition values: keep them plain, and
# never starting with "." or "_", which dataset discovery treats as hidden.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def run_path(results_dir: Results, sweep_id: str, run_id: str) -> ResultsPath:
    """Where the run's file lives: ``results_dir/runs/sweep=<id>/<run_id>.parquet``."""
    for what, value in (("sweep_id", sweep_id), ("run_id", run_id)):
        if not isinstance(value, str) or not _ID.match(value):
            raise OmniError(
                f"{what} {value!r} cannot name a results file: use letters, digits, "
                "'.', '_' and '-', starting with a letter or digit"
            )
    return _sweep_dir(results_dir, sweep_id) / f"{run_id}.parquet"


def _sweep_dir(results_dir: Results, sweep_id: str) -> ResultsPath:
    return results_root(results_dir) / "runs" / f"sweep={sweep_id}"


def write_run(results_dir: Results, row: Mapping[str, Any]) -> ResultsPath:
    """Validate ``row`` and write it as its run's file, atomically, once."""
    clean = validate_row(row)
    final = run_path(results_dir, clean["sweep_id"], clean["run_id"])
    return write_once(final, pa.Table.from_pylist([clean], schema=file_schema()))


@functools.cache
def file_schema() -> pa.Schema:
    """:func:`schema` without the per-field meaning and unit: a one-row file
    would carry 20 KB of the registry's text in its footer, and readers take
    them from the registry anyway (:func:`upgrade_table`)."""
    return pa.schema([pa.field(f.name, f.type) for f in schema()], metadata=schema().metadata)


# A one-row file gains nothing from column statistics (a reader reads the row)
# or dictionaries; without them it is 30 KB, not 82 KB (measured on a vLLM row).
# Compacted files (many rows of one sweep) keep both.
_ONE_ROW_OPTIONS = {"write_statistics": False, "use_dictionary": False}


def write_once(final: ResultsPath, table: pa.Table, **options: Any) -> ResultsPath:
    """Write ``table`` as Parquet to ``final``, atomically, never replacing anything.

    Locally the bytes go to a hidden temp file in the same directory, are
    fsynced, and are then hard-linked to the final name: unlike a rename, a
    link fails when the name exists, so a concurrent writer can never replace
    a stored file. A crash leaves at most a hidden temp file, which readers
    ignore. On S3 the object is one conditional PUT (``If-None-Match: *``).
    """
    options = options or (_ONE_ROW_OPTIONS if table.num_rows <= 1 else {})
    if isinstance(final, S3Path):
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **options)
        try:
            final.put_once(sink.getvalue().to_pybytes())
        except FileExistsError:
            raise _already_stored(final) from None
        return final
    if final.exists():
        raise _already_stored(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with naming(final), open(temp, "xb") as sink:
            pq.write_table(table, sink, **options)
            sink.flush()
            os.fsync(sink.fileno())
        os.link(temp, final)
    except FileExistsError:
        raise _already_stored(final) from None
    finally:
        temp.unlink(missing_ok=True)
    # The new name lives in the partition directory's entries; the partition
    # directory itself (when just made) in its dataset directory. Sync both.
    _fsync_dir(final.parent)
    _fsync_dir(final.parent.parent)
    return final


def read_parquet(path: ResultsPath, **options: Any) -> pa.Table:
    """One Parquet file, local or on S3 (``pq.read_table``'s options)."""
    source, filesystem = arrow_source(path)
    return pq.read_table(source, filesystem=filesystem, **options)


# ------------------------------------------------------- iterations and ops

# Side tables, one file per run in results/<kind>/sweep=<id>/<run_id>.parquet,
# written just before the run's own row (the run row is the commit: a side
# file without one is a run that never finished storing).
# iterations: one row per timed iteration of a run.
ITERATION_SCHEMA = pa.schema(
    [
        ("run_id", _STR),
        ("sweep_id", _STR),
        ("arm", _STR),
        ("pass_index", _I32),
        ("iteration", _I32),
        ("ttft_ms", _F64),
        ("prefill_tok_s", _F64),
        ("decode_tok_s", _F64),
        ("e2e_s", _F64),
        ("tpot_ms", _F64),
        ("steps", _I32),
        ("itl_p50_ms", _F64),
        ("itl_p90_ms", _F64),
        ("itl_p99_ms", _F64),
        ("step_ms", pa.list_(_F64)),
        ("tokens", pa.list_(_I32)),  # generated per sequence, as the engine counted (v7; null before)
    ]
)
# ops: one row per (profiled run, engine step, op, input shapes and types), omni.ops.
OPS_SCHEMA = pa.schema(
    [
        ("run_id", _STR),
        ("sweep_id", _STR),
        ("arm", _STR),
        ("pass_index", _I32),
        ("step", _I32),
        ("step_kind", _STR),
        ("step_ms", _F64),
        ("op", _STR),
        ("shapes", _STR),
        ("dtypes", _STR),
        ("calls", _I32),
        ("self_ms", _F64),
        ("method", _STR),
        ("distorting", _BOOL),
    ]
)
SIDE_TABLES = {"iterations": ITERATION_SCHEMA, "ops": OPS_SCHEMA}
_SIDE_IDS = ("run_id", "sweep_id", "arm", "pass_index")


def side_path(results_dir: Results, kind: str, sweep_id: str, run_id: str) -> ResultsPath:
    run_path(results_dir, sweep_id, run_id)  # the same checks on the ids
    return results_root(results_dir) / kind / f"sweep={sweep_id}" / f"{run_id}.parquet"


def write_side_table(
    results_dir: Results, kind: str, row: Mapping[str, Any], records: list[Mapping[str, Any]]
) -> ResultsPath:
    """Store a run's records of side table ``kind`` (dicts with its schema's keys)."""
    table_schema = SIDE_TABLES[kind]
    ids = {k: row.get(k) for k in _SIDE_IDS}
    table = pa.Table.from_pylist(
        [{**ids, **{f.name: r.get(f.name) for f in table_schema if f.name not in ids}} for r in records],
        schema=table_schema,
    )
    final = side_path(results_dir, kind, ids["sweep_id"], ids["run_id"])
    if final.exists() and not run_path(results_dir, ids["sweep_id"], ids["run_id"]).exists():
        # left by a store interrupted between the two files: the run never
        # committed, and this rerun replaces it; kept, hidden from readers
        aside = final.parent / f".{final.stem}.{secrets.token_hex(4)}.uncommitted"
        final.move_aside(aside) if isinstance(final, S3Path) else final.rename(aside)
    return write_once(final, table, **({} if table.num_rows > 1 else _ONE_ROW_OPTIONS))


def load_side_table(results_dir: Results, kind: str, sweep_id: str | None = None) -> pd.DataFrame:
    """Every stored record of side table ``kind`` of committed runs, of all sweeps or of one."""
    import pandas as pd

    table_schema = SIDE_TABLES[kind]
    files = _partition_files(results_root(results_dir) / kind, sweep_id)
    # only committed runs: a side file is written just before its run's row
    committed = {(p.parent.name, p.stem) for p in run_files(results_dir, sweep_id)}
    files = [p for p in files if (p.parent.name, p.stem) in committed]
    if not files:
        return pd.DataFrame({f.name: pd.Series(dtype=object) for f in table_schema})
    return pa.concat_tables(read_parquet(p, schema=table_schema) for p in files).to_pandas()


def iterations_path(results_dir: Results, sweep_id: str, run_id: str) -> ResultsPath:
    return side_path(results_dir, "iterations", sweep_id, run_id)


def write_iterations(results_dir: Results, row: Mapping[str, Any], iterations: list[Mapping[str, Any]]) -> ResultsPath:
    return write_side_table(results_dir, "iterations", row, iterations)


def load_iterations(results_dir: Results, sweep_id: str | None = None) -> pd.DataFrame:
    return load_side_table(results_dir, "iterations", sweep_id)


def load_ops(results_dir: Results, sweep_id: str | None = None) -> pd.DataFrame:
    return load_side_table(results_dir, "ops", sweep_id)


def profiled(frame: pd.DataFrame) -> pd.Series:
    """Which rows are profiled passes: True, never null (rows before v5 were none)."""
    return frame["profiled"].eq(True).fillna(False).astype(bool)


def _already_stored(path: ResultsPath) -> OmniError:
    return AlreadyStored(
        f"run file {path} already exists: results are never rewritten; retract the run and record a new attempt instead"
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _partition_entries(dataset: ResultsPath, sweep_id: str | None = None) -> list[tuple[str, str]]:
    """(partition, file name) of ``dataset/sweep=*/*.parquet`` (or one
    sweep's), hidden and temp files left out. Names, not paths: at
    20,000 files making a pathlib path of each costs 0.8 s, more than all
    the rest of a consolidated read."""
    if isinstance(dataset, S3Path):  # one listing of the prefix: of one sweep's, when given
        base, prefix = (dataset / f"sweep={sweep_id}", f"sweep={sweep_id}/") if sweep_id else (dataset, "")
        found = []
        for rel, is_file in base.listing():
            partition, _, name = f"{prefix}{rel}".rpartition("/")
            if is_file and partition.startswith("sweep=") and "/" not in partition:
                found.append((partition, name))
    else:
        if sweep_id is not None:
            partitions = [f"sweep={sweep_id}"]
        else:
            try:
                partitions = [e.name for e in os.scandir(dataset) if e.name.startswith("sweep=") and e.is_dir()]
            except FileNotFoundError:
                return []
        found = []
        for partition in partitions:
            try:
                found += [(partition, e.name) for e in os.scandir(os.path.join(dataset, partition))]
            except (FileNotFoundError, NotADirectoryError):
                continue
    return [(p, n) for p, n in found if n.endswith(".parquet") and not n.startswith((".", "_"))]


def _partition_files(
    dataset: ResultsPath, sweep_id: str | None = None, unless: set[str] = frozenset()
) -> list[ResultsPath]:
    """The files of :func:`_partition_entries`, sorted, but those whose stem is in ``unless``."""
    entries = (e for e in _partition_entries(dataset, sweep_id) if e[1][: -len(".parquet")] not in unless)
    return [dataset / p / n for p, n in sorted(entries)]


def run_files(results_dir: Results, sweep_id: str | None = None, unless: set[str] = frozenset()) -> list[ResultsPath]:
    """Stored run files, of every sweep or of one; hidden temp files left out,
    and those of the run ids in ``unless``."""
    if sweep_id is not None and not _ID.match(sweep_id):
        return []  # no sweep id: nothing of it can be stored
    return _partition_files(results_root(results_dir) / "runs", sweep_id, unless)


def stored_run_ids(results_dir: Results, sweep_id: str) -> set[str]:
    """Run ids already stored for a sweep, from file names alone (for resume)."""
    return {p.stem for p in run_files(results_dir, sweep_id)}


def list_temp_files(results_dir: Results) -> list[Path]:
    """Hidden files left in run partitions, e.g. by a writer that crashed
    (none on S3: a PUT is all or nothing)."""
    runs = results_root(results_dir) / "runs"
    if isinstance(runs, S3Path):
        return []
    return sorted(p for p in runs.glob("sweep=*/.*") if p.is_file())


# --------------------------------------------------------------------- reading


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


UPGRADES: dict[int, Callable[[pa.Table], pa.Table]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
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
    if values.type == col.type or (pa.types.is_dictionary(values.type) and values.type.value_type == col.type):
        return values  # as stored, or (scan()) dictionary-encoded
    try:
        return values.cast(col.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise OmniError(f"column {col.name!r}: cannot read {values.type} as {col.type}: {err}") from err


def _pandas_types() -> dict:
    """Nullable pandas dtypes, so an int column with a null stays an int column."""
    import pandas as pd

    return {
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }


def load_runs(results_dir: Results, sweep_id: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
    """Every stored run (or one sweep's) as one DataFrame with the registry's columns.

    Each file is read on its own and upgraded, so files of different schema
    versions load together. Ints and bools use pandas' nullable dtypes,
    timestamps are UTC-aware, list columns hold arrays. ``columns`` keeps
    only those (after the upgrade).
    """
    if columns is not None:
        unknown = [c for c in columns if c not in COLUMNS_BY_NAME]
        if unknown:
            raise OmniError(f"unknown column(s) {unknown}; see omni.store.COLUMNS")
    return read_table(results_dir, sweep_id, columns).to_pandas(types_mapper=_pandas_types().get)


# Few distinct values per column: scan() keeps them dictionary-encoded, three
# times faster to read than plain strings.
CATEGORICAL = (
    "sweep_id",
    "sweep_name",
    "arm",
    "status",
    "engine",
    "engine_env",
    "model",
    "host",
    "dtype",
    "quantization",
    "compile_mode",
    "binding_method",
)


def read_table(results_dir: Results, sweep_id: str | None = None, columns: list[str] | None = None) -> pa.Table:
    """:func:`load_runs` as an Arrow table: every stored row once, from the
    consolidated files, the compacted parts none holds, and the run files no
    part holds (one sweep's: its parts and run files). Files are read on a
    thread pool (Parquet decoding and S3 reads release the GIL), each
    upgraded on its own."""
    results_dir = results_root(results_dir)  # once: parts are named relative to it
    asked = None if columns is None else list(dict.fromkeys([*columns, "run_id"]))
    consolidated = consolidated_files(results_dir) if sweep_id is None else []
    held = held_parts(results_dir, consolidated)
    tables = _read_all(consolidated, asked)
    tables += _read_all(
        [p for p in compacted_parts(results_dir, sweep_id) if part_name(results_dir, p) not in held], asked
    )
    covered = set().union(*(t.column("run_id").to_pylist() for t in tables)) if tables else set()
    tables += _read_all(run_files(results_dir, sweep_id, unless=covered), asked)
    if not tables:
        empty = schema().empty_table()
        return empty if columns is None else empty.select(columns)
    table = pa.concat_tables(tables)
    return table if columns is None else table.select(columns)


# Files readers skipped in this process because they are no Parquet a writer
# finished (truncated, zero bytes, foreign): path -> why. Summaries list them.
UNREADABLE: dict[str, str] = {}
_UNREADABLE_LOCK = threading.Lock()
log = logging.getLogger("omni.store")


def unreadable_under(results_dir: Results) -> dict[str, str]:
    root = str(results_root(results_dir))
    with _UNREADABLE_LOCK:
        return {path: why for path, why in UNREADABLE.items() if path.startswith(root)}


def _read_all(files: list[ResultsPath], columns: list[str] | None, dictionary: bool = False) -> list[pa.Table]:
    from concurrent.futures import ThreadPoolExecutor

    if len(files) < 2:
        tables = [_read_run_file(p, columns, dictionary) for p in files]
    else:
        workers = 16 if isinstance(files[0], S3Path) else min(8, (os.cpu_count() or 1) + 1)  # S3: waits, not CPU
        with ThreadPoolExecutor(max_workers=workers) as pool:
            tables = list(pool.map(lambda path: _read_run_file(path, columns, dictionary), files))
    return [t for t in tables if t is not None]


def scan(results_dir: Results, columns: list[str], skip: set[ResultsPath] = frozenset()) -> pa.Table:
    """Many rows fast: multi-threaded Arrow dataset scans of ``columns`` over
    the consolidated files and compacted parts, then the run files none holds,
    the :data:`CATEGORICAL` columns dictionary-encoded. Files in ``skip``
    (run files or parts, e.g. a retracted sweep's:
    :func:`omni.retract.exclusions`) are not read. Files of an older schema
    version (or that a dataset cannot read as the current schema) go through
    :func:`read_table`'s per-file upgrade instead."""
    results_dir = results_root(results_dir)  # once: parts are named relative to it
    consolidated = [p for p in consolidated_files(results_dir) if p not in skip]
    held = held_parts(results_dir, consolidated)
    parts = [p for p in compacted_parts(results_dir) if p not in skip and part_name(results_dir, p) not in held]
    compacted = _scan_files(consolidated + parts, list(dict.fromkeys([*columns, "run_id"])))
    covered = set(compacted.column("run_id").to_pylist())
    rest = _scan_files([p for p in run_files(results_dir, unless=covered) if p not in skip], columns)
    return pa.concat_tables([compacted.select(columns), rest], promote_options="permissive")


def _scan_files(files: list[ResultsPath], columns: list[str]) -> pa.Table:
    import pyarrow.dataset as ds

    full = schema()
    wanted = [*columns, "schema_version"]
    categorical = [c for c in wanted if c in CATEGORICAL]
    # only the columns asked for, in the schema and the dictionary list alike:
    # each extra one costs every file a little
    encoded = pa.schema(
        [
            pa.field(c, pa.dictionary(pa.int32(), full.field(c).type)) if c in categorical else full.field(c)
            for c in wanted
        ],
        metadata=full.metadata,
    )
    if not files:
        return encoded.empty_table().select(columns)
    fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=categorical))
    filesystem = arrow_source(files[0])[1]
    try:
        table = ds.dataset(
            [arrow_source(p)[0] for p in files], format=fmt, schema=encoded, filesystem=filesystem
        ).to_table(columns=wanted, batch_size=1 << 20)
        versions = pc.unique(table["schema_version"]).to_pylist()
    except (pa.ArrowException, OSError):
        versions = None
    if versions is None or any(v != SCHEMA_VERSION for v in versions):
        tables = [_encoded(t, encoded) for t in _read_all(files, columns, dictionary=True)]
        return pa.concat_tables(tables, promote_options="permissive")
    return table.select(columns)


def _encoded(table: pa.Table, encoded: pa.Schema) -> pa.Table:
    """The categorical columns of an upgraded file dictionary-encoded like a scan's
    (a column an old file lacks comes back as plain nulls)."""
    for i, name in enumerate(table.column_names):
        want = encoded.field(name).type
        if table.schema.field(i).type != want:
            values = table.column(i)
            if pa.types.is_dictionary(values.type):
                values = values.cast(want.value_type)
            table = table.set_column(i, name, pc.dictionary_encode(values).cast(want))
    return table


def _parquet_file(path: ResultsPath, **options: Any) -> pq.ParquetFile:
    source, filesystem = arrow_source(path)
    return pq.ParquetFile(filesystem.open_input_file(source) if filesystem else source, **options)


def _open(path: ResultsPath, dictionary: bool) -> pq.ParquetFile:
    if not dictionary:
        return _parquet_file(path)
    try:
        return _parquet_file(path, read_dictionary=list(CATEGORICAL))
    except KeyError:  # an old file lacking some of them
        present = set(_parquet_file(path).schema_arrow.names)
        return _parquet_file(path, read_dictionary=[c for c in CATEGORICAL if c in present])


def _read_run_file(path: ResultsPath, columns: list[str] | None = None, dictionary: bool = False) -> pa.Table | None:
    """One file, upgraded; with ``columns``, only those are read (upgrades see
    the projected table: one that derives a column from others must ask for them).
    None for a file that is no finished Parquet (truncated, empty, foreign):
    skipped with a warning naming it (:data:`UNREADABLE`). omni's writers
    never leave one, so it came from elsewhere. An I/O error is raised, not
    skipped: a flaky disk or network must not silently drop rows."""
    try:
        parquet = _open(path, dictionary)
        if columns is None:
            table = parquet.read()
        else:
            wanted = {*columns, "schema_version"}
            table = parquet.read(columns=[n for n in parquet.schema_arrow.names if n in wanted])
    except pa.ArrowInvalid as err:
        with _UNREADABLE_LOCK:
            UNREADABLE[str(path)] = str(err).splitlines()[0]
        log.warning("skipped %s: not a readable Parquet file (%s); move it out of the results", path, err)
        return None
    except (OSError, pa.ArrowException) as err:
        raise OmniError(f"cannot read run file {path}: {err}; move it aside to go on") from err
    try:
        return upgrade_table(table, columns)
    except OmniError as err:
        raise OmniError(f"{path}: {err}") from None


def run_file_of(results_dir: Results, run_id: str) -> ResultsPath | None:
    """The stored file of a run id, whichever sweep it belongs to."""
    if not isinstance(run_id, str) or not _ID.match(run_id):
        return None
    found = [p for p in run_files(results_dir) if p.stem == run_id]
    return found[0] if found else None


# ------------------------------------------------------------------ compaction

# A finished sweep's rows, copied into one file: ``compacted/sweep=<id>/part-NNNN.parquet``.
# The run files stay (each is its run's commit, never deleted); readers take
# a sweep's parts and only the run files no part holds, so a row is counted
# once. Parts of one sweep are disjoint: each holds the rows no earlier part
# holds (a late row, a resumed run), and a part's name is claimed with the
# same never-replace write as a run file, so two compactions racing cannot
# both write part N: the loser looks again and writes what is still missing.
# Parts live beside runs/, not in it, so ``pd.read_parquet("results/runs")``
# still reads each row once, from its run file.
COMPACTED = "compacted"


class AlreadyStored(OmniError):
    """A results file that exists already: never replaced."""


def compacted_parts(results_dir: Results, sweep_id: str | None = None) -> list[ResultsPath]:
    return _partition_files(results_root(results_dir) / COMPACTED, sweep_id)


def compact_sweep(results_dir: Results, sweep_id: str, attempts: int = 5) -> ResultsPath | None:
    """Copy the sweep's rows that no part holds yet into its next part; None
    when there is nothing new. Run files are only read."""
    for _ in range(attempts):
        parts = compacted_parts(results_dir, sweep_id)
        covered = {rid for p in parts for rid in read_parquet(p, columns=["run_id"]).column("run_id").to_pylist()}
        fresh = run_files(results_dir, sweep_id, unless=covered)
        if not fresh:
            return None
        table = pa.concat_tables(_read_all(fresh, None)).sort_by(
            [("order_index", "ascending"), ("run_id", "ascending")]
        )
        number = 1 + max((int(p.stem.split("-")[1]) for p in parts), default=-1)
        final = results_root(results_dir) / COMPACTED / f"sweep={sweep_id}" / f"part-{number:04d}.parquet"
        try:
            return write_once(final, table.cast(file_schema()), compression="zstd")
        except AlreadyStored:
            continue  # another compaction wrote part N first: what is left goes in N+1
    raise OmniError(f"sweep {sweep_id}: {attempts} compactions raced this one; run omni compact again")


def compact_all(results_dir: Results) -> list[ResultsPath]:
    """:func:`compact_sweep` for every sweep with run files, then
    :func:`consolidate`; the files written."""
    sweeps = sorted({p.parent.name.removeprefix("sweep=") for p in run_files(results_dir)})
    written = [part for sweep_id in sweeps if (part := compact_sweep(results_dir, sweep_id)) is not None]
    return written + [f for f in [consolidate(results_dir)] if f is not None]


# Level two: a year of nightlies is 400 parts, and opening 400 files of 130
# columns costs seconds (footers and column set-up, measured: 2.7 s for
# 20,000 rows in 400 parts, DuckDB 1.7 s). When CONSOLIDATE_AT parts are held
# by no consolidated file, their rows are copied into the next
# ``consolidated/NNNNNN.parquet``, whose metadata names the parts it holds.
# Readers take the consolidated files, then the parts none holds: disjoint
# again, so no row is counted twice, and nothing is rewritten or deleted.
CONSOLIDATED = "consolidated"
CONSOLIDATE_AT = 20
_HOLDS = b"omni.parts"


def consolidated_files(results_dir: Results) -> list[ResultsPath]:
    folder = results_root(results_dir) / CONSOLIDATED
    files = folder.glob("*.parquet") if isinstance(folder, S3Path) else sorted(folder.glob("*.parquet"))
    return [p for p in files if not p.name.startswith((".", "_"))]


def part_name(results_dir: Results, part: ResultsPath) -> str:
    """A part as consolidated files name it: ``compacted/sweep=<id>/part-NNNN.parquet``."""
    return str(part.relative_to(results_root(results_dir)))


def held_parts(results_dir: Results, consolidated: list[ResultsPath]) -> set[str]:
    """The parts (:func:`part_name`) whose rows these consolidated files hold."""
    held: set[str] = set()
    for path in consolidated:
        meta = _parquet_file(path).schema_arrow.metadata or {}
        held.update(json.loads(meta.get(_HOLDS, b"[]")))
    return held


def consolidate(results_dir: Results, at: int = CONSOLIDATE_AT, attempts: int = 5) -> ResultsPath | None:
    """Copy the rows of the parts no consolidated file holds into the next
    one, when there are at least ``at`` such parts; else None."""
    root = results_root(results_dir)
    for _ in range(attempts):
        files = consolidated_files(root)
        held = held_parts(root, files)
        loose = [p for p in compacted_parts(root) if part_name(root, p) not in held]
        if len(loose) < at:
            return None
        table = pa.concat_tables(_read_all(loose, None)).cast(file_schema())
        holds = json.dumps([part_name(root, p) for p in loose]).encode()
        table = table.replace_schema_metadata({**file_schema().metadata, _HOLDS: holds})
        number = 1 + max((int(p.stem) for p in files), default=-1)
        try:
            return write_once(root / CONSOLIDATED / f"{number:06d}.parquet", table, compression="zstd")
        except AlreadyStored:
            continue  # another consolidation took that number: look again
    raise OmniError(f"{attempts} consolidations raced this one; run omni compact again")


__all__ = [
    "AlreadyStored",
    "compact_all",
    "compact_sweep",
    "compacted_parts",
    "consolidate",
    "consolidated_files",
    "held_parts",
    "part_name",
    "file_schema",
    "read_parquet",
    "write_once",
    "BINDING_METHODS",
    "COLUMNS",
    "COLUMNS_BY_NAME",
    "Column",
    "REQUIRED",
    "SCHEMA_VERSION",
    "STATUSES",
    "ITERATION_SCHEMA",
    "OPS_SCHEMA",
    "SIDE_TABLES",
    "UPGRADES",
    "iterations_path",
    "load_ops",
    "load_side_table",
    "profiled",
    "side_path",
    "write_side_table",
    "load_iterations",
    "list_temp_files",
    "load_runs",
    "read_table",
    "run_file_of",
    "run_files",
    "write_iterations",
    "scan",
    "run_path",
    "schema",
    "stored_run_ids",
    "upgrade_table",
    "validate_row",
    "write_run",
]
