"""What the server says about itself during a level: its ``/metrics``
(Prometheus text) scraped and summarized, the token counters the level's
counts are checked against, and the KV pool its log states.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

GENERATION_COUNTERS = ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total")

# Every prompt token a server was sent, prefilled or served by its prefix
# cache: vLLM's prompt_tokens_total counts them all (PromptTokenStats.total,
# cached ones included); llama-server's counts those it prefilled, and its
# prompt_tokens_cached_total those its prompt cache served (llama.cpp
# server-context.cpp: metrics.add_prompt_cached(n_past)), so the two are summed.
PROMPT_COUNTERS = {
    "vllm:prompt_tokens_total": (),
    "llamacpp:prompt_tokens_total": ("llamacpp:prompt_tokens_cached_total",),
}


def server_prompt_tokens(server_metrics: Mapping) -> float | None:
    """Prompt tokens the server counted over the level (its counters'
    change), those its prefix cache served included."""
    for name, cached in PROMPT_COUNTERS.items():
        if name in server_metrics:
            return server_metrics[name]["change"] + sum(
                server_metrics[c]["change"] for c in cached if c in server_metrics
            )
    return None


def metrics_summary(samples: list[tuple[float, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """A level's server metrics scraped from ``/metrics`` (time, name -> value):
    per metric its mean, max, last-first change (a counter's increase) and
    ``n``, the scrapes it was in. A gauge is sampled: its max is the highest
    seen at a scrape, not the highest reached between them."""
    names = sorted({n for _, values in samples for n in values})
    out = {}
    for name in names:
        seen = [values[name] for _, values in samples if name in values]
        out[name] = {
            "mean": float(np.mean(seen)),
            "max": float(max(seen)),
            "change": float(seen[-1] - seen[0]),
            "n": len(seen),
        }
    return out


# the server gauges and counters kept per level (the rest of /metrics is not
# stored); the prefix cache's: vLLM's tokens looked up and found in it
# (prefix_cache_queries, _hits: whole KV blocks only, 128 tokens on CPU) and
# the prompt tokens it served, llama-server's prompt tokens its cache served
KEPT_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_cached_total",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:kv_cache_usage_ratio",
    "llamacpp:kv_cache_tokens",
    "llamacpp:n_busy_slots_per_decode",
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
    "llamacpp:tokens_predicted_total",
)
# What a server states of its own configuration in an info metric's labels,
# kept as 1 (the label is "True") or 0: vLLM's
# vllm:cache_config_info{enable_prefix_caching="True",...} 1.0 says whether the
# server that ran the level caches prefixes, whatever it was asked
KEPT_LABELS = {"vllm:cache_config_info": ("enable_prefix_caching",)}


def parse_metrics(text: str) -> dict[str, float]:
    """The kept metrics of one ``/metrics`` scrape (Prometheus text format),
    summed over their label sets; a kept label as ``name:label``."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in KEPT_METRICS and not math.isnan(sample.value):
                found[sample.name] = found.get(sample.name, 0.0) + float(sample.value)
            for label in KEPT_LABELS.get(sample.name, ()):
                if label in sample.labels:
                    found[f"{sample.name}:{label}"] = float(sample.labels[label] == "True")
    return found


# The lines in which a server says how many tokens of KV it allocated: vLLM's
# "CPU KV cache size: 1,152 tokens, ...", llama-server's "n_slots = 4,
# n_ctx_slot = 256" (its KV cells: slots x context per slot)
KV_MARKERS = ("KV cache size: ", "n_ctx_slot = ")
_VLLM_KV = re.compile(r"KV cache size: ([\d,]+) tokens")
_LLAMA_KV = re.compile(r"n_slots = (\d+), n_ctx_slot = (\d+)")


def served_kv_tokens(lines: Sequence[str]) -> int | None:
    """Tokens of KV the server allocated, from its log lines (the last said)."""
    found = None
    for line in lines:
        if m := _VLLM_KV.search(line):
            found = int(m[1].replace(",", ""))
        elif m := _LLAMA_KV.search(line):
            found = int(m[1]) * int(m[2])
    return found


def kv_bytes_per_token(hf_config: Mapping) -> int:
    """K and V of every layer for one token at 16 bits, both servers' KV type here."""
    heads = hf_config["num_attention_heads"]
    head_dim = hf_config.get("head_dim") or hf_config["hidden_size"] // heads
    return 2 * hf_config["num_hidden_layers"] * hf_config.get("num_key_value_heads", heads) * head_dim * 2
