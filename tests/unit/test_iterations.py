"""omni.iterations: raw engine times -> per-iteration and per-run metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from omni.iterations import iteration_metrics, percentile, run_metrics


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


def test_one_iteration_has_no_spread():
    row, _ = run_metrics(1, 10, 3, [{"ttft_s": 0.01, "e2e_s": 0.03, "step_s": [0.01, 0.01]}])
    assert row["iterations"] == 1 and row["decode_tok_s_iter_sd_log"] is None
