"""omni.measure.iterations: raw engine times -> per-iteration and per-run metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from omni.measure.iterations import iteration_metrics, partial_step_counts, percentile, run_metrics


@pytest.mark.parametrize("values", [[3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], list(np.linspace(1, 7, 31) ** 2)])
@pytest.mark.parametrize("q", [0, 50, 90, 99, 100])
def test_percentile_is_numpys_linear(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing():
    assert percentile([], 50) is None


def test_one_iteration_definitions():
    # batch 2, prompt 100, 5 tokens: first token at 50 ms, four steps of 10 ms
    m = iteration_metrics(2, 100, 5, {"ttft_s": 0.05, "e2e_s": 0.09, "step_s": [0.01] * 4})
    assert m["ttft_ms"] == pytest.approx(50) and m["prefill_tok_s"] == pytest.approx(4000)
    assert m["decode_tok_s"] == pytest.approx(2 * 4 / 0.04) and m["tpot_ms"] == pytest.approx(10)
    assert m["steps"] == 4 and m["itl_p50_ms"] == pytest.approx(10) and m["step_ms"] == pytest.approx([10] * 4)


def test_one_token_has_no_decode():
    m = iteration_metrics(1, 8, 1, {"ttft_s": 0.02, "e2e_s": 0.02, "step_s": []})
    assert m["decode_tok_s"] is None and m["tpot_ms"] is None and m["itl_p99_ms"] is None


def test_run_keeps_median_spread_and_pooled_itl():
    raws = [
        {"ttft_s": t, "e2e_s": t + 0.04, "step_s": [0.01, 0.01, 0.01, s]}
        for t, s in [(0.05, 0.01), (0.06, 0.01), (0.04, 0.05)]
    ]
    row, per = run_metrics(1, 10, 5, raws)
    assert row["iterations"] == 3 and [p["iteration"] for p in per] == [0, 1, 2]
    assert row["ttft_ms"] == pytest.approx(50)  # median of 40, 50, 60
    logs = np.log([50.0, 60.0, 40.0])
    assert row["ttft_ms_iter_sd_log"] == pytest.approx(float(np.std(logs, ddof=1)))
    steps = [10, 10, 10, 10] * 2 + [10, 10, 10, 50]
    assert row["itl_p99_ms"] == pytest.approx(float(np.percentile(steps, 99)))  # over every step of every iteration
    assert row["itl_p50_ms"] == pytest.approx(10)
    assert math.isclose(row["e2e_s"], 0.09)
    # 12 gaps and 3 requests: the p99 is stated, with its count; no 95 % bound below 299 values
    assert (row["itl_samples"], row["ttft_samples"], row["tpot_samples"]) == (12, 3, 3)
    assert row["itl_p99_upper95_ms"] is None and row["ttft_p99_upper95_ms"] is None


def test_a_run_of_enough_gaps_states_the_upper_bound_of_its_itl_p99():
    # 8 iterations of 40 steps: 320 gaps, two of them slow; the bound is the 320th, the slowest
    raws = [{"ttft_s": 0.05, "e2e_s": 0.5, "step_s": [0.01] * 39 + [slow]} for slow in [0.04, 0.035] + [0.01] * 6]
    row, _ = run_metrics(1, 10, 41, raws)
    assert row["itl_samples"] == 320 and row["itl_p99_ms"] == pytest.approx(10)
    assert row["itl_p99_upper95_ms"] == pytest.approx(40)


def test_one_iteration_has_no_spread():
    row, _ = run_metrics(1, 10, 3, [{"ttft_s": 0.01, "e2e_s": 0.03, "step_s": [0.01, 0.01]}])
    assert row["iterations"] == 1 and row["decode_tok_s_iter_sd_log"] is None


# ----------------------------------------------------- per-request timelines


def raw_from(token_s, step_end_s, **extra):
    """An engine's raw iteration from hand-made token times (s)."""
    firsts = [seq[0] for seq in token_s if seq]
    last = max(seq[-1] for seq in token_s if seq)
    return {"ttft_s": max(firsts), "e2e_s": last, "step_s": [], "token_s": token_s, "step_end_s": step_end_s} | extra


def test_lock_step_timeline_gives_the_batch_figures_of_old():
    # batch 2, 4 tokens: both first tokens at 50 ms, then a token each every 10 ms
    times = [0.05, 0.06, 0.07, 0.08]
    m = iteration_metrics(2, 100, 4, raw_from([times, times], times, tokens=[4, 4]))
    assert m["lock_step"] is True and m["partial_steps"] == 0 and m["step_tokens"] == [2, 2, 2, 2]
    assert m["req_ttft_ms"] == pytest.approx([50, 50]) and m["req_e2e_ms"] == pytest.approx([80, 80])
    assert m["req_tpot_ms"] == pytest.approx([10, 10]) and m["tpot_ms"] == pytest.approx(10)
    assert m["ttft_ms"] == pytest.approx(50) and m["decode_tok_s"] == pytest.approx(2 * 3 / 0.03)
    assert m["itl_p50_ms"] == pytest.approx(10) and m["itl_p99_ms"] == pytest.approx(10)
    assert m["token_ms"] == [pytest.approx([50, 60, 70, 80])] * 2


def test_chunked_prefill_is_not_lock_step_and_every_request_keeps_its_own_figures():
    # 3 sequences of 3 tokens, one prompt prefilled per step (budget = one prompt):
    # step 1 (100 ms) prefills s0; step 2 (200) decodes s0 and prefills s1; step 3
    # (300) decodes s0, s1, prefills s2; then s1, s2 (350); then s2 (400)
    s0, s1, s2 = [0.1, 0.2, 0.3], [0.2, 0.3, 0.35], [0.3, 0.35, 0.4]
    m = iteration_metrics(3, 16, 3, raw_from([s0, s1, s2], [0.1, 0.2, 0.3, 0.35, 0.4], tokens=[3, 3, 3]))
    assert m["step_tokens"] == [1, 2, 3, 2, 1]
    assert m["partial_steps"] == 2 and m["lock_step"] is False  # steps 1 and 2 left sequences waiting
    assert m["req_ttft_ms"] == pytest.approx([100, 200, 300]) and m["ttft_ms"] == pytest.approx(300)
    assert m["req_tpot_ms"] == pytest.approx([100, 75, 50]) and m["tpot_ms"] == pytest.approx(75)
    assert m["req_e2e_ms"] == pytest.approx([300, 350, 400])
    # gaps 100 100 | 100 50 | 50 50
    assert m["itl_p50_ms"] == pytest.approx(75) and m["itl_p99_ms"] == pytest.approx(100)
    # 6 tokens after the firsts, from the first first token (100 ms) to the last (400 ms); the
    # lock-step formula, batch x (max_tokens - 1) / (e2e - ttft) = 6 / 0.1, would say 60
    assert m["decode_tok_s"] == pytest.approx(6 / 0.3)
    assert m["prefill_tok_s"] == pytest.approx(3 * 16 / 0.3)


def test_a_step_that_only_prefilled_is_partial():
    # a prompt longer than the step budget: step 1 (100 ms) prefills half of s0, no token
    s0, s1 = [0.2, 0.3], [0.3, 0.4]
    m = iteration_metrics(2, 16, 2, raw_from([s0, s1], [0.1, 0.2, 0.3, 0.4]))
    assert m["step_tokens"] == [0, 1, 2, 1] and m["partial_steps"] == 2


def test_sequences_that_finish_early_leave_lock_step_intact():
    # partial last steps of another kind: s1 is done after two tokens, s0 goes on; an
    # engine step after the last token delivers nothing to nobody
    s0, s1 = [0.1, 0.2, 0.3, 0.4], [0.1, 0.2]
    m = iteration_metrics(2, 16, 4, raw_from([s0, s1], [0.1, 0.2, 0.3, 0.4, 0.45], tokens=[4, 2]))
    assert m["step_tokens"] == [2, 2, 1, 1, 0] and m["partial_steps"] == 0 and m["lock_step"] is True
    assert m["req_tpot_ms"] == pytest.approx([100, 100]) and m["decode_tok_s"] == pytest.approx(4 / 0.3)


def test_tokens_delivered_together_are_one_gap_and_count_in_tpot():
    # a step that returned two tokens of one request at once (as a streamed chunk)
    m = iteration_metrics(1, 16, 4, raw_from([[0.1, 0.2, 0.2, 0.3]], [0.1, 0.2, 0.3]))
    assert m["itl_p50_ms"] == pytest.approx(100) and m["itl_p99_ms"] == pytest.approx(100)
    assert m["req_tpot_ms"] == pytest.approx([200 / 3]) and m["step_tokens"] == [1, 2, 1]


def test_one_token_requests_have_no_tpot_and_step_ends_may_be_missing():
    m = iteration_metrics(2, 16, 1, raw_from([[0.1], [0.2]], []))
    assert m["req_tpot_ms"] == [None, None] and m["tpot_ms"] is None and m["decode_tok_s"] is None
    # no step ends: each distinct token time closes a step, and s1 waited through the first
    assert m["step_tokens"] == [1, 1] and m["partial_steps"] == 1


def test_without_token_times_the_iteration_is_read_as_lock_step_and_not_judged():
    m = iteration_metrics(2, 100, 3, {"ttft_s": 0.05, "e2e_s": 0.07, "step_s": [0.01, 0.01]})
    assert m["req_ttft_ms"] == pytest.approx([50, 50]) and m["req_tpot_ms"] == pytest.approx([10, 10])
    assert m["lock_step"] is None and m["partial_steps"] is None and m["token_ms"] is None


def test_run_pools_requests_and_counts_partial_steps():
    lock = raw_from([[0.1, 0.2], [0.1, 0.2]], [0.1, 0.2])
    chunked = raw_from([[0.1, 0.2], [0.2, 0.3]], [0.1, 0.2, 0.3])
    row, per = run_metrics(2, 16, 2, [lock, chunked, chunked])
    assert row["lock_step"] is False and row["partial_steps"] == 2
    assert partial_step_counts(per) == (2, 8, 2)  # 2 partial of 2 + 3 + 3 steps, in 2 iterations
    ttfts = [100, 100, 100, 200, 100, 200]
    assert row["ttft_p50_ms"] == pytest.approx(float(np.percentile(ttfts, 50)))
    assert row["ttft_p99_ms"] == pytest.approx(float(np.percentile(ttfts, 99)))
    assert row["tpot_p99_ms"] == pytest.approx(100) and row["itl_p50_ms"] == pytest.approx(100)
    assert row["ttft_ms"] == pytest.approx(200)  # median over iterations of the batch TTFT (100, 200, 200)
    only_lock, _ = run_metrics(2, 16, 2, [lock])
    assert only_lock["lock_step"] is True and only_lock["partial_steps"] == 0
    unseen, _ = run_metrics(2, 16, 2, [{"ttft_s": 0.1, "e2e_s": 0.2, "step_s": [0.1]}])
    assert unseen["lock_step"] is None and unseen["partial_steps"] is None


def test_a_sequence_without_tokens_keeps_its_place_in_the_request_lists():
    m = iteration_metrics(2, 16, 2, raw_from([[], [0.1, 0.2]], [0.1, 0.2]))
    assert m["req_ttft_ms"] == [None, pytest.approx(100)] and m["req_tpot_ms"] == [None, pytest.approx(100)]
    assert m["decode_tok_s"] == pytest.approx(1 / 0.1)
