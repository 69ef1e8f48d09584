"""The spec's models: an arm, its engine's parameters, a fleet's hosts, and
an arm's identity (a serving arm's load: :mod:`omni.spec.load`; where runs
go on a host: :mod:`omni.spec.slots`; engine envs: :mod:`omni.spec.envs`).

The models are strict: a spec is typed data, so ``threads: "2"`` or
``crash: yes`` is more likely a slip than a wish, and is an error. Each
rewrites pydantic's errors into plain words (:mod:`omni.spec.problems`) where
it knows its own keys.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from omni.spec.base import (  # noqa: F401  (the names every spec module imports from here)
    ENV_NAME,
    HOST_NAME,
    EnvName,
    Name,
    SpecModel,
    _check_host_name,
    _check_name,
)
from omni.spec.load import SERVED_ENGINES, LoadRequest, LoadSearch, Slo  # noqa: F401
from omni.spec.problems import problem, show, validation_error
from omni.spec.prompts import prompts_file_problems, random_prompt_problems
from omni.vllm_plugin import names as vllm_names


class SyntheticParams(SpecModel):
    """Parameters of the ``synthetic`` calibration engine: known memory, known CPU."""

    mem_mb: float = Field(0.0, ge=0)  # anonymous memory touched, split evenly over procs
    procs: int = Field(1, ge=1, le=64)  # main process + procs-1 children
    work_per_token: int = Field(20000, ge=0)  # busy-loop iterations per token per sequence
    prefill_work_per_token: int = Field(2000, ge=0)
    # seconds each decode step waits (not CPU): a decode speed this host's CPU
    # frequency swings cannot move, for tests of the statistics themselves
    step_sleep_ms: float = Field(0.0, ge=0)
    # timed generations in the one process; cheap here, and the same shape as the real engines'
    iterations: int = Field(5, ge=1, le=100)
    load_s: float = Field(0.0, ge=0)  # extra seconds spent "loading"
    hold_s: float = Field(0.3, ge=0)  # seconds holding memory after generating
    teardown_s: float = Field(0.0, ge=0, le=3600)  # seconds alive after freeing its memory, as a shutdown
    crash: bool = False  # die with an uncaught error after load
    hang: bool = False  # hang forever after load
    exit_code: int = Field(0, ge=0, le=255)  # non-zero: write nothing, exit with it
    daemonize: bool = False  # leave a setsid'ed daemon grandchild behind
    abort_at_exit: bool = False  # abort in teardown, after the result is written
    # escape the slot's memory binding after load, as a misbehaving engine would:
    # reset_policy: set_mempolicy(MPOL_DEFAULT) and allocate again;
    # migrate_pages: move every page to a node outside the slot
    escape: Literal["none", "reset_policy", "migrate_pages"] = "none"
    # a prefix cache, as an engine might keep one unasked: a prompt this process
    # has prefilled before costs this share less prefill work the next time
    # (0: no cache), for tests of the repeat_faster audit
    prefix_cache: float = Field(0.0, ge=0, le=1)
    # the timed iteration (from 0) in which the batch's last sequence stops one
    # token short, as an engine stopping early would; None: none does (tokens_mismatch)
    short_iteration: int | None = Field(None, ge=0)
    # prompt tokens prefilled per step, less one per sequence decoding in it, as
    # vLLM chunks a prefill at max_num_batched_tokens: sequences decode while
    # later ones wait for their first token (not_lock_step); None: one step
    # prefills every prompt
    prefill_chunk_tokens: int | None = Field(None, ge=1)


class VllmParams(SpecModel):
    """Parameters of the ``vllm`` engine (offline ``LLM`` on CPU)."""

    load_format: Literal["auto", "dummy"] = "auto"  # dummy: real shapes, random weights, no checkpoint
    prefix_caching: bool = False  # on, a repeated prompt's prefill would be a cache hit
    warmup: int = Field(1, ge=0, le=10)  # untimed generations before the timed ones
    # timed generations per engine start: 5, as `vllm bench latency` is run here;
    # on a tiny model they cost a few % of the 45-60 s start
    iterations: int = Field(5, ge=1, le=100)
    hold_s: float = Field(0.5, ge=0)  # seconds held in steady state for the memory sampler
    int4_group_size: Literal[32, 64, 128] = 128  # quantization: cpu_int4 only
    # False keeps the output head (lm_head) in bf16: the W4 setup once retracted for it
    int4_lm_head: bool = True
    # prompt tokens (plus one per decoding sequence) vLLM's scheduler puts in
    # one step; a prefill past it is chunked over several steps, and the batch
    # is not decoded in lock step (the not_lock_step warning). None: enough for
    # the whole batch's prefill in one step (omni.engines.vllm.batched_tokens)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    # How a generation's batch reaches vLLM's engine core (omni.engines.vllm.timed_generate).
    # paused: added with the scheduler paused, so its first step sees every
    # prompt (lock step, unless max_num_batched_tokens chunks the prefill).
    # as_generate: added as LLM.generate adds it (`vllm bench latency`): the
    # engine core steps on the first request while the others are added, so
    # early steps hold part of the batch; partial_steps counts them, and the
    # arm asked for them (no not_lock_step warning)
    admission: Literal["paused", "as_generate"] = "paused"


class LlamacppParams(SpecModel):
    """Parameters of the ``llamacpp`` engine (llama-cpp-python's C API)."""

    gguf: Literal["bf16", "q8_0", "q4_0"] = "bf16"  # which GGUF of a model preset
    # mmap on: weights are file-backed pages, not RssAnon; memory is then not
    # comparable with an arm that reads them into anonymous memory
    mmap: bool = False
    # llama.cpp's weight repacking into its extra buffer types, as llama.cpp
    # does by default (llama-cli's --no-repack turns it off): AMX tiles on a CPU
    # with AMX, CPU_REPACK's interleaved layouts on AVX2/AVX-512, for the
    # quantized types they have kernels for. The row's engine_config says which
    # buffers held the weights (weight_buffers). This env's llama.cpp crashes
    # (SIGSEGV in ggml_backend_amx_mul_mat) on a quantized GGUF it repacked for
    # AMX: false runs such an arm on the plain CPU kernels
    repack: bool = True
    # a serving arm's llama-server reuses a slot's KV for the prompt's common
    # prefix with the slot's last request (--cache-prompt), as vLLM's
    # prefix_caching reuses cached blocks; off, every request is prefilled
    # whole (--no-cache-prompt). The offline engine clears its KV between
    # generations: there it is refused
    prefix_caching: bool = False
    warmup: int = Field(1, ge=0, le=10)
    iterations: int = Field(5, ge=1, le=100)  # timed generations per process: llama-bench's default -r 5
    hold_s: float = Field(0.5, ge=0)


# Engines known now; an arm's params are validated against its engine's model.
ENGINE_PARAMS: dict[str, type[BaseModel]] = {
    "synthetic": SyntheticParams,
    "vllm": VllmParams,
    "llamacpp": LlamacppParams,
}


PROFILED_ENGINES = ("vllm", "llamacpp")


class ProfileRequest(SpecModel):
    """``profile: {steps: 16, passes: 3}``: extra runs of the arm, each profiling
    ``steps`` engine steps after its timed iterations; never timed passes."""

    steps: int = Field(16, ge=1, le=256)  # engine steps (forward passes) profiled per run
    # profiled runs of the arm; 2 or more measure the op-level noise between runs
    passes: int = Field(3, ge=1, le=100)


class Arm(SpecModel):
    """One configuration of a sweep, run for every pass."""

    name: Name
    engine: str
    engine_env: str | None = None  # None: the orchestrator's own python
    model: str | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = None
    quantization: str | None = None
    context_len: int | None = Field(None, ge=1)
    prompt_len: int = Field(128, ge=1)
    max_tokens: int = Field(32, ge=1)
    batch_size: int = Field(1, ge=1)
    # seed of the timed prompts (token ids, omni.engines.common.token_prompts):
    # an audit rerun of the arm on other prompts; not the sweep's seed, which
    # shuffles the order of arms
    prompt_seed: int = Field(0, ge=0, le=2**31 - 1)
    threads: int | None = Field(None, ge=1)
    kv_cache_bytes: int | None = Field(None, ge=1)
    compile_mode: Literal["eager", "compiled"] | None = None
    # omni's vLLM patches: "all" unless the arm says (vLLM arms measure patched
    # vLLM by default; "none" measures stock); other engines have none
    patches: Literal["all", "none"] | list[str] = "none"
    env: dict[EnvName, str] = {}
    # profiled passes on top of the timed ones (profiling distorts timing):
    # per-op self time per engine step, in results/ops
    profile: ProfileRequest | None = None
    # a serving arm: the engine as a server under these load levels (docs/serving.md)
    load: LoadRequest | None = None
    # Validated by ENGINE_PARAMS[engine] and stored with its defaults, also when
    # omitted, so an arm's identity does not depend on spelling defaults out.
    params: dict[str, Any] = Field(default_factory=dict, validate_default=True)

    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, dict) and "patches" not in data and data.get("engine") == "vllm":
            data = {**data, "patches": "all"}
        return handler(data)

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in ENGINE_PARAMS:
            raise problem(f"unknown engine {value!r} (known: {', '.join(sorted(ENGINE_PARAMS))})")
        return value

    @field_validator("patches", mode="before")
    @classmethod
    def _patch_choice(cls, value: Any) -> Any:
        # Checked here so a bad value gets one message, not one per union member.
        if value in ("all", "none"):
            return value
        if isinstance(value, list) and all(isinstance(p, str) and p for p in value):
            unknown = [p for p in value if p not in vllm_names.PATCHES]
            if unknown:
                raise problem(f"unknown patch(es) {unknown} (known: {', '.join(vllm_names.PATCHES)})")
            return value
        raise problem(f"must be 'all', 'none' or a list of patch names, got {show(value)}")

    @field_validator("profile", "load")
    @classmethod
    def _engine_offers(cls, value, info: ValidationInfo):
        """profile: needs an engine with a profiler, load: one with a server."""
        engine = info.data.get("engine")
        lacks, engines = ("profiler", PROFILED_ENGINES) if info.field_name == "profile" else ("server", SERVED_ENGINES)
        if value is not None and engine in ENGINE_PARAMS and engine not in engines:
            raise problem(f"engine {engine!r} has no {lacks}; {info.field_name}: works with {', '.join(engines)}")
        return value

    @field_validator("quantization")
    @classmethod
    def _known_quantization(cls, value: str | None) -> str | None:
        if value is not None and value not in vllm_names.QUANTIZATIONS:
            raise problem(f"unknown quantization {value!r} (known: {', '.join(vllm_names.QUANTIZATIONS)})")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        # YAML reads `OMP_NUM_THREADS: 4` as an int; an env var is text either way.
        if not isinstance(value, dict):
            return value
        return {k: _env_text(v) for k, v in value.items()}

    @field_validator("params", mode="before")
    @classmethod
    def _engine_params(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, BaseModel):
            value = value.model_dump()
        engine = info.data.get("engine")  # absent when the engine itself was bad
        if engine not in ENGINE_PARAMS or not isinstance(value, dict):
            return value
        return ENGINE_PARAMS[engine].model_validate(value).model_dump()

    @field_validator("params")
    @classmethod
    def _step_budget(cls, value: Any, info: ValidationInfo) -> Any:
        # vLLM refuses a step budget below one token per sequence (SchedulerConfig.verify_max_model_len)
        budget, batch = (value or {}).get("max_num_batched_tokens"), info.data.get("batch_size")
        if info.data.get("engine") == "vllm" and budget is not None and batch is not None and budget < batch:
            raise problem(
                f"max_num_batched_tokens {budget} is below batch_size {batch}: vLLM needs a token per "
                "sequence in a step; unset, omni fits the whole batch's prefill in one step"
            )
        return value

    @model_validator(mode="after")
    def _request_mix(self) -> Arm:
        """What a serving arm's requests are made of fits the arm: a prefix
        shorter than the prompt it begins, a prompts file's lengths not also
        given by the arm, llama.cpp's prompt cache only where it has a server,
        and vLLM's admission of a batch only where there is one (offline)."""
        problems = []
        if self.engine == "llamacpp" and self.load is None and (self.params or {}).get("prefix_caching"):
            problems.append(
                (
                    ("params", "prefix_caching"),
                    "llama.cpp's prefix caching is llama-server's prompt cache, a serving arm's (load:); "
                    "the offline engine clears its KV cache between generations",
                )
            )
        if self.engine == "vllm" and self.load is not None and (self.params or {}).get("admission") == "as_generate":
            problems.append(
                (
                    ("params", "admission"),
                    "admission is how the offline engine adds its batch; a serving arm's requests reach "
                    "the server as its load generator sends them: drop admission or load:",
                )
            )
        if self.load is not None:
            problems += (prompts_file_problems if self.load.prompts else random_prompt_problems)(self)
        if problems:
            raise validation_error("Arm", problems)
        return self

    def engine_params(self) -> BaseModel:
        """The validated params model of this arm's engine."""
        return ENGINE_PARAMS[self.engine].model_validate(self.params)


def _env_text(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


# --- identity ---


# Fields added after runs were stored under hashes without them: out of the
# identity while at their default, so those arms (and their stored runs) keep
# their hashes. ``profile`` adds runs, it changes none; ``load`` unset is an
# offline arm, as every arm was before serving arms; ``prompt_seed`` 0 is
# the prompts every run timed before it existed; the synthetic engine's
# fault knobs change nothing while off; vLLM's max_num_batched_tokens unset
# leaves vLLM's own budget wherever the batch's prefill fitted in it, as every
# stored run had (omni.engines.vllm.batched_tokens); its admission paused is
# what the engine has done since it began timing every token (runs stored
# before that added their batch unpaused, under the same hashes); llama.cpp's
# repack on is what every llama.cpp run did before it could be turned off,
# and its prefix caching off what every llama-server ran with before it
# could be turned on;
# a serving arm's completions endpoint, no shared prefix and no prompts file
# are the requests every serving run sent before the request mixes.
LATE_ARM_FIELDS = ("profile", "prompt_seed", "load")
LATE_PARAMS = {
    "synthetic": ("prefix_cache", "short_iteration", "prefill_chunk_tokens", "teardown_s"),
    "vllm": ("max_num_batched_tokens", "admission"),
    "llamacpp": ("repack", "prefix_caching"),
}
LATE_LOAD_FIELDS = ("endpoint", "prefix_len", "prompts")


def canonical_arm_json(arm: Arm) -> str:
    """Deterministic JSON of the arm, defaults included: the run identity.

    Every field takes part, so adding an Arm field changes every hash (a resume
    across such a change reruns everything, which is the safe side), but for
    :data:`LATE_ARM_FIELDS`, :data:`LATE_PARAMS` and :data:`LATE_LOAD_FIELDS`
    at their defaults. A prompts file takes part by its content's digest, not
    its path: the same mix is the same arm wherever its file lies, and an
    edited file is another arm.
    """
    fields = arm.model_dump(mode="json")
    for name in LATE_ARM_FIELDS:
        if getattr(arm, name) == Arm.model_fields[name].default:
            del fields[name]
    if "load" in fields:
        for name in LATE_LOAD_FIELDS:
            if fields["load"][name] == LoadRequest.model_fields[name].default:
                del fields["load"][name]
        if arm.load.prompts_sha256:
            fields["load"]["prompts"] = f"sha256:{arm.load.prompts_sha256}"
    defaults = ENGINE_PARAMS[arm.engine].model_fields
    for name in LATE_PARAMS.get(arm.engine, ()):
        if name in fields["params"] and fields["params"][name] == defaults[name].default:
            del fields["params"][name]
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)


def arm_hash(arm: Arm) -> str:
    return hashlib.sha256(canonical_arm_json(arm).encode()).hexdigest()


class Hosts(SpecModel):
    """A fleet sweep: which ``omni worker --host NAME`` hosts run it, and how.

    ``replicate`` runs the whole plan on every host (arms judged within each
    host); ``split`` spreads the passes over hosts that must be identical
    (ISA, CPU model, topology) to finish sooner.
    """

    names: Any  # a list of host names, or "all": the hosts alive at the start
    mode: Literal["replicate", "split"] = "replicate"

    @field_validator("names")
    @classmethod
    def _names(cls, value: Any) -> list[str] | str:
        if value == "all":
            return value
        if not isinstance(value, list) or not value:
            raise problem(f"give a list of host names (as given to omni worker --host) or all, got {value!r}")
        for name in value:
            if not isinstance(name, str):
                raise problem(f"{name!r} is not a host name")
            _check_host_name(name)
        repeated = sorted({n for n in value if value.count(n) > 1})
        if repeated:
            raise problem(f"host(s) named more than once: {', '.join(repeated)}")
        return value
