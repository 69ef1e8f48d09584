"""The rules that mark a run's numbers as not to be trusted, each named: the
arm's own before it runs (:func:`validity_rules`), its KV pool against the
workload's need (:func:`kv_rules`), its audits of its timed iterations
(:func:`fill_audits`) and its output head as loaded (:func:`fill_head`). A
rule warns (``warnings``, ``warning_rules``) or makes an ``ok`` row
``invalid``; the rules on what the sampler saw are its sources'
(:mod:`omni.measure.sources`).
"""

from __future__ import annotations

from omni.measure.audit import audit_repeats, audit_tokens
from omni.measure.heads import DENSE_HEAD, HEAD_UNCHECKED, check_head
from omni.measure.iterations import partial_step_counts
from omni.measure.kv import kv_overprovisioned
from omni.models.factory import PRESETS
from omni.spec import Arm


def warn(row: dict, rule: str, message: str) -> None:
    row["warnings"].append(message)
    row["warning_rules"].append(rule)


KV_ENGINES = ("vllm", "llamacpp")
# VLLM_CPU_KVCACHE_SPACE's default, in GiB: vLLM's pool when the arm sets no kv_cache_bytes
VLLM_DEFAULT_KV_GIB = 4


def validity_rules(arm: Arm) -> list[tuple[str, str]]:
    """Named reasons to doubt an arm's numbers before it even runs (the KV
    pool against the workload's need is checked after, :func:`kv_rules`)."""
    found = []
    if arm.engine in KV_ENGINES and arm.context_len is None:
        found.append(
            (
                "context_len_unset",
                "context_len is unset: the engine sizes its KV cache by its own default, "
                "allocated and never touched, so memory numbers mean nothing; set context_len",
            )
        )
    if arm.engine == "vllm" and not arm.kv_cache_bytes and "VLLM_CPU_KVCACHE_SPACE" not in arm.env:
        found.append(
            (
                "kv_cache_default",
                f"kv_cache_bytes is unset: vLLM allocates its default {VLLM_DEFAULT_KV_GIB} GiB KV pool "
                "(VLLM_CPU_KVCACHE_SPACE) whatever the workload needs, so its memory is mostly that pool; "
                "set kv_cache_bytes near batch_size x context_len x the model's KV bytes per token",
            )
        )
    if arm.prompt_len <= 1:
        found.append(
            (
                "prompt_len_le_1",
                f"prompt_len={arm.prompt_len}: a profile of an empty attention cache, "
                "not of attention over a prompt; use prompt_len >= 2",
            )
        )
    return found


def kv_rules(row: dict) -> list[tuple[str, str]]:
    """The run's KV pool against its workload's need, once the engine reported both."""
    why = kv_overprovisioned(row.get("kv_cache_bytes_needed"), row.get("kv_cache_bytes_effective"))
    return [("kv_overprovisioned", f"kv_overprovisioned: {why}")] if why else []


def fill_audits(row: dict, per_iteration: list[dict], fresh: dict | None) -> None:
    """The run's own audits (omni.measure.audit): a sequence that generated other than
    max_tokens makes the run ``invalid`` (its rates assume max_tokens); timed
    repeats faster than their first sight beyond noise are a warning, unless
    the arm turned a prefix cache on, when they are what it asked for; steps
    that served only part of the batch are a warning (not_lock_step), unless
    the arm let vLLM step while its batch was added (``admission:
    as_generate``, ``vllm bench latency``'s way), when they are what it asked
    for: ``partial_steps`` and ``lock_step`` count them either way."""
    tokens = audit_tokens(row["max_tokens"], per_iteration)
    row["tokens_mismatch_iterations"] = tokens.mismatched
    if tokens.mismatched:
        iteration, asked, got = tokens.first
        message = (
            f"tokens_mismatch: in {tokens.mismatched} of {len(per_iteration)} timed iteration(s) a sequence "
            f"generated other than max_tokens; first in iteration {iteration}: asked {asked} per sequence, "
            f"got {list(got)}"
        )
        warn(row, "tokens_mismatch", message)
        if row["status"] == "ok":
            row.update(status="invalid", error=message)
    params = row.get("engine_params") or {}  # a dict here: base_row's, before the store dumps it to JSON
    partial, steps, iterations = partial_step_counts(per_iteration)
    if partial and params.get("admission") != "as_generate":
        warn(
            row,
            "not_lock_step",
            f"not_lock_step: {partial} of {steps} engine steps, in {iterations} of {len(per_iteration)} timed "
            "iteration(s), gave a token to fewer than all sequences not yet done (a prefill chunked over steps: "
            "vLLM's max_num_batched_tokens below batch x prompt_len?): the per-request TTFT, TPOT and ITL are "
            "exact; ttft_ms is the last sequence's first token, and decode_tok_s spans steps that also prefilled",
        )
    fresh_ms = fresh["ttft_s"] * 1000 if fresh and fresh.get("ttft_s") else None
    repeats = audit_repeats([p["ttft_ms"] for p in per_iteration], fresh_ms)
    row["audit_fresh_ttft_ms"] = fresh_ms
    row["audit_repeat_ttft_ratio"], row["audit_repeat_ttft_cv"] = repeats.ratio, repeats.cv
    if repeats.faster and not params.get("prefix_caching"):
        warn(
            row,
            "repeat_faster",
            f"repeat_faster: timed iterations 1..{len(per_iteration) - 1} took x{repeats.ratio:.2f} "
            f"the time to first token of their first sight (iteration 0, or fresh prompts after them; below "
            f"x{repeats.threshold:.2f}, noise {repeats.cv:.1%}): a cache served the repeats, so TTFT and prefill "
            "rates measure cache hits",
        )


def fill_head(row: dict, head: dict | None) -> None:
    """The output head as the engine loaded it, what was claimed about it and
    by whom (omni.measure.heads): a quantized claim met by a dense head makes the run
    ``invalid`` (dense_head), profiled or not. An engine that reports no head
    (synthetic) leaves the columns null."""
    if not head:
        return
    params = row.get("engine_params") or {}  # a dict here: base_row's, before the store dumps it to JSON
    check = check_head(row["engine"], row.get("quantization"), params, row.get("model") in PRESETS, head)
    row["head_weight_type"] = check.weight_type
    row["head_claim"] = check.claim.describe() if check.claim else None
    row["quantization_seen"] = check.quantization_seen
    if check.unchecked:
        warn(row, HEAD_UNCHECKED, check.unchecked)
    if check.contradiction:
        warn(row, DENSE_HEAD, check.contradiction)
        if row["status"] == "ok":
            row.update(status="invalid", error=check.contradiction)
