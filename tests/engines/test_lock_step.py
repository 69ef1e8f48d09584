"""Per-request timing on real vLLM at its CPU suite's prompts, 2048 in at batch 8 (16 out:
tests/engines/arms.py LONG_ARMS, in the shared eager sweep): omni's default step budget holds the
whole prefill and the batch decodes in lock step; a budget of 2048 tokens chunks the prefill over
the first steps, which the row flags (not_lock_step) while every request keeps figures that follow
from its own stored token times."""

from __future__ import annotations

import pytest

from omni.store.reading import load_iterations
from tests.engines.arms import LONG_ARM

pytestmark = pytest.mark.slow


def per_request(it) -> tuple[list[list[float]], list[float], list[float]]:
    tokens = [list(seq) for seq in it["token_ms"]]
    return tokens, list(it["req_ttft_ms"]), list(it["req_tpot_ms"])


def test_a_chunked_prefill_is_flagged_and_each_request_timed_from_its_tokens(eager_vllm):
    whole, chunked = eager_vllm.row("long"), eager_vllm.row("long-chunked")
    assert whole["status"] == chunked["status"] == "ok", (whole["error"], chunked["error"])
    assert whole["engine_config"]["max_num_batched_tokens"] == 8 * 2048
    assert chunked["engine_config"]["max_num_batched_tokens"] == 2048 and chunked["engine_config"]["chunked_prefill"]
    assert whole["lock_step"] is True and whole["partial_steps"] == 0
    assert "not_lock_step" not in whole["warning_rules"]
    # one prompt a step at most: the eighth sequence waits at least 7 steps for its first token
    assert chunked["lock_step"] is False and chunked["partial_steps"] >= 7 * chunked["iterations"]
    assert "not_lock_step" in chunked["warning_rules"]
    n = LONG_ARM["max_tokens"]
    its = load_iterations(eager_vllm.results, eager_vllm.sweep_id).set_index(["arm", "iteration"])
    for arm in ("long", "long-chunked"):
        for i in range(LONG_ARM["params"]["iterations"]):
            it = its.loc[(arm, i)]
            tokens, ttft, tpot = per_request(it)
            assert [len(seq) for seq in tokens] == list(it["tokens"]) == [n] * 8
            assert ttft == [seq[0] for seq in tokens] and it["ttft_ms"] == pytest.approx(max(ttft))
            assert tpot == pytest.approx([(seq[-1] - seq[0]) / (n - 1) for seq in tokens])
            assert list(it["req_e2e_ms"]) == [seq[-1] for seq in tokens]
            assert sum(it["step_tokens"]) == 8 * n
            span_s = (max(seq[-1] for seq in tokens) - min(ttft)) / 1000
            assert it["decode_tok_s"] == pytest.approx(8 * (n - 1) / span_s)
    _, whole_ttft, _ = per_request(its.loc[("long", 0)])
    _, split_ttft, _ = per_request(its.loc[("long-chunked", 0)])
    assert len(set(whole_ttft)) == 1  # one prefill step: every first token at once
    assert split_ttft == sorted(split_ttft) and len(set(split_ttft)) == 8  # one after another, in order
    assert chunked["ttft_p50_ms"] < chunked["ttft_ms"]  # the median request waited less than the last
