"""vLLM's step budget (max_num_batched_tokens): omni's default holds the whole batch's prefill, an arm
may set it lower to chunk on purpose, and an arm that leaves it unset keeps its identity."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from omni.engines.vllm import VLLM_CPU_BATCHED_TOKENS, batched_tokens, engine_kwargs
from omni.spec import Arm, arm_hash, canonical_arm_json


def vllm_arm(**fields) -> Arm:
    return Arm(name="v", engine="vllm", model="tiny-llama", **fields)


def payload(arm: Arm) -> dict:
    return arm.model_dump(mode="json") | {"model_path": "/m"}


def test_a_batch_whose_prefill_fits_vllms_own_budget_leaves_it_alone():
    arm = vllm_arm(batch_size=8, prompt_len=512, max_tokens=64)  # 4096 prompt tokens: vLLM's CPU default
    assert 8 * 512 == VLLM_CPU_BATCHED_TOKENS and batched_tokens(payload(arm), 576) is None
    assert "max_num_batched_tokens" not in engine_kwargs(payload(arm))


def test_a_larger_batch_gets_its_whole_prefill_in_one_step():
    arm = vllm_arm(batch_size=8, prompt_len=2048, max_tokens=128, context_len=2176)
    assert engine_kwargs(payload(arm))["max_num_batched_tokens"] == 8 * 2048
    # one long prompt: at least max_model_len, what vLLM needs where it cannot chunk
    long = vllm_arm(batch_size=1, prompt_len=4097, max_tokens=8, context_len=8192)
    assert engine_kwargs(payload(long))["max_num_batched_tokens"] == 8192


def test_the_arm_sets_the_budget_to_chunk_on_purpose():
    arm = vllm_arm(batch_size=8, prompt_len=2048, max_tokens=128, params={"max_num_batched_tokens": 2048})
    assert engine_kwargs(payload(arm))["max_num_batched_tokens"] == 2048
    small = vllm_arm(batch_size=2, prompt_len=64, params={"max_num_batched_tokens": 32})
    assert engine_kwargs(payload(small))["max_num_batched_tokens"] == 32


@pytest.mark.parametrize("budget", [0, 7, "2048"])
def test_a_budget_vllm_would_refuse_is_a_spec_error(budget):
    with pytest.raises(ValidationError) as err:
        vllm_arm(batch_size=8, params={"max_num_batched_tokens": budget})
    assert "max_num_batched_tokens" in str(err.value)


def test_an_unset_budget_keeps_the_arms_identity_and_a_set_one_changes_it():
    plain = vllm_arm(batch_size=2, prompt_len=64, max_tokens=16)
    assert "max_num_batched_tokens" not in canonical_arm_json(plain)
    spelled = vllm_arm(batch_size=2, prompt_len=64, max_tokens=16, params={"max_num_batched_tokens": None})
    assert arm_hash(spelled) == arm_hash(plain)
    chunked = vllm_arm(batch_size=2, prompt_len=64, max_tokens=16, params={"max_num_batched_tokens": 64})
    assert arm_hash(chunked) != arm_hash(plain)
