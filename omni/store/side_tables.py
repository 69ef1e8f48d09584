"""The side tables' Arrow schemas: one row per timed iteration of a run, one
per profiled op. Each run's rows are one file in
``results/<kind>/sweep=<id>/<run_id>.parquet``, written just before the run's
own row (the run row is the commit: a side file without one is a run that
never finished storing); :mod:`omni.store.writing` writes them, :mod:`omni.store.reading`
reads them.
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
# ops: one row per (profiled run, engine step, op, input shapes and types), omni.measure.ops.
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
# levels: one row per load level of a serving run (omni.serving.levels): a level is
# one of the run's iterations, so a verdict per level has runs (passes) as its units
_LEVEL_SERIES = ("ttft", "tpot", "itl", "e2e")
_PCTS = [(f"{m}_p{q}_ms", _F64) for m in _LEVEL_SERIES for q in (50, 90, 99)]
# since v13 of the runs: the values each percentile is over, and each percentile's 95 %
# upper confidence bound (omni.stats.quantiles; null where the count cannot bound it); null before
_BOUNDS = [(f"{m}_samples", _I32) for m in _LEVEL_SERIES] + [
    (f"{m}_p{q}_upper95_ms", _F64) for m in _LEVEL_SERIES for q in (50, 90, 99)
]
LEVEL_SCHEMA = pa.schema(
    [
        ("run_id", _STR),
        ("sweep_id", _STR),
        ("arm", _STR),
        ("pass_index", _I32),
        ("level", _STR),
        ("load_kind", _STR),
        ("load_value", _F64),
        ("order", _I32),
        ("requests", _I32),
        ("failed", _I32),
        ("duration_s", _F64),
        # v16, null before (every figure was then over all the level's requests): the steady window the
        # figures are over (omni.serving.levels.steady_window), from the first completion to the last
        # start; the requests in it (failures wherever they happened) and those left out
        ("window_s", _F64),
        ("window_requests", _I32),
        ("excluded_requests", _I32),
        ("extended", _BOOL),  # run a second time for load.min_duration_s; the longer attempt kept (v16)
        ("request_s", _F64),
        ("output_tok_s", _F64),
        ("goodput_req_s", _F64),
        # v16, null before: throughput by vllm bench serve's definition, every request over its whole
        # duration, first wave and drain included (omni.serving.levels.bench_figures)
        ("bench_output_tok_s", _F64),
        ("bench_request_s", _F64),
        *_PCTS,
        *_BOUNDS,
        ("asked_rate", _F64),
        ("sent_rate", _F64),
        ("achieved_rate", _F64),
        ("max_in_flight", _I32),
        ("client_cpu_pct", _F64),
        ("client_thread_pct", _F64),
        # v16, null before: sampled every 0.5 s between the client's marks, other work on its CPUs (its mean
        # share of them; the busiest CPU's worst 0.5 s+ window, of one CPU) and CPUs not its own it ran on
        ("client_foreign_cpu_pct", _F64),
        ("client_foreign_cpu_peak_pct", _F64),
        ("client_cpus_outside", pa.list_(_I32)),
        ("client_prompt_tokens", _F64),
        ("server_prompt_tokens", _F64),
        ("output_tokens_check", _STR),
        ("flags", pa.list_(_STR)),
        ("slo_met", _BOOL),  # since v13 on the upper bounds: null where not established (slo_verdict)
        ("slo_verdict", _STR),  # met, not_met, not_established; null: not judged (v13)
        # the highest percentile (in percent: 91.06 from 32) the level's TTFT and TPOT counts bound
        # at 95 % (omni.serving.slo.slo_reach): below the SLO's percentile, too few requests are why
        # it is not established; null where no request succeeded, and before v16
        ("slo_reach", _F64),
        ("server_metrics", _STR),
        ("searched", _BOOL),  # chosen by the arm's capacity search (omni.serving.search); null before v16
    ]
)
# requests: one row per measured request of a serving level
REQUEST_SCHEMA = pa.schema(
    [
        ("run_id", _STR),
        ("sweep_id", _STR),
        ("arm", _STR),
        ("pass_index", _I32),
        ("level", _STR),
        ("request", _I32),
        ("input_tokens", _I32),
        ("output_tokens", _I32),
        ("ok", _BOOL),
        ("error", _STR),
        ("ttft_ms", _F64),
        ("tpot_ms", _F64),
        ("e2e_ms", _F64),
        ("itl_ms", pa.list_(_F64)),
        ("start_s", _F64),
        ("queue_ms", _F64),
        ("in_window", _BOOL),  # counted in its level's figures (its steady window, or failed); null before v16
    ]
)
SIDE_TABLES = {"iterations": ITERATION_SCHEMA, "ops": OPS_SCHEMA, "levels": LEVEL_SCHEMA, "requests": REQUEST_SCHEMA}
