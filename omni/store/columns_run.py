"""The run registry's columns of what ran and where it came from: the row's
identity and outcome (group identity), the arm it executed (arm), and the
software, host and spec behind it (provenance). Assembled in order by
:mod:`omni.store.columns`.
"""

from __future__ import annotations

from omni.store.column_type import BOOL, I16, I32, I64, JSON, STR, STRS, TIME, Column, declare

STATUSES = ("ok", "failed", "timeout", "refused", "invalid")

IDENTITY: tuple[Column, ...] = declare(
    "identity",
    ("schema_version", I16, None, "version of this registry the row was written with"),
    ("run_id", STR, None, "unique id of the run: hash of the sweep id, canonical arm and pass"),
    ("sweep_id", STR, None, "unique id of the sweep the run belongs to"),
    ("sweep_name", STR, None, "human name of the sweep, from the spec"),
    ("note", STR, None, "free text given with omni sweep --note, the same in every row of the sweep (v9)"),
    ("arm", STR, None, "name of the arm (configuration) this run executed"),
    ("pass_index", I32, None, "which pass over all arms, from 0"),
    ("order_index", I32, None, "position of the run in the sweep's interleaved schedule"),
    ("attempt", I32, None, "attempt number for this arm and pass, from 1"),
    ("status", STR, None, "outcome of the run", {"choices": STATUSES}),
    ("error", STR, None, "why the run did not succeed, for people"),
    ("exit_code", I32, None, "exit status of the engine process; negative = killed by signal"),
    ("stderr_tail", STR, None, "last lines of the engine's stderr"),
    ("forced", BOOL, None, "run despite a refusal (e.g. busy cores), by request"),
    (
        "profiled",
        BOOL,
        None,
        "a profiled pass (the arm's profile:): per-op times in results/ops, its "
        "timings distorted by the profiler and kept out of every verdict (v5; null before: not profiled)",
    ),
)

ARM: tuple[Column, ...] = declare(
    "arm",
    ("engine", STR, None, "engine kind: vllm, llamacpp, synthetic"),
    ("engine_env", STR, None, "name of the engine environment (.venvs/<name>)"),
    ("model", STR, None, "model path or name as given in the arm"),
    ("model_digest", STR, None, "content digest of the model files"),
    ("dtype", STR, None, "compute dtype of the model weights/activations"),
    ("quantization", STR, None, "quantization method, None when unquantized"),
    ("kv_cache_bytes", I64, "B", "KV cache budget requested by the arm"),
    ("context_len", I32, "tok", "maximum context length requested"),
    ("prompt_len", I32, "tok", "prompt length per sequence"),
    ("max_tokens", I32, "tok", "tokens generated per sequence"),
    ("batch_size", I32, "seq", "sequences per batch"),
    (
        "prompt_seed",
        I32,
        None,
        "seed of the timed prompts, the arm's prompt_seed (v7; null before, "
        "when every run timed the prompts of seed 0)",
    ),
    ("threads", I32, None, "compute threads requested"),
    ("compile_mode", STR, None, "graph compilation mode (eager, compiled, cached...)"),
    ("patches", STRS, None, "omni runtime patches enabled for this arm"),
    (
        "patch_report",
        STR,
        None,
        "per vLLM process: each patch applied / not needed / failed, JSON list (v2)",
        JSON,
    ),
    ("env_overrides", STR, None, "environment variables set by the arm, JSON object", JSON),
    ("engine_params", STR, None, "engine-specific parameters, JSON object", JSON),
    ("arm_json", STR, None, "canonical JSON of the whole arm", JSON),
    (
        "arm_hash",
        STR,
        None,
        "hash of arm_json: same hash, same configuration as the spec wrote it; its engine env is named, "
        "not hashed (an env following the newest release moves): engine_env_key says which build ran",
    ),
    ("threads_checked", I32, None, "threads whose own affinity was checked in steady state (v2)"),
    ("mmap", BOOL, None, "weights memory-mapped from the file: file-backed pages, not RssAnon (v2)"),
)

PROVENANCE: tuple[Column, ...] = declare(
    "provenance",
    ("harness_version", STR, None, "omni version"),
    ("harness_git_sha", STR, None, "git commit of the omni checkout"),
    ("harness_git_dirty", BOOL, None, "the omni checkout had uncommitted changes"),
    ("engine_version", STR, None, "engine package version, engine-reported"),
    ("engine_commit", STR, None, "engine source commit, engine-reported"),
    ("torch_version", STR, None, "torch version in the engine env"),
    ("python_version", STR, None, "Python of the orchestrator"),
    ("engine_python_version", STR, None, "Python of the engine env"),
    ("host", STR, None, "host name: the fleet host (omni worker --host) that ran it, else the machine's name"),
    ("hostname", STR, None, "the machine's name (two fleet hosts may be one machine) (v6)"),
    ("kernel", STR, None, "kernel release"),
    ("cpu_model", STR, None, "CPU model name from /proc/cpuinfo"),
    ("cpu_flags", STRS, None, "inference-relevant ISA flags present on the CPU"),
    ("isa_avx512_bf16", BOOL, None, "CPU has AVX512-BF16"),
    ("isa_amx_bf16", BOOL, None, "CPU has AMX-BF16"),
    ("isa_amx_int8", BOOL, None, "CPU has AMX-INT8"),
    ("numa_nodes", I32, None, "NUMA nodes on the host"),
    ("numa_topology", STR, None, 'node -> CPUs, JSON object {"0": [0, 1]}', JSON),
    (
        "host_conditions",
        STR,
        None,
        "the host's settings that move CPU inference numbers, read as the run started (omni.host.conditions: "
        "governor, boost, SMT, THP, NUMA balancing, KSM, swap, isolation, SNC, hypervisor, ...), JSON (v12)",
        JSON,
    ),
    ("spec_path", STR, None, "path of the sweep spec file"),
    ("spec_sha256", STR, None, "sha256 of the sweep spec file's bytes"),
    (
        "spec_text",
        STR,
        None,
        "the sweep spec file's own text, as its sha256 was taken: what omni reproduce reruns from a "
        "results file alone (v18)",
    ),
    (
        "reproduces",
        STR,
        None,
        "the sweep this sweep reproduces (omni reproduce), the same in every row of the sweep (v18)",
    ),
    (
        "env_vars",
        STR,
        None,
        "behaviour-changing environment variables of the engine process: what omni "
        "passed and the engine set (v4; v2-v3 rows hold the orchestrator's), JSON",
        JSON,
    ),
    ("started_at", TIME, None, "when the run started"),
    ("finished_at", TIME, None, "when the run finished"),
    ("prefect_flow_run_id", STR, None, "Prefect flow run, None outside Prefect"),
    ("engine_provenance", STR, None, "other engine-reported facts, JSON object", JSON),
    ("engine_env_key", STR, None, "hash of the engine env's declaration (envs.yaml or the spec's envs:) (v2)"),
    (
        "engine_env_pins",
        STR,
        None,
        "the engine env's requirements as built, space-separated: an env following the newest "
        "release names the release it resolved to (v17)",
    ),
    (
        "engine_env_declaration",
        STR,
        None,
        "the engine env's declaration as it was built (requirements pinned where it follows the newest "
        "release; envs.yaml or the spec's envs:), JSON: what omni reproduce builds the env from (v18)",
        JSON,
    ),
    (
        "model_recipe",
        STR,
        None,
        "how the model was had: a factory preset and its definition (and the GGUF type), or the path given, "
        "JSON; model_digest is what it made (v18)",
        JSON,
    ),
    (
        "engine_env_freeze_sha256",
        STR,
        None,
        "sha256 of the engine env's pip freeze less omni's own editable "
        "install (v2; v2-v3 rows include omni's own line, so they differ with every omni commit)",
    ),
    (
        "engine_config",
        STR,
        None,
        "the engine's effective configuration as it reported it (OMP bind, KV "
        "blocks, max_model_len, n_ctx...), JSON object (v4); engine_load_s: its own load clock (v10)",
        JSON,
    ),
    (
        "compile_cache",
        STR,
        None,
        "vLLM compiled mode, from the engine's log: how this start got its "
        "compiled graph: loaded (a warm AOT artifact, nothing compiled), compiled (no artifact to load; "
        "inductor's own caches may still have served parts), recompiled (an artifact failed to load); null: "
        "eager, AOT off, another engine, or a row before v8. The artifact's key covers the CPU binding: a "
        "warm start on other CPUs compiles (v8)",
    ),
)
