"""The run registry's columns of what a run measured: its timings, rates,
percentiles, spreads and memory (group metrics; those with a ``better``
direction are the ones verdicts judge), and a serving run's load levels and
SLO (serving). Assembled in order by :mod:`omni.store.columns`.
"""

from __future__ import annotations

from omni.store.column_type import BOOL, F64, HIGHER, I32, I64, INTS, JSON, LOWER, STR, Column, declare

# the per-request and inter-token values a run's percentiles are pooled from
_POOLED = (
    ("itl", "inter-token gaps"),
    ("ttft", "requests with a first token"),
    ("tpot", "requests of 2 tokens or more"),
)

METRICS: tuple[Column, ...] = declare(
    "metrics",
    (
        "load_s",
        F64,
        "s",
        "engine process start to its `loaded` mark, timed by the orchestrator: interpreter, imports, weights, "
        "KV pool, compile (one span for every engine since v10)",
        LOWER,
    ),
    (
        "ttft_ms",
        F64,
        "ms",
        "time to first token of the whole batch: until every sequence has its first (the slowest request's TTFT)",
        LOWER,
    ),
    ("prefill_tok_s", F64, "tok/s", "prompt tokens of the batch over ttft_ms", HIGHER),
    (
        "decode_tok_s",
        F64,
        "tok/s",
        "tokens after each sequence's first, over the span from the earliest first token to the last token "
        "(lock step: batch x (max_tokens - 1) / (e2e - ttft))",
        HIGHER,
    ),
    ("e2e_s", F64, "s", "end-to-end generation time, engine-measured", LOWER),
    (
        "joules_per_token",
        F64,
        "J/tok",
        "power_w x e2e_s over the batch's output tokens (batch_size x max_tokens): the packages' energy "
        "per generated token, neighbours' draw included; null without RAPL (v12)",
        LOWER,
    ),
    (
        "capacity_concurrency",
        F64,
        "requests",
        "serving: requests in flight the server held within its SLO, interpolated between levels "
        "(omni.serving.slo.run_capacity); null when beyond the levels tried or not established "
        "(capacity_bounds) (v11; since v13 the SLO is judged on its percentile's 95 % upper bound, "
        "before on the point estimate)",
        HIGHER,
    ),
    (
        "capacity_rate",
        F64,
        "req/s",
        "serving: request rate the server held within its SLO, interpolated between levels; null when "
        "beyond the levels tried or not established (capacity_bounds) (v11; the SLO as capacity_concurrency)",
        HIGHER,
    ),
    (
        "tpot_ms",
        F64,
        "ms",
        "time per output token after the first, per request: (its last token - its first) / (its tokens - 1), "
        "median request (v4; before v10 (e2e - ttft) / (max_tokens - 1), the same in lock step)",
        LOWER,
    ),
    (
        "itl_p50_ms",
        F64,
        "ms",
        "inter-token latency, per request between consecutive token deliveries, median over every request "
        "of every iteration (v4; before v10 each decode step's wall time, the same in lock step)",
        LOWER,
    ),
    ("itl_p90_ms", F64, "ms", "inter-token latency, 90th percentile over every request's gaps (v4)", LOWER),
    ("itl_p99_ms", F64, "ms", "inter-token latency, 99th percentile over every request's gaps (v4)", LOWER),
    # descriptive, not judged: a verdict per percentile would multiply the
    # tests for what ttft_ms and tpot_ms already judge
    (
        "ttft_p50_ms",
        F64,
        "ms",
        "per-request time to first token, median over every request of every timed iteration (v10)",
    ),
    ("ttft_p99_ms", F64, "ms", "per-request time to first token, 99th percentile, as ttft_p50_ms (v10)"),
    (
        "tpot_p99_ms",
        F64,
        "ms",
        "per-request time per output token after the first, 99th percentile over every request (v10)",
    ),
    # what a pooled percentile is over, and what that count bounds of its p99 (omni.stats.quantiles)
    *[
        (f"{m}_samples", I32, None, f"{what}, pooled over every timed iteration: what {m}_p*_ms are over (v13)")
        for m, what in _POOLED
    ],
    *[
        (
            f"{m}_p99_upper95_ms",
            F64,
            "ms",
            f"95 % upper confidence bound of the true 99th percentile behind {m}_p99_ms: the order statistic "
            f"of the {m}_samples values that lies above it with chance >= 95 % if they are independent draws; "
            "null below 299 values, whose maximum bounds only the 100 x 0.05^(1/n)th percentile (v13)",
        )
        for m, _ in _POOLED
    ],
    (
        "lock_step",
        BOOL,
        None,
        "every engine step of every timed iteration gave a token to every sequence not yet done; false: "
        "a prefill was chunked over steps or sequences were scheduled apart (not_lock_step), or vLLM stepped "
        "while its batch was added, as the arm asked (engine_params admission as_generate: no warning); "
        "null: the engine reported no token times (v10)",
    ),
    (
        "partial_steps",
        I32,
        None,
        "engine steps, summed over the timed iterations, that gave a token to fewer than all sequences not "
        "yet done; each iteration's tokens per step are in results/iterations step_tokens (v10)",
    ),
    (
        "iterations",
        I32,
        None,
        "timed iterations in the run's one engine process; ttft, rates, e2e and "
        "tpot are their median, every iteration is in results/iterations (v4)",
    ),
    *[
        (
            f"{m}_iter_sd_log",
            F64,
            None,
            f"within-run spread of {m}: sd of the log iteration values, about the relative sd (v4)",
        )
        for m in ("ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_s", "tpot_ms")
    ],
    *[
        (
            f"{m}_iter_ac1_log",
            F64,
            None,
            f"lag-1 autocorrelation of {m}'s log iteration values in their order, -1 to 1: whether a slow "
            "iteration is followed by another (omni.stats.swing); null below 3 iterations or with no spread (v14)",
        )
        for m in ("ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_s", "tpot_ms")
    ],
    (
        "wall_s",
        F64,
        "s",
        "wall time of the engine process, orchestrator-measured: from its start to its exit and the reaping of its tree",
        LOWER,
    ),
    (
        "rss_anon_tree_mb",
        F64,
        "MiB",
        "peak RssAnon summed over the process tree, over every sample from start to exit (load and warm-up included)",
        LOWER,
    ),
    (
        "rss_anon_after_load_mb",
        F64,
        "MiB",
        "tree RssAnon at the first sample after the engine's `loaded` mark, before any generation",
        LOWER,
    ),
    (
        "rss_anon_steady_mb",
        F64,
        "MiB",
        "tree RssAnon in the hold after generation: the median of the samples between the engine's `steady` "
        "and `teardown` marks, once the timed and audit generations are done and before it frees anything",
        LOWER,
    ),
    ("pss_anon_tree_mb", F64, "MiB", "peak anonymous Pss summed over the tree, start to exit", LOWER),
    (
        "pss_anon_after_load_mb",
        F64,
        "MiB",
        "tree anonymous Pss at the first sample after the `loaded` mark",
        LOWER,
    ),
    (
        "pss_anon_steady_mb",
        F64,
        "MiB",
        "tree anonymous Pss in the hold after generation (median after the `steady` mark)",
        LOWER,
    ),
    ("rss_samples", I32, None, "RssAnon samples taken"),
    ("rss_interval_ms", F64, "ms", "interval between RssAnon samples"),
    ("pss_samples", I32, None, "Pss samples taken"),
    ("pss_interval_ms", F64, "ms", "interval between Pss samples"),
    ("kv_cache_bytes_effective", I64, "B", "KV cache the engine actually allocated"),
    (
        "kv_cache_bytes_needed",
        I64,
        "B",
        "KV cache the workload needs: batch_size x context_len (prompt_len + max_tokens when unset) x the "
        "engine's K and V bytes per token from the loaded model's layers, KV heads, head size and dtype (v10)",
    ),
    ("n_procs", I32, None, "most processes seen at once in the engine's tree"),
    (
        "sampler_cpu_ms",
        F64,
        "ms",
        "CPU the orchestrator's sampler spent watching this run (its thread, and the interference samples "
        "at the marks) (v12)",
    ),
    ("sampler_cpu_pct", F64, "%", "sampler_cpu_ms over the time it sampled, % of one core (v12)"),
    ("profile_steps", I32, None, "engine steps traced by a profiled run, one row each per op in results/ops (v5)"),
    (
        "profile_overhead",
        F64,
        None,
        "a profiled run's median decode step time while traced over the same "
        "run's untraced one: what the profiler costs (v5)",
    ),
    (
        "engine_perf",
        STR,
        None,
        "the engine's own phase totals (llama.cpp: llama_perf_context's load, "
        "prompt eval and eval ms and token counts), JSON object (v5)",
        JSON,
    ),
)

SERVING: tuple[Column, ...] = declare(
    "serving",
    ("client_cpus", INTS, None, "CPUs of a serving run's load generator, apart from the server's (v11)"),
    ("load_levels", I32, None, "load levels a serving run completed; each is a record in results/levels (v11)"),
    (
        "capacity_bounds",
        STR,
        None,
        "per kind of level (concurrency, rate) whose capacity is no figure, why: above or below the levels "
        "tried, unknown (a level it needed was not judged), or not_established (v13: a level's requests too "
        'few to bound the SLO\'s percentile at 95 %); JSON object, e.g. {"rate": "above"} (v11)',
        JSON,
    ),
    (
        "capacity_concurrency_bound_at",
        F64,
        "requests",
        "serving: where capacity_bounds says above or below for concurrency, the load the capacity lies "
        "beyond: the highest level that met the SLO (above) or the lowest tried (below); the arm's interval "
        "keeps the run as that bound (omni.stats.censored) (v16)",
    ),
    (
        "capacity_rate_bound_at",
        F64,
        "req/s",
        "serving: as capacity_concurrency_bound_at, for rate (v16)",
    ),
    ("slo", STR, None, "the serving arm's SLO: ttft_ms, tpot_ms at percentile, JSON object (v11)", JSON),
    (
        "load_seed",
        I64,
        None,
        "serving: the load generator's seed this run (its prompts, lengths and arrival gaps), drawn from the "
        "arm's load.seed and the pass: every pass fresh traffic, the arms of one pass the same (v15)",
    ),
)
