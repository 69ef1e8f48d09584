"""KV sized to need and memory compared like for like (omni.measure.kv), the
runner's KV rules, and load_s timed from outside the engine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from omni.measure.kv import (
    MIB,
    OVER_FACTOR,
    Provisioning,
    kv_overprovisioned,
    memory_refusal,
    provisioning_of,
)
from omni.run.row import loaded_after
from omni.run.validity import kv_rules, validity_rules
from omni.spec import Arm
from tests.rows import store_sweep

NEED = 2 * MIB  # smoke's tiny-llama: 4 sequences x 256 tokens x 2 KiB


def vllm(allocated: int = NEED, needed: int = NEED) -> Provisioning:
    return Provisioning("vllm", False, allocated, needed)


def test_a_pool_is_overprovisioned_only_beyond_the_factor_and_the_message_names_the_numbers():
    assert kv_overprovisioned(NEED, NEED) is None
    assert kv_overprovisioned(NEED, int(OVER_FACTOR * NEED)) is None  # block rounding stays within it
    why = kv_overprovisioned(NEED, 256 * MIB)
    assert "256.0 MiB" in why and "2.0 MiB" in why and "x128.0" in why
    assert kv_overprovisioned(None, 256 * MIB) is None and kv_overprovisioned(NEED, None) is None  # unknown: no claim


def test_memory_of_arms_provisioned_alike_is_compared():
    assert memory_refusal([vllm()] * 2, [vllm(int(1.1 * NEED))] * 2, "a", "b") is None
    synthetic = Provisioning("synthetic", None, None, None)  # no KV, no weights file: nothing to hold equal
    assert memory_refusal([synthetic], [synthetic], "a", "b") is None


@pytest.mark.parametrize(
    ("base", "other", "needles"),
    [
        # the smoke sweep: vLLM's 256 MiB pool against its 2 MiB need
        ([vllm()], [vllm(256 * MIB)], ["b's KV pool 256.0 MiB for a need of 2.0 MiB", "x128.0", "kv_cache_bytes"]),
        ([vllm()], [Provisioning("llamacpp", False, NEED, NEED)], ["mixed engines", "a: vllm", "b: llamacpp"]),
        ([vllm()], [Provisioning("vllm", True, NEED, NEED)], ["mixed mmap modes", "a: False", "b: True"]),
        ([vllm()], [vllm(int(1.9 * NEED))], ["sized differently", "a: x1.00", "b: x1.90"]),
        ([vllm(), Provisioning("vllm", True, NEED, NEED)], [vllm()], ["mixed mmap modes", "a: False, True"]),
    ],
)
def test_memory_of_arms_provisioned_differently_is_refused_naming_the_numbers(base, other, needles):
    why = memory_refusal(base, other, "a", "b")
    assert why is not None
    for needle in needles:
        assert needle in why, why


def test_one_arm_against_itself_in_another_sweep_keeps_both_sides():
    """omni compare judges an arm against its namesake of another sweep."""
    why = memory_refusal([vllm()], [vllm(int(1.9 * NEED))], "a", "a")
    assert "a: x1.00" in why and "a: x1.90" in why


def test_a_vllm_row_without_mmap_counts_as_anonymous_weights():
    """Rows before v10 stored vLLM's mmap as null: its weights are anonymous
    memory, so against a llama.cpp arm with mmap on it is a mixed mode."""
    old_vllm = provisioning_of({"engine": "vllm", "mmap": None, "kv_cache_bytes_effective": float("nan")})
    assert old_vllm == Provisioning("vllm", False, None, None)
    mapped = provisioning_of({"engine": "vllm", "mmap": True})
    assert "mixed mmap modes" in memory_refusal([old_vllm], [mapped], "a", "b")
    assert provisioning_of({"engine": "synthetic", "mmap": None}).mmap is None


def test_a_memory_verdict_is_refused_and_other_metrics_are_judged(tmp_path):
    store_sweep(tmp_path, "sw", {"a": [1, 1, 1], "b": [1, 1, 1]})
    from omni.report.verdicts import judge
    from omni.store.reading import load_runs

    frame = load_runs(tmp_path)
    frame["kv_cache_bytes_needed"] = NEED
    frame["kv_cache_bytes_effective"] = [NEED] * 3 + [256 * MIB] * 3
    judged = judge(frame, frame, "a", "b", "rss_anon_steady_mb", 0.002)
    assert judged.comparison is None and "b's KV pool 256.0 MiB for a need of 2.0 MiB" in judged.refused
    assert judge(frame, frame, "a", "b", "decode_tok_s", 0.3).comparison is not None
    frame["kv_cache_bytes_effective"] = NEED
    assert judge(frame, frame, "a", "b", "rss_anon_steady_mb", 0.002).comparison is not None


def test_vllm_without_a_kv_budget_is_warned_of_its_default_pool():
    arm = Arm(name="x", engine="vllm", model="m", context_len=256)
    rules = dict(validity_rules(arm))
    assert set(rules) == {"kv_cache_default"} and "4 GiB" in rules["kv_cache_default"]
    assert validity_rules(arm.model_copy(update={"kv_cache_bytes": NEED})) == []
    assert validity_rules(arm.model_copy(update={"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}})) == []
    assert validity_rules(Arm(name="x", engine="llamacpp", model="m", context_len=256)) == []


def test_a_run_whose_pool_exceeds_its_need_is_warned():
    (rule, message), *rest = kv_rules({"kv_cache_bytes_needed": NEED, "kv_cache_bytes_effective": 4 << 30})
    assert rule == "kv_overprovisioned" and not rest and "4096.0 MiB" in message
    assert kv_rules({"kv_cache_bytes_needed": NEED, "kv_cache_bytes_effective": NEED}) == []
    assert kv_rules({"engine": "synthetic"}) == []


def test_load_time_runs_from_the_process_start_to_the_first_loaded_mark():
    marks = [(100.5, "load"), (112.0, "loaded"), (130.0, "steady"), (131.0, "loaded")]
    proc = SimpleNamespace(started=100.0, sampler=SimpleNamespace(phase_marks=marks))
    assert loaded_after(proc) == pytest.approx(12.0)
    proc.sampler.phase_marks = marks[:1]  # died while loading: no load time
    assert loaded_after(proc) is None
