"""The spec's models: an arm, its engine's parameters, a serving arm's load,
a fleet's hosts, and an arm's identity (where runs go on a host: :mod:`omni.spec.slots`).

The models are strict: a spec is typed data, so ``threads: "2"`` or
``crash: yes`` is more likely a slip than a wish, and is an error. Each
rewrites pydantic's errors into plain words (:mod:`omni.spec.problems`) where
it knows its own keys.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from omni.spec.problems import plain_text, problem, show, validation_error
from omni.spec.prompts import (
    PromptsFile,
    checked_prompts_file,
    prompts_file_problems,
    prompts_path,
    random_prompt_problems,
)
from omni.vllm_plugin import names as vllm_names

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")
_NAME_MAX = 80
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_name(value: str) -> str:
    if len(value) > _NAME_MAX:
        raise problem(f"must be at most {_NAME_MAX} characters, got {len(value)}")
    if not _NAME.match(value):
        raise problem(
            f"{value!r} is not a valid name: use letters, digits and _ . = + - (starting with a letter or digit)"
        )
    return value


def _matching(pattern: re.Pattern, what: str):
    """A validator: the value must match ``pattern``, else it is not ``what``."""

    def check(value: str) -> str:
        if not pattern.match(value):
            raise problem(f"{value!r} is not {what}")
        return value

    return check


_check_env_name = _matching(ENV_NAME, "an environment variable name (letters, digits and _, not starting with a digit)")
HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_check_host_name = _matching(
    HOST_NAME,
    "a fleet host name: lower-case letters, digits, _ and - (starting with a "
    "letter or digit, at most 63), as given to omni worker --host",
)


Name = Annotated[str, AfterValidator(_check_name)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]


class SpecModel(BaseModel):
    """Base of every spec model: unknown keys rejected, immutable, no coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="wrap")
    @classmethod
    def _plain_errors(cls, data: Any, handler: Any) -> Any:
        # Rewritten here, where the model is known, so "unknown key" can list
        # this model's keys and callers outside load_spec get plain words too.
        try:
            return cls._validate(data, handler)
        except ValidationError as err:
            problems = [(e["loc"], plain_text(e, cls)) for e in err.errors()]
            raise validation_error(cls.__name__, problems) from None

    @classmethod
    def _validate(cls, data: Any, handler: Any) -> Any:
        """Hook for a model that reshapes its input first (Sweep expands matrix:)."""
        return handler(data)

    @classmethod
    def known_keys(cls) -> list[str]:
        return list(cls.model_fields)


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


SERVED_ENGINES = ("vllm", "llamacpp")


class Slo(SpecModel):
    """A serving level's service-level objective: its TTFT and TPOT at a
    percentile. The defaults are MLPerf Inference's Llama-3.1-8B server limits
    (TTFT 2 s and TPOT 100 ms at p99): a stated default, shown in every
    capacity figure, not a hidden one."""

    ttft_ms: float = Field(2000.0, gt=0)
    tpot_ms: float = Field(100.0, gt=0)
    percentile: Literal[50, 90, 99] = 99


class LoadSearch(SpecModel):
    """``load.search``: find the highest load within the SLO
    (:mod:`omni.serving.search`) instead of naming levels. ``kind``:
    concurrency (requests in flight) or rate (open loop, req/s); at most
    ``levels`` levels a run; ``max_concurrency`` is the highest concurrency
    tried, and for a rate search the throughput level's (unset: 4 x
    batch_size); the search stops once its bracket is within ``precision``
    of its lower end."""

    kind: Literal["concurrency", "rate"] = "concurrency"
    levels: int = Field(8, ge=3, le=32)
    max_concurrency: int | None = Field(None, ge=2, le=4096)
    precision: float = Field(0.1, gt=0, le=1)


class LoadRequest(SpecModel):
    """``load:``: the arm runs as an OpenAI-compatible server in its slot and
    a load generator (``vllm bench serve``) in the slot's client CPUs drives
    it through these levels, in an order the sweep's seed shuffles per run
    (each pass's load generator seed is drawn from ``seed`` and the pass:
    fresh prompts, lengths and arrivals every pass, the same for the arms of one).

    ``concurrency``: closed-loop levels, requests in flight
    (``--max-concurrency``); ``rate``: open-loop levels in requests/s, arrivals
    a gamma process of shape ``burstiness`` (1: Poisson). Prompts are
    ``prompt_len`` tokens, the first ``prefix_len`` shared, and answers
    ``max_tokens``, each drawn uniformly within +-``range_ratio`` of them, or
    they are a prompts file's (:mod:`omni.spec.prompts`), sent to ``endpoint``
    (docs/serving.md, request mixes); ``batch_size`` is the server's number of
    sequences at once (vLLM ``max_num_seqs``, llama-server ``--parallel``).
    """

    concurrency: list[int] = []
    rate: list[float] = []
    burstiness: float = Field(1.0, gt=0)
    # measured requests per level, those in its steady window (the client
    # sends more: omni.serving.levels.requests_to_send); unset: the fewest
    # that bound the SLO's percentile at 95 % (5 for p50, 29 for p90, 299 for p99)
    requests: int = Field(ge=1, le=100000)
    warmup: int = Field(2, ge=0, le=1000)  # requests per level before them, not measured
    # The shortest steady window a level is judged on, in seconds. A rate
    # level sends rate x this many requests at least; a level whose window
    # still came out shorter (a closed loop's length is not known before)
    # runs once more with more requests, and is flagged short_window if it
    # is still short. 10 s: the server's
    # /metrics (scraped every second) sees the level ten times, the client's
    # CPUs are sampled twenty (every 0.5 s, the interference rule's window),
    # and a neighbour's duty cycle of tens to hundreds of ms repeats many
    # times over. MLPerf's server scenario runs 600 s; a level's count for
    # its percentile (299 for p99) usually takes longer than 10 s anyway.
    min_duration_s: float = Field(10.0, ge=0, le=3600)
    range_ratio: float = Field(0.0, ge=0, lt=1)
    # where a request goes: completions (/v1/completions, the prompt as text) or
    # chat (/v1/chat/completions, the prompt as a user message the server templates)
    endpoint: Literal["completions", "chat"] = "completions"
    # random prompts: the first prefix_len of each prompt's prompt_len tokens
    # are the same in every request of a run (a shared system prompt)
    prefix_len: int = Field(0, ge=0)
    # a JSONL of prompts (omni.spec.prompts), relative to the spec file's
    # folder: the requests' prompts and answer lengths; stored resolved
    prompts: str | None = None
    _prompts: PromptsFile | None = PrivateAttr(None)  # the file as read when the spec was
    seed: int = Field(0, ge=0, le=2**31 - 1)  # the passes' seeds are drawn from it (workload_seed)
    slo: Slo = Slo()
    search: LoadSearch | None = None

    @model_validator(mode="before")
    @classmethod
    def _requests_for_the_percentile(cls, data: Any) -> Any:
        """``requests`` left out: as many as bound the SLO's percentile, so a
        default level can say whether it meets its SLO."""
        if not isinstance(data, dict) or "requests" in data:
            return data
        slo = data.get("slo")
        percentile = (slo.get("percentile", 99) if isinstance(slo, dict) else getattr(slo, "percentile", 99)) or 99
        if percentile not in (50, 90, 99):
            percentile = 99  # Slo says what is wrong with it; nothing more to say here
        from omni.stats.quantiles import min_samples  # scipy: only for a spec that needs it

        return {**data, "requests": min_samples(percentile / 100)}

    @field_validator("prompts")
    @classmethod
    def _prompts_path(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else prompts_path(value, info.context)

    @model_validator(mode="after")
    def _prompts_file(self, info: ValidationInfo) -> LoadRequest:
        if self.prompts is not None and (info.context or {}).get("read_files", True):
            self._prompts = checked_prompts_file(Path(self.prompts), self.requests)
        return self

    @property
    def prompts_sha256(self) -> str | None:
        """The prompts file's content digest, as read with the spec; None without one."""
        return self._prompts.sha256 if self._prompts else None

    @property
    def prompts_output_tokens(self) -> bool:
        """Every line of the prompts file gives its answer's length."""
        return bool(self._prompts and self._prompts.output_tokens)

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, value: list[int]) -> list[int]:
        if any(c < 1 for c in value):
            raise problem(f"concurrency levels must be >= 1, got {value}")
        if len(set(value)) < len(value):
            raise problem(f"a concurrency level is named twice: {value}")
        return sorted(value)

    @field_validator("rate", mode="before")
    @classmethod
    def _rates_as_numbers(cls, value: Any) -> Any:
        # YAML reads `rate: [1, 2]` as ints; a rate is a number of requests per second either way
        if isinstance(value, list):
            return [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
        return value

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: list[float]) -> list[float]:
        if any(r <= 0 for r in value):
            raise problem(f"rates are requests per second, > 0; got {value}")
        if len(set(value)) < len(value):
            raise problem(f"a rate is named twice: {value}")
        return sorted(value)

    @model_validator(mode="after")
    def _some_level(self) -> LoadRequest:
        if self.search is not None and (self.concurrency or self.rate):
            raise validation_error(
                "LoadRequest",
                [(("search",), "a search chooses its own levels: drop concurrency: and rate:, or drop search:")],
            )
        if not self.concurrency and not self.rate and self.search is None:
            raise validation_error(
                "LoadRequest",
                [
                    (
                        (),
                        "name at least one level: concurrency: [1, 4] (requests in flight) or rate: [0.5, 1] "
                        "(req/s), or search for the capacity: search: {kind: concurrency}",
                    )
                ],
            )
        return self


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
        given by the arm, and llama.cpp's prompt cache only where it has a server."""
        problems = []
        if self.engine == "llamacpp" and self.load is None and (self.params or {}).get("prefix_caching"):
            problems.append(
                (
                    ("params", "prefix_caching"),
                    "llama.cpp's prefix caching is llama-server's prompt cache, a serving arm's (load:); "
                    "the offline engine clears its KV cache between generations",
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
# stored run had (omni.engines.vllm.batched_tokens); llama.cpp's repack on is
# what every llama.cpp run did before it could be turned off, and its prefix
# caching off what every llama-server ran with before it could be turned on;
# a serving arm's completions endpoint, no shared prefix and no prompts file
# are the requests every serving run sent before the request mixes.
LATE_ARM_FIELDS = ("profile", "prompt_seed", "load")
LATE_PARAMS = {
    "synthetic": ("prefix_cache", "short_iteration", "prefill_chunk_tokens", "teardown_s"),
    "vllm": ("max_num_batched_tokens",),
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
