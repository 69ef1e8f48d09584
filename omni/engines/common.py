"""What every real engine does the same way: prompts, token times, the profiler's overhead.

Standard library only (runs inside engine envs).
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
import time
from collections.abc import Iterable

FIRST_WORD_ID = 259  # after <unk> <s> </s> and the 256 byte tokens of omni's models

# the ``method`` of a llama.cpp op profile (omni.measure.ops reads it)
GGML_EVAL_CALLBACK = "ggml eval callback"


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


class TokenClock:
    """One generation's token times as a client sees them, in seconds from its
    start: per sequence, when each of its tokens arrived (``token_s``), and
    when each engine step returned, whether it delivered a token or not
    (``step_end_s``). The raw times :mod:`omni.measure.iterations` derives every
    per-request figure from, kept the same way by every engine."""

    def __init__(self, batch: int) -> None:
        self.t0 = time.perf_counter()
        self.token_s: list[list[float]] = [[] for _ in range(batch)]
        self.step_end_s: list[float] = []

    def step(self, delivered: Iterable[tuple[int, int]]) -> float:
        """An engine step has just returned, delivering ``(sequence, tokens)``;
        returns its time."""
        now = time.perf_counter() - self.t0
        self.step_end_s.append(now)
        for seq, n in delivered:
            self.token_s[seq].extend([now] * n)  # delivered together: one time
        return now

    def raw(self) -> dict:
        return {"token_s": self.token_s, "step_end_s": self.step_end_s}


def profile_overhead(untraced: list[dict], traced_step_s: list[float]) -> float | None:
    """Median decode step while traced over median decode step untraced, one
    process: ``untraced`` are the timed iterations (their ``step_s``)."""
    plain = [s for it in untraced for s in it["step_s"]]
    if not plain or not traced_step_s:
        return None
    return statistics.median(traced_step_s) / statistics.median(plain)
