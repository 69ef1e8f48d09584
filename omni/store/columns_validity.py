"""The run registry's columns of whether a row's numbers can be trusted (group
validity): its warnings and the rules that raised them, the token and
repeat audits, and the output head as loaded against what was claimed of it.
Assembled in order by :mod:`omni.store.columns`.
"""

from __future__ import annotations

from omni.store.column_type import F64, I32, STR, STRS, Column, declare

VALIDITY: tuple[Column, ...] = declare(
    "validity",
    ("warnings", STRS, None, "reasons to doubt this row's numbers"),
    ("warning_rules", STRS, None, "the rule that raised each warning, same order"),
    (
        "tokens_mismatch_iterations",
        I32,
        None,
        "timed iterations in which a sequence generated other than "
        "max_tokens, as the engine counted them (each iteration's counts: results/iterations tokens); "
        "above 0 the run is invalid (tokens_mismatch); null: not counted (v7)",
    ),
    (
        "audit_repeat_ttft_ratio",
        F64,
        None,
        "median TTFT of timed iterations 1.. (repeats of iteration 0's "
        "prompts) over the faster first sight: iteration 0's, or audit_fresh_ttft_ms; well below 1, a cache "
        "served the repeats (repeat_faster); null below 3 iterations (v7)",
    ),
    (
        "audit_fresh_ttft_ms",
        F64,
        "ms",
        "TTFT of a batch of fresh prompts the engine timed once after the "
        "timed iterations, the second first sight of the repeat audit; not in any metric (v7)",
    ),
    (
        "audit_repeat_ttft_cv",
        F64,
        None,
        "robust CV of the TTFT of timed iterations 1.., the noise repeat_faster allows for (v7)",
    ),
    (
        "head_weight_type",
        STR,
        None,
        "the output head's weight type as the engine loaded it (the tied embedding when there is no "
        "separate head): vLLM the lm_head weight's torch dtype, or the quantization method when its "
        "method is not unquantized (cpu_int4); llama.cpp output.weight's GGUF tensor type (q6_K, f16...); "
        "null: not reported (v10)",
    ),
    (
        "head_claim",
        STR,
        None,
        "what was claimed about the output head and by whom, 'arm: ...' (quantization, int4_lm_head, "
        "gguf) or 'model: ...' (config.json quantization_config, GGUF general.file_type): a claim that "
        "it is quantized if any, else the first; null: none made. Quantized claim + dense head "
        "(f32/f16/bf16) = invalid (dense_head) (v10)",
    ),
    (
        "quantization_seen",
        STR,
        None,
        "the quantization the engine applied, whatever the arm said: vLLM model_config.quantization, "
        "llama.cpp the GGUF's general.file_type (MOSTLY_Q4_0...); null: none, or not reported (v10)",
    ),
)
