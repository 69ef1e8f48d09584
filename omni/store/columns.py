"""The column registry: every Parquet column omni writes, declared once.

Each run row column has a type, a unit, a meaning and a group (:data:`COLUMNS`);
metrics say which direction is better, so statistics never hard-code it.
:func:`schema` is the Arrow schema they make
(:func:`omni.store.row_check.validate_row` checks and coerces a row against it before
it is written), and ``SCHEMA_VERSION`` is stamped on every row so older files
can be read through an upgrade per bump (:func:`omni.store.dataset.upgrade_table`).
The side tables' schemas are in :mod:`omni.store.side_tables`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

SCHEMA_VERSION = 14

STATUSES = ("ok", "failed", "timeout", "refused", "invalid")
BINDING_METHODS = ("numactl", "sched_setaffinity", "none")

# Columns that make a row addressable: without them it cannot be filed.
REQUIRED = ("run_id", "sweep_id", "status")


@dataclass(frozen=True)
class Column:
    """One Parquet column, declared once.

    ``better`` says which direction is an improvement for a metric, so
    statistics never hard-code it. ``choices`` restricts a string column to a
    closed set. ``is_json`` marks a string column that holds JSON: dicts and
    lists given for it are dumped with sorted keys.
    """

    name: str
    type: pa.DataType
    unit: str | None
    meaning: str
    group: str
    better: Literal["higher", "lower"] | None = None
    choices: tuple[str, ...] | None = None
    is_json: bool = False


_STR = pa.string()
_I16 = pa.int16()
_I32 = pa.int32()
_I64 = pa.int64()
_F64 = pa.float64()
_BOOL = pa.bool_()
_STRS = pa.list_(pa.string())
_INTS = pa.list_(pa.int32())
_I64S = pa.list_(pa.int64())
_TIME = pa.timestamp("us", tz="UTC")


def _group(group: str, *specs: tuple) -> tuple[Column, ...]:
    # spec: (name, type, unit, meaning[, dict of further Column fields])
    columns = []
    for spec in specs:
        extras = spec[4] if len(spec) > 4 else {}
        columns.append(Column(spec[0], spec[1], spec[2], spec[3], group, **extras))
    return tuple(columns)


_LOWER = {"better": "lower"}
_HIGHER = {"better": "higher"}
_JSON = {"is_json": True}
# the per-request and inter-token values a run's percentiles are pooled from
_POOLED = (
    ("itl", "inter-token gaps"),
    ("ttft", "requests with a first token"),
    ("tpot", "requests of 2 tokens or more"),
)

COLUMNS: tuple[Column, ...] = (
    *_group(
        "identity",
        ("schema_version", _I16, None, "version of this registry the row was written with"),
        ("run_id", _STR, None, "unique id of the run: hash of the sweep id, canonical arm and pass"),
        ("sweep_id", _STR, None, "unique id of the sweep the run belongs to"),
        ("sweep_name", _STR, None, "human name of the sweep, from the spec"),
        ("note", _STR, None, "free text given with omni sweep --note, the same in every row of the sweep (v9)"),
        ("arm", _STR, None, "name of the arm (configuration) this run executed"),
        ("pass_index", _I32, None, "which pass over all arms, from 0"),
        ("order_index", _I32, None, "position of the run in the sweep's interleaved schedule"),
        ("attempt", _I32, None, "attempt number for this arm and pass, from 1"),
        ("status", _STR, None, "outcome of the run", {"choices": STATUSES}),
        ("error", _STR, None, "why the run did not succeed, for people"),
        ("exit_code", _I32, None, "exit status of the engine process; negative = killed by signal"),
        ("stderr_tail", _STR, None, "last lines of the engine's stderr"),
        ("forced", _BOOL, None, "run despite a refusal (e.g. busy cores), by request"),
        (
            "profiled",
            _BOOL,
            None,
            "a profiled pass (the arm's profile:): per-op times in results/ops, its "
            "timings distorted by the profiler and kept out of every verdict (v5; null before: not profiled)",
        ),
    ),
    *_group(
        "arm",
        ("engine", _STR, None, "engine kind: vllm, llamacpp, synthetic"),
        ("engine_env", _STR, None, "name of the engine environment (.venvs/<name>)"),
        ("model", _STR, None, "model path or name as given in the arm"),
        ("model_digest", _STR, None, "content digest of the model files"),
        ("dtype", _STR, None, "compute dtype of the model weights/activations"),
        ("quantization", _STR, None, "quantization method, None when unquantized"),
        ("kv_cache_bytes", _I64, "B", "KV cache budget requested by the arm"),
        ("context_len", _I32, "tok", "maximum context length requested"),
        ("prompt_len", _I32, "tok", "prompt length per sequence"),
        ("max_tokens", _I32, "tok", "tokens generated per sequence"),
        ("batch_size", _I32, "seq", "sequences per batch"),
        (
            "prompt_seed",
            _I32,
            None,
            "seed of the timed prompts, the arm's prompt_seed (v7; null before, "
            "when every run timed the prompts of seed 0)",
        ),
        ("threads", _I32, None, "compute threads requested"),
        ("compile_mode", _STR, None, "graph compilation mode (eager, compiled, cached...)"),
        ("patches", _STRS, None, "omni runtime patches enabled for this arm"),
        (
            "patch_report",
            _STR,
            None,
            "per vLLM process: each patch applied / not needed / failed, JSON list (v2)",
            _JSON,
        ),
        ("env_overrides", _STR, None, "environment variables set by the arm, JSON object", _JSON),
        ("engine_params", _STR, None, "engine-specific parameters, JSON object", _JSON),
        ("arm_json", _STR, None, "canonical JSON of the whole arm", _JSON),
        ("arm_hash", _STR, None, "hash of arm_json: same hash, same configuration"),
        ("threads_checked", _I32, None, "threads whose own affinity was checked in steady state (v2)"),
        ("mmap", _BOOL, None, "weights memory-mapped from the file: file-backed pages, not RssAnon (v2)"),
    ),
    *_group(
        "placement",
        ("slot_index", _I32, None, "NUMA slot the run was placed in"),
        ("numa_node", _I32, None, "NUMA node of the slot"),
        ("cpus", _INTS, None, "CPUs the run was bound to"),
        ("membind", _INTS, None, "NUMA nodes memory was bound to"),
        ("binding_method", _STR, None, "how the binding was applied", {"choices": BINDING_METHODS}),
        ("cpus_allowed_seen", _INTS, None, "Cpus_allowed_list seen, union over the process tree"),
        (
            "mems_allowed_seen",
            _INTS,
            None,
            "Mems_allowed_list seen, union over the tree: the cpuset's nodes, "
            "not the memory policy (numactl --membind does not change it)",
        ),
        ("binding_ok", _BOOL, None, "CPUs, memory policy and page placement seen matched the slot"),
        ("binding_procs_checked", _I32, None, "processes whose binding was checked"),
        ("straddle", _BOOL, None, "the slot spans several NUMA nodes, memory bound to all of them (v3)"),
        ("slots_override", _STR, None, "slots given on the command line (--cores/--node) instead of the spec's (v3)"),
        ("mempolicies_seen", _STRS, None, "memory policies seen in numa_maps, every process and thread, distinct (v3)"),
        (
            "mem_anon_kib_by_node",
            _I64S,
            "KiB",
            "the tree's anonymous memory per NUMA node (index = node), steady state (v3)",
        ),
        (
            "mem_file_kib_by_node",
            _I64S,
            "KiB",
            "the tree's mapped file pages per NUMA node (index = node), steady state (v3)",
        ),
        (
            "mem_local_fraction",
            _F64,
            None,
            "share of the tree's anonymous memory on the slot's nodes, steady state (v3)",
        ),
        ("mem_file_local_fraction", _F64, None, "share of the tree's mapped file pages on the slot's nodes (v3)"),
        ("numa_by_proc", _STR, None, "per process: pid, name, policies, anon/file KiB per node, JSON list (v3)", _JSON),
        ("numa_maps_reads", _I32, None, "reads of the whole tree's numa_maps during the run (v3)"),
        ("numa_maps_cpu_ms", _F64, "ms", "CPU the sampler spent reading numa_maps, all reads (v3)"),
        (
            "numa_steady_missing",
            _I32,
            None,
            "processes of the tree at the steady mark with no numa_maps read in "
            "steady state: their memory per node is from an earlier read; null: the run never got to steady (v6)",
        ),
        ("busy_max_pct", _F64, "%", "busiest slot CPU's load just before the run"),
        ("busy_waited_s", _F64, "s", "time the run waited for its slot's CPUs to fall below the busy threshold (v4)"),
        (
            "smt_mode",
            _STR,
            None,
            "slots.smt: false (one CPU per core, siblings idle and owned by the slot), true (the engine "
            "runs on the siblings), shared (siblings left to others) (v10)",
            {"choices": ("false", "true", "shared")},
        ),
        (
            "smt_siblings",
            _INTS,
            None,
            "idle SMT siblings of the slot's cores that it owned: busy-checked and CPU-locked with it (v10)",
        ),
        (
            "memory_binding_verified",
            _BOOL,
            None,
            "memory policy and page placement were checked on a steady-state numa_maps read of every "
            "process; false: not checked (no numactl, no numa_maps, or a read missed steady state, which "
            "nulls the per-node columns) (v10)",
        ),
        (
            "foreign_cpu_peak_pct",
            _F64,
            "%",
            "busiest slot CPU or owned sibling's time spent on work not the run's tree, in its worst "
            "window (>= 0.5 s) from the loaded mark to the steady mark, % of one CPU (v10)",
        ),
        (
            "foreign_cpu_mean_pct",
            _F64,
            "%",
            "time the slot's CPUs and owned siblings spent on work not the run's tree, loaded to steady "
            "mark, % of their capacity (v10)",
        ),
        (
            "run_delay_ms",
            _F64,
            "ms",
            "time the tree's threads waited runnable on a run queue (schedstat), loaded to steady mark, "
            "summed over threads (v10)",
        ),
        ("run_delay_ms_per_s", _F64, "ms/s", "run_delay_ms per second of the loaded-to-steady window (v10)"),
        ("interference_samples", _I32, None, "interference samples taken, loaded to steady mark (v10)"),
        ("interference_cpu_ms", _F64, "ms", "CPU the sampler spent on interference samples (v10)"),
        (
            "telemetry_window_s",
            _F64,
            "s",
            "the loaded-to-steady window the telemetry columns below cover (first to last interference sample) (v12)",
        ),
        (
            "ctx_switches_voluntary",
            _I64,
            None,
            "voluntary context switches of the tree's threads over the window: a thread that blocked (an "
            "OpenMP barrier that slept, I/O, a lock) (v12)",
        ),
        (
            "ctx_switches_involuntary",
            _I64,
            None,
            "involuntary context switches of the tree's threads over the window: the scheduler took the CPU "
            "from a runnable thread (a neighbour, another of the run's threads, a kernel thread) (v12)",
        ),
        (
            "cpu_migrations",
            _I64,
            None,
            "moves of the tree's threads between CPUs over the window (se.nr_migrations of each thread's "
            "sched file); null where the kernel has no sched file (v12)",
        ),
        ("minor_faults", _I64, None, "minor page faults of the tree's processes over the window (v12)"),
        (
            "major_faults",
            _I64,
            None,
            "major page faults (read from disk) of the tree's processes over the window (v12)",
        ),
        (
            "steal_pct",
            _F64,
            "%",
            "time the hypervisor ran something else on the slot CPUs' host cores over the window, % of "
            "their capacity (/proc/stat steal) (v12)",
        ),
        ("irq_pct", _F64, "%", "hard and soft interrupt time on the slot's CPUs over the window, % of capacity (v12)"),
        (
            "cpu_freq_mhz",
            _F64,
            "MHz",
            "mean of the slot CPUs' scaling_cur_freq over the window's samples; null without cpufreq (most VMs) (v12)",
        ),
        (
            "cpu_freq_min_mhz",
            _F64,
            "MHz",
            "lowest slot CPU frequency sampled in the window; null without cpufreq (v12)",
        ),
        (
            "energy_j",
            _F64,
            "J",
            "RAPL energy of every CPU package over the window: the sockets' whole draw, neighbours included; "
            "null where /sys/class/powercap is absent or unreadable (v12)",
        ),
        ("power_w", _F64, "W", "energy_j over the window (v12)"),
        (
            "thread_sched",
            _STR,
            None,
            "per engine thread over the window, busiest first (then the rest summed): name, process, tid, "
            "cpu_s, run_delay_ms, nvcsw, nivcsw, migrations, the CPUs it ran on; JSON list (v12)",
            _JSON,
        ),
        ("command", _STR, None, "engine command line, JSON argv list", _JSON),
    ),
    *_group(
        "metrics",
        (
            "load_s",
            _F64,
            "s",
            "engine process start to its `loaded` mark, timed by the orchestrator: interpreter, imports, weights, "
            "KV pool, compile (one span for every engine since v10)",
            _LOWER,
        ),
        (
            "ttft_ms",
            _F64,
            "ms",
            "time to first token of the whole batch: until every sequence has its first (the slowest request's TTFT)",
            _LOWER,
        ),
        ("prefill_tok_s", _F64, "tok/s", "prompt tokens of the batch over ttft_ms", _HIGHER),
        (
            "decode_tok_s",
            _F64,
            "tok/s",
            "tokens after each sequence's first, over the span from the earliest first token to the last token "
            "(lock step: batch x (max_tokens - 1) / (e2e - ttft))",
            _HIGHER,
        ),
        ("e2e_s", _F64, "s", "end-to-end generation time, engine-measured", _LOWER),
        (
            "joules_per_token",
            _F64,
            "J/tok",
            "power_w x e2e_s over the batch's output tokens (batch_size x max_tokens): the packages' energy "
            "per generated token, neighbours' draw included; null without RAPL (v12)",
            _LOWER,
        ),
        (
            "capacity_concurrency",
            _F64,
            "requests",
            "serving: requests in flight the server held within its SLO, interpolated between levels "
            "(omni.serving.levels.run_capacity); null when beyond the levels tried or not established "
            "(capacity_bounds) (v11; since v13 the SLO is judged on its percentile's 95 % upper bound, "
            "before on the point estimate)",
            _HIGHER,
        ),
        (
            "capacity_rate",
            _F64,
            "req/s",
            "serving: request rate the server held within its SLO, interpolated between levels; null when "
            "beyond the levels tried or not established (capacity_bounds) (v11; the SLO as capacity_concurrency)",
            _HIGHER,
        ),
        (
            "tpot_ms",
            _F64,
            "ms",
            "time per output token after the first, per request: (its last token - its first) / (its tokens - 1), "
            "median request (v4; before v10 (e2e - ttft) / (max_tokens - 1), the same in lock step)",
            _LOWER,
        ),
        (
            "itl_p50_ms",
            _F64,
            "ms",
            "inter-token latency, per request between consecutive token deliveries, median over every request "
            "of every iteration (v4; before v10 each decode step's wall time, the same in lock step)",
            _LOWER,
        ),
        ("itl_p90_ms", _F64, "ms", "inter-token latency, 90th percentile over every request's gaps (v4)", _LOWER),
        ("itl_p99_ms", _F64, "ms", "inter-token latency, 99th percentile over every request's gaps (v4)", _LOWER),
        # descriptive, not judged: a verdict per percentile would multiply the
        # tests for what ttft_ms and tpot_ms already judge
        (
            "ttft_p50_ms",
            _F64,
            "ms",
            "per-request time to first token, median over every request of every timed iteration (v10)",
        ),
        ("ttft_p99_ms", _F64, "ms", "per-request time to first token, 99th percentile, as ttft_p50_ms (v10)"),
        (
            "tpot_p99_ms",
            _F64,
            "ms",
            "per-request time per output token after the first, 99th percentile over every request (v10)",
        ),
        # what a pooled percentile is over, and what that count bounds of its p99 (omni.stats.quantiles)
        *[
            (f"{m}_samples", _I32, None, f"{what}, pooled over every timed iteration: what {m}_p*_ms are over (v13)")
            for m, what in _POOLED
        ],
        *[
            (
                f"{m}_p99_upper95_ms",
                _F64,
                "ms",
                f"95 % upper confidence bound of the true 99th percentile behind {m}_p99_ms: the order statistic "
                f"of the {m}_samples values that lies above it with chance >= 95 % if they are independent draws; "
                "null below 299 values, whose maximum bounds only the 100 x 0.05^(1/n)th percentile (v13)",
            )
            for m, _ in _POOLED
        ],
        (
            "lock_step",
            _BOOL,
            None,
            "every engine step of every timed iteration gave a token to every sequence not yet done; false: "
            "a prefill was chunked over steps or sequences were scheduled apart (not_lock_step); null: the "
            "engine reported no token times (v10)",
        ),
        (
            "partial_steps",
            _I32,
            None,
            "engine steps, summed over the timed iterations, that gave a token to fewer than all sequences not "
            "yet done; each iteration's tokens per step are in results/iterations step_tokens (v10)",
        ),
        (
            "iterations",
            _I32,
            None,
            "timed iterations in the run's one engine process; ttft, rates, e2e and "
            "tpot are their median, every iteration is in results/iterations (v4)",
        ),
        *[
            (
                f"{m}_iter_sd_log",
                _F64,
                None,
                f"within-run spread of {m}: sd of the log iteration values, about the relative sd (v4)",
            )
            for m in ("ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_s", "tpot_ms")
        ],
        *[
            (
                f"{m}_iter_ac1_log",
                _F64,
                None,
                f"lag-1 autocorrelation of {m}'s log iteration values in their order, -1 to 1: whether a slow "
                "iteration is followed by another (omni.stats.swing); null below 3 iterations or with no spread (v14)",
            )
            for m in ("ttft_ms", "prefill_tok_s", "decode_tok_s", "e2e_s", "tpot_ms")
        ],
        (
            "wall_s",
            _F64,
            "s",
            "wall time of the engine process, orchestrator-measured: from its start to its exit and the reaping of its tree",
            _LOWER,
        ),
        (
            "rss_anon_tree_mb",
            _F64,
            "MiB",
            "peak RssAnon summed over the process tree, over every sample from start to exit (load and "
            "warm-up included)",
            _LOWER,
        ),
        (
            "rss_anon_after_load_mb",
            _F64,
            "MiB",
            "tree RssAnon at the first sample after the engine's `loaded` mark, before any generation",
            _LOWER,
        ),
        (
            "rss_anon_steady_mb",
            _F64,
            "MiB",
            "tree RssAnon in the hold after generation: the median of the samples between the engine's `steady` "
            "and `teardown` marks, once the timed and audit generations are done and before it frees anything",
            _LOWER,
        ),
        ("pss_anon_tree_mb", _F64, "MiB", "peak anonymous Pss summed over the tree, start to exit", _LOWER),
        (
            "pss_anon_after_load_mb",
            _F64,
            "MiB",
            "tree anonymous Pss at the first sample after the `loaded` mark",
            _LOWER,
        ),
        (
            "pss_anon_steady_mb",
            _F64,
            "MiB",
            "tree anonymous Pss in the hold after generation (median after the `steady` mark)",
            _LOWER,
        ),
        ("rss_samples", _I32, None, "RssAnon samples taken"),
        ("rss_interval_ms", _F64, "ms", "interval between RssAnon samples"),
        ("pss_samples", _I32, None, "Pss samples taken"),
        ("pss_interval_ms", _F64, "ms", "interval between Pss samples"),
        ("kv_cache_bytes_effective", _I64, "B", "KV cache the engine actually allocated"),
        (
            "kv_cache_bytes_needed",
            _I64,
            "B",
            "KV cache the workload needs: batch_size x context_len (prompt_len + max_tokens when unset) x the "
            "engine's K and V bytes per token from the loaded model's layers, KV heads, head size and dtype (v10)",
        ),
        ("n_procs", _I32, None, "most processes seen at once in the engine's tree"),
        (
            "sampler_cpu_ms",
            _F64,
            "ms",
            "CPU the orchestrator's sampler spent watching this run (its thread, and the interference samples "
            "at the marks) (v12)",
        ),
        ("sampler_cpu_pct", _F64, "%", "sampler_cpu_ms over the time it sampled, % of one core (v12)"),
        ("profile_steps", _I32, None, "engine steps traced by a profiled run, one row each per op in results/ops (v5)"),
        (
            "profile_overhead",
            _F64,
            None,
            "a profiled run's median decode step time while traced over the same "
            "run's untraced one: what the profiler costs (v5)",
        ),
        (
            "engine_perf",
            _STR,
            None,
            "the engine's own phase totals (llama.cpp: llama_perf_context's load, "
            "prompt eval and eval ms and token counts), JSON object (v5)",
            _JSON,
        ),
    ),
    *_group(
        "serving",
        ("client_cpus", _INTS, None, "CPUs of a serving run's load generator, apart from the server's (v11)"),
        ("load_levels", _I32, None, "load levels a serving run completed; each is a record in results/levels (v11)"),
        (
            "capacity_bounds",
            _STR,
            None,
            "per kind of level (concurrency, rate) whose capacity is no figure, why: above or below the levels "
            "tried, unknown (a level it needed was not judged), or not_established (v13: a level's requests too "
            'few to bound the SLO\'s percentile at 95 %); JSON object, e.g. {"rate": "above"} (v11)',
            _JSON,
        ),
        ("slo", _STR, None, "the serving arm's SLO: ttft_ms, tpot_ms at percentile, JSON object (v11)", _JSON),
    ),
    *_group(
        "provenance",
        ("harness_version", _STR, None, "omni version"),
        ("harness_git_sha", _STR, None, "git commit of the omni checkout"),
        ("harness_git_dirty", _BOOL, None, "the omni checkout had uncommitted changes"),
        ("engine_version", _STR, None, "engine package version, engine-reported"),
        ("engine_commit", _STR, None, "engine source commit, engine-reported"),
        ("torch_version", _STR, None, "torch version in the engine env"),
        ("python_version", _STR, None, "Python of the orchestrator"),
        ("engine_python_version", _STR, None, "Python of the engine env"),
        ("host", _STR, None, "host name: the fleet host (omni worker --host) that ran it, else the machine's name"),
        ("hostname", _STR, None, "the machine's name (two fleet hosts may be one machine) (v6)"),
        ("kernel", _STR, None, "kernel release"),
        ("cpu_model", _STR, None, "CPU model name from /proc/cpuinfo"),
        ("cpu_flags", _STRS, None, "inference-relevant ISA flags present on the CPU"),
        ("isa_avx512_bf16", _BOOL, None, "CPU has AVX512-BF16"),
        ("isa_amx_bf16", _BOOL, None, "CPU has AMX-BF16"),
        ("isa_amx_int8", _BOOL, None, "CPU has AMX-INT8"),
        ("numa_nodes", _I32, None, "NUMA nodes on the host"),
        ("numa_topology", _STR, None, 'node -> CPUs, JSON object {"0": [0, 1]}', _JSON),
        (
            "host_conditions",
            _STR,
            None,
            "the host's settings that move CPU inference numbers, read as the run started (omni.host.conditions: "
            "governor, boost, SMT, THP, NUMA balancing, KSM, swap, isolation, SNC, hypervisor, ...), JSON (v12)",
            _JSON,
        ),
        ("spec_path", _STR, None, "path of the sweep spec file"),
        ("spec_sha256", _STR, None, "sha256 of the sweep spec file's bytes"),
        (
            "env_vars",
            _STR,
            None,
            "behaviour-changing environment variables of the engine process: what omni "
            "passed and the engine set (v4; v2-v3 rows hold the orchestrator's), JSON",
            _JSON,
        ),
        ("started_at", _TIME, None, "when the run started"),
        ("finished_at", _TIME, None, "when the run finished"),
        ("prefect_flow_run_id", _STR, None, "Prefect flow run, None outside Prefect"),
        ("engine_provenance", _STR, None, "other engine-reported facts, JSON object", _JSON),
        ("engine_env_key", _STR, None, "hash of the engine env's declaration in omni/envs/build.py (v2)"),
        (
            "engine_env_freeze_sha256",
            _STR,
            None,
            "sha256 of the engine env's pip freeze less omni's own editable "
            "install (v2; v2-v3 rows include omni's own line, so they differ with every omni commit)",
        ),
        (
            "engine_config",
            _STR,
            None,
            "the engine's effective configuration as it reported it (OMP bind, KV "
            "blocks, max_model_len, n_ctx...), JSON object (v4); engine_load_s: its own load clock (v10)",
            _JSON,
        ),
        (
            "compile_cache",
            _STR,
            None,
            "vLLM compiled mode, from the engine's log: how this start got its "
            "compiled graph: loaded (a warm AOT artifact, nothing compiled), compiled (no artifact to load; "
            "inductor's own caches may still have served parts), recompiled (an artifact failed to load); null: "
            "eager, AOT off, another engine, or a row before v8. The artifact's key covers the CPU binding: a "
            "warm start on other CPUs compiles (v8)",
        ),
    ),
    *_group(
        "validity",
        ("warnings", _STRS, None, "reasons to doubt this row's numbers"),
        ("warning_rules", _STRS, None, "the rule that raised each warning, same order"),
        (
            "tokens_mismatch_iterations",
            _I32,
            None,
            "timed iterations in which a sequence generated other than "
            "max_tokens, as the engine counted them (each iteration's counts: results/iterations tokens); "
            "above 0 the run is invalid (tokens_mismatch); null: not counted (v7)",
        ),
        (
            "audit_repeat_ttft_ratio",
            _F64,
            None,
            "median TTFT of timed iterations 1.. (repeats of iteration 0's "
            "prompts) over the faster first sight: iteration 0's, or audit_fresh_ttft_ms; well below 1, a cache "
            "served the repeats (repeat_faster); null below 3 iterations (v7)",
        ),
        (
            "audit_fresh_ttft_ms",
            _F64,
            "ms",
            "TTFT of a batch of fresh prompts the engine timed once after the "
            "timed iterations, the second first sight of the repeat audit; not in any metric (v7)",
        ),
        (
            "audit_repeat_ttft_cv",
            _F64,
            None,
            "robust CV of the TTFT of timed iterations 1.., the noise repeat_faster allows for (v7)",
        ),
        (
            "head_weight_type",
            _STR,
            None,
            "the output head's weight type as the engine loaded it (the tied embedding when there is no "
            "separate head): vLLM the lm_head weight's torch dtype, or the quantization method when its "
            "method is not unquantized (cpu_int4); llama.cpp output.weight's GGUF tensor type (q6_K, f16...); "
            "null: not reported (v10)",
        ),
        (
            "head_claim",
            _STR,
            None,
            "what was claimed about the output head and by whom, 'arm: ...' (quantization, int4_lm_head, "
            "gguf) or 'model: ...' (config.json quantization_config, GGUF general.file_type): a claim that "
            "it is quantized if any, else the first; null: none made. Quantized claim + dense head "
            "(f32/f16/bf16) = invalid (dense_head) (v10)",
        ),
        (
            "quantization_seen",
            _STR,
            None,
            "the quantization the engine applied, whatever the arm said: vLLM model_config.quantization, "
            "llama.cpp the GGUF's general.file_type (MOSTLY_Q4_0...); null: none, or not reported (v10)",
        ),
    ),
)

COLUMNS_BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}


def metric_columns() -> list[str]:
    """Metrics the registry says which way is better: the ones summaries judge."""
    return [c.name for c in COLUMNS if c.group == "metrics" and c.better]


@functools.cache
def schema() -> pa.Schema:
    """The current Arrow schema; unit, meaning and group ride in field metadata."""
    fields = []
    for col in COLUMNS:
        meta = {"meaning": col.meaning, "group": col.group}
        meta.update({k: v for k, v in (("unit", col.unit), ("better", col.better)) if v})
        fields.append(pa.field(col.name, col.type, metadata=meta))
    return pa.schema(fields, metadata={"omni.schema_version": str(SCHEMA_VERSION)})


@functools.cache
def file_schema() -> pa.Schema:
    """:func:`schema` without the per-field meaning and unit: a one-row file
    would carry 20 KB of the registry's text in its footer, and readers take
    them from the registry anyway (:func:`omni.store.dataset.upgrade_table`)."""
    return pa.schema([pa.field(f.name, f.type) for f in schema()], metadata=schema().metadata)
