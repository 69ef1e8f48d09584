"""What every real engine does the same way: prompts, derived rates, the profiler's overhead.

Standard library only (runs inside engine envs).
"""

from __future__ import annotations

import random
import statistics

FIRST_WORD_ID = 259  # after <unk> <s> </s> and the 256 byte tokens of omni's models


def token_prompts(batch: int, prompt_len: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``batch`` distinct prompts of ``prompt_len`` token ids, the same every run.

    Distinct per sequence so that no engine can serve one prefill from
    another's cache; ids below 10000 as ``vllm bench latency`` draws them,
    kept inside the model's vocabulary.
    """
    rng = random.Random(seed)
    high = min(vocab, 10000) - 1
    return [[rng.randint(FIRST_WORD_ID, high) for _ in range(prompt_len)] for _ in range(batch)]


def rates(batch: int, prompt_len: int, max_tokens: int, ttft_s: float, e2e_s: float) -> dict:
    """Same definitions for every engine.

    TTFT is the time to the first generated token of the batch (the prefill);
    decode covers the remaining ``max_tokens - 1`` steps.
    """
    decode_s = e2e_s - ttft_s
    return {
        "ttft_ms": ttft_s * 1000,
        "prefill_tok_s": batch * prompt_len / ttft_s if ttft_s > 0 else None,
        "decode_tok_s": batch * (max_tokens - 1) / decode_s if max_tokens > 1 and decode_s > 0 else None,
        "e2e_s": e2e_s,
    }


def profile_overhead(untraced: list[dict], traced_step_s: list[float]) -> float | None:
    """Median decode step while traced over median decode step untraced, one
    process: ``untraced`` are the timed iterations (their ``step_s``)."""
    plain = [s for it in untraced for s in it["step_s"]]
    if not plain or not traced_step_s:
        return None
    return statistics.median(traced_step_s) / statistics.median(plain)
