"""The run registry's columns of a run against its slot's roofs (group
roofs): the bytes and FLOPs per token the model implies at the run's shape
(:mod:`omni.measure.traffic`), the slot's measured limits it was judged
against (:mod:`omni.host.limits`, keyed by ``roof_limits_key``), and per
phase the roof that binds and the share of it reached
(:mod:`omni.measure.roofline`). Null for the synthetic engine, serving arms
and models the bytes model does not read; ``roof_note`` says why. Assembled
in order by :mod:`omni.store.columns`.
"""

from __future__ import annotations

from omni.store.column_type import F64, I64, STR, declare

ROOF_NAMES = ("dram", "cache", "compute")

ROOFS = declare(
    "roofs",
    (
        "decode_bytes_per_token",
        F64,
        "B",
        "bytes one decoded token reads: every weight but the token table, as stored, once per step over the batch, "
        "plus one table row and the KV cache at the mean decode depth prompt_len + max_tokens/2 (v19)",
    ),
    (
        "decode_working_set_bytes",
        F64,
        "B",
        "what one decode step of the whole batch reads (weights, table rows, KV): against roof_llc_bytes it "
        "picks the cache or the DRAM roof (v19)",
    ),
    ("decode_flops_per_token", F64, "FLOP", "2 x (layer + head weights) + attention at the mean decode depth (v19)"),
    (
        "prefill_bytes_per_token",
        F64,
        "B",
        "the weights once per batch prefill over its prompt tokens, plus a table row and the KV written (v19)",
    ),
    (
        "prefill_flops_per_token",
        F64,
        "FLOP",
        "2 x layer weights + 2 x head weights / prompt_len (the head runs on the last prompt token) + causal "
        "attention at the prompt's length (v19)",
    ),
    ("roof_limits_key", STR, None, "the slot's limits record the roofs come from (omni host limits) (v19)"),
    ("roof_dram_bytes_s", F64, "B/s", "the slot's measured read bandwidth from its own node, median (v19)"),
    ("roof_cache_bytes_s", F64, "B/s", "the slot's measured last-level cache read bandwidth, median (v19)"),
    ("roof_llc_bytes", I64, "B", "the last-level cache the slot's threads reach (v19)"),
    ("roof_compute_flop_s", F64, "FLOP/s", "the measured matmul peak of roof_compute_dtype, median (v19)"),
    ("roof_compute_dtype", STR, None, "the dtype the model's matmuls run in: fp32, bf16 or int8 (v19)"),
    (
        "decode_roof",
        STR,
        None,
        "the roof that binds decode: cache when one step's working set fits the last-level cache, else dram, "
        "or compute (v19)",
        {"choices": ROOF_NAMES},
    ),
    (
        "decode_roof_share",
        F64,
        None,
        "decode_flops_per_token x decode_tok_s over the attainable rate under decode_roof; for a memory roof "
        "the achieved bandwidth over the measured one (v19)",
    ),
    ("prefill_roof", STR, None, "the roof that binds prefill (v19)", {"choices": ROOF_NAMES}),
    ("prefill_roof_share", F64, None, "prefill_flops_per_token x prefill_tok_s over the attainable rate (v19)"),
    ("roof_note", STR, None, "why the roof columns are null, or which assumption a share above 1 broke (v19)"),
)
