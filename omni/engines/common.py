"""What every real engine does the same way: prompts, derived rates, the profiler's overhead.

Standard library only (runs inside engine envs).
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics

FIRST_WORD_ID = 259  # after <unk> <s> </s> and the 256 byte tokens of omni's models


def token_prompts(batch: int, prompt_len: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``batch`` distinct prompts of ``prompt_len`` token ids, the same every run.

    Distinct per sequence so that no engine can serve one prefill from
    another's cache; ids below 10000 as ``vllm bench latency`` draws them,
    kept inside the model's vocabulary.
    """
    return _draw(seed, batch, prompt_len, vocab)


def _draw(seed: int | str, batch: int, prompt_len: int, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)
    high = min(vocab, 10000) - 1
    return [[rng.randint(FIRST_WORD_ID, high) for _ in range(prompt_len)] for _ in range(batch)]


def warmup_prompts(batch: int, prompt_len: int, vocab: int, prompt_seed: int, index: int) -> list[list[int]]:
    """The ``index``-th warm-up batch: never the timed prompts of any
    ``prompt_seed`` (a text seed, outside the integers those use), so the first
    timed iteration is the first time its prompts are seen (the repeat_faster
    audit reads it so)."""
    return _draw(f"omni-warmup:{prompt_seed}:{index}", batch, prompt_len, vocab)


def fresh_prompts(batch: int, prompt_len: int, vocab: int, prompt_seed: int) -> list[list[int]]:
    """A batch never seen before, timed once after the timed iterations: the
    second first sight the repeat_faster audit compares the repeats with (a
    slow iteration 0 alone may be noise, or a cold start)."""
    return _draw(f"omni-fresh:{prompt_seed}", batch, prompt_len, vocab)


def prompts_digest(prompts: list[list[int]]) -> str:
    """sha256 of the timed prompts' token ids: which prompts a run timed."""
    return hashlib.sha256(json.dumps(prompts, separators=(",", ":")).encode()).hexdigest()


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
