"""Per-request timing end to end on the synthetic engine: a batch whose prefill is chunked over steps
(``prefill_chunk_tokens``, as vLLM's max_num_batched_tokens does) is stored with its per-request figures
and flagged not_lock_step; the same arm with one prefill step is neither."""

from __future__ import annotations

import pytest

from omni.store.reading import load_iterations
from omni.sweep.execute import run_and_store
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest
from tests.specs import synthetic, write_spec

pytestmark = pytest.mark.slow


def test_a_chunked_prefill_is_flagged_and_its_requests_timed_from_their_tokens(tmp_path):
    base = {**synthetic("whole", iterations=2, work_per_token=200), "batch_size": 4}
    # one prompt (16 tokens) per step, less one per decoding sequence: the first tokens come one after another
    chunked = {**base, "name": "chunked", "params": {**base["params"], "prefill_chunk_tokens": 16}}
    prepared = prepare_sweep(SweepRequest(spec=write_spec(tmp_path, [base, chunked]), results=tmp_path / "results"))
    rows = {item.arm.name: run_and_store(prepared.context, item) for item in prepared.items}
    whole, split = rows["whole"], rows["chunked"]
    assert whole["status"] == split["status"] == "ok"
    assert whole["lock_step"] is True and whole["partial_steps"] == 0 and "not_lock_step" not in whole["warning_rules"]
    assert split["lock_step"] is False and split["partial_steps"] > 0
    (message,) = [m for m in split["warnings"] if m.startswith("not_lock_step")]
    assert f"{split['partial_steps']} of " in message and "in 2 of 2 timed iteration(s)" in message
    its = load_iterations(tmp_path / "results").set_index(["arm", "iteration"])
    for arm in rows:
        for i in range(2):
            it = its.loc[(arm, i)]
            tokens = [list(seq) for seq in it["token_ms"]]
            assert [len(seq) for seq in tokens] == list(it["tokens"]) == [8] * 4
            assert list(it["req_ttft_ms"]) == [seq[0] for seq in tokens]
            assert list(it["req_tpot_ms"]) == pytest.approx([(seq[-1] - seq[0]) / 7 for seq in tokens])
            assert sum(it["step_tokens"]) == 32 and it["lock_step"] == (arm == "whole")
            assert it["ttft_ms"] == pytest.approx(max(it["req_ttft_ms"]), abs=1e-6)
    firsts = sorted(its.loc[("chunked", 0)]["req_ttft_ms"])
    assert firsts[0] < firsts[-1] and len(set(its.loc[("whole", 0)]["req_ttft_ms"])) == 1
