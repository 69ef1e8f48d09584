"""The side tables' Arrow schemas: one row per timed iteration of a run, one
per profiled op. Each run's rows are one file in
``results/<kind>/sweep=<id>/<run_id>.parquet``, written just before the run's
own row (the run row is the commit: a side file without one is a run that
never finished storing); :mod:`omni.store` reads and writes them.
"""

from __future__ import annotations

import pyarrow as pa

_STR = pa.string()
_I32 = pa.int32()
_F64 = pa.float64()
_BOOL = pa.bool_()

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
        # v10, null before: per request (sequence, in prompt order) its first token, its TPOT (null for
        # one token) and its last token; every token's time per request (ms from the iteration's start);
        # tokens delivered by each engine step; steps short of a sequence not yet done; none of those
        ("req_ttft_ms", pa.list_(_F64)),
        ("req_tpot_ms", pa.list_(_F64)),
        ("req_e2e_ms", pa.list_(_F64)),
        ("token_ms", pa.list_(pa.list_(_F64))),
        ("step_tokens", pa.list_(_I32)),
        ("partial_steps", _I32),
        ("lock_step", _BOOL),
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
