"""The spec's models: an arm, its engine's parameters, and where runs go.

The models are strict: a spec is typed data, so ``threads: "2"`` or
``crash: yes`` is more likely a slip than a wish, and is an error. Each
rewrites pydantic's errors into plain words (:mod:`omni.spec.problems`) where
it knows its own keys.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from omni.cpulist import parse_cpulist
from omni.errors import OmniError
from omni.spec.problems import plain_text, problem, show, validation_error
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


class LoadRequest(SpecModel):
    """``load:``: the arm runs as an OpenAI-compatible server in its slot and
    a load generator (``vllm bench serve``) in the slot's client CPUs drives
    it through these levels, in an order the sweep's seed shuffles per run
    (each pass's load generator seed is drawn from ``seed`` and the pass:
    fresh prompts, lengths and arrivals every pass, the same for the arms of one).

    ``concurrency``: closed-loop levels, requests in flight
    (``--max-concurrency``); ``rate``: open-loop levels in requests/s, arrivals
    a gamma process of shape ``burstiness`` (1: Poisson). Prompts are
    ``prompt_len`` tokens and answers ``max_tokens``, each drawn uniformly
    within +-``range_ratio`` of them; ``batch_size`` is the server's number of
    sequences at once (vLLM ``max_num_seqs``, llama-server ``--parallel``).
    """

    concurrency: list[int] = []
    rate: list[float] = []
    burstiness: float = Field(1.0, gt=0)
    # measured requests per level; unset: the fewest that bound the SLO's
    # percentile at 95 % (5 for p50, 29 for p90, 299 for p99)
    requests: int = Field(ge=1, le=100000)
    warmup: int = Field(2, ge=0, le=1000)  # requests per level before them, not measured
    range_ratio: float = Field(0.0, ge=0, lt=1)
    seed: int = Field(0, ge=0, le=2**31 - 1)  # the passes' seeds are drawn from it (workload_seed)
    slo: Slo = Slo()

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
        if not self.concurrency and not self.rate:
            raise validation_error(
                "LoadRequest",
                [((), "name at least one level: concurrency: [1, 4] (requests in flight) or rate: [0.5, 1] (req/s)")],
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

    def engine_params(self) -> BaseModel:
        """The validated params model of this arm's engine."""
        return ENGINE_PARAMS[self.engine].model_validate(self.params)


def _env_text(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


class SlotRequest(SpecModel):
    """Where runs go: slots of ``cores`` physical cores, or explicit cpulists.

    Slots run at the same time, one run each. ``cpus: "56-79"`` is one slot,
    ``cpus: ["0-23", "56-79"]`` two; memory binds to the node owning a slot's
    CPUs, and a slot that spans nodes is refused unless ``straddle: true``.
    """

    cores: int | None = Field(None, ge=1)  # None: all cores of the node
    cpus: str | list[str] | None = None  # kernel cpulist(s), e.g. "0-3,8"
    node: int | None = Field(None, ge=0)
    # false: one CPU per core, the cores' SMT siblings left idle and owned by the
    # slot (busy-checked, locked); true: the siblings run the engine too;
    # shared: one CPU per core, the siblings left to others
    smt: bool | Literal["shared"] = False
    straddle: bool = False  # allow a cpulist across nodes (memory bound to all of them)
    count: int | None = Field(None, ge=1)  # at most this many slots
    # serving arms: each slot also holds this many physical cores (or these
    # cpulists, one per slot) for the load generator, apart from the server's
    client_cores: int | None = Field(None, ge=1)
    client_cpus: str | list[str] | None = None

    @field_validator("smt", mode="before")
    @classmethod
    def _smt(cls, value: Any) -> bool | str:
        if isinstance(value, bool) or value == "shared":
            return value
        raise problem(
            f"{show(value)} is not false, true or shared (false: one CPU per core, the siblings idle and "
            "owned by the slot; true: the engine runs on the siblings too; shared: the siblings left to others)"
        )

    @field_validator("cpus", "client_cpus")
    @classmethod
    def _cpulist(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None:
            return value
        if isinstance(value, list) and not value:
            raise problem("must name at least one cpulist, e.g. ['0-3', '4-7']")
        for text in [value] if isinstance(value, str) else value:
            try:
                cpus = parse_cpulist(text)
            except OmniError as err:
                raise problem(str(err)) from None
            if not cpus:
                raise problem("must name at least one CPU, e.g. '0-3'")
        return value

    @model_validator(mode="after")
    def _cores_or_cpus(self) -> SlotRequest:
        problems = []
        if self.cores is not None and self.cpus is not None:
            problems.append((("cpus",), "give cores or cpus, not both (cores: how many; cpus: which ones)"))
        if self.node is not None and self.cpus is not None:
            problems.append((("node",), "give node or cpus, not both (explicit CPUs already name their node)"))
        if self.client_cores is not None and self.client_cpus is not None:
            problems.append((("client_cpus",), "give client_cores or client_cpus, not both"))
        if self.client_cores is not None and self.cpus is not None:
            problems.append(
                (("client_cores",), "with explicit server CPUs (cpus:) name the load generator's too (client_cpus:)")
            )
        if self.client_cpus is not None and self.cpus is None:
            problems.append(
                (("client_cpus",), "explicit client CPUs need explicit server CPUs (cpus:); or give client_cores")
            )
        if self.client_cpus is not None and self.cpus is not None:
            servers, clients = self.cpu_lists(), self.client_cpu_lists()
            if len(clients) != len(servers):
                problems.append(
                    (
                        ("client_cpus",),
                        f"give one client cpulist per slot: {len(servers)} slot(s), {len(clients)} given",
                    )
                )
            for server, client in zip(servers, clients, strict=False):
                if shared := sorted(set(server) & set(client)):
                    problems.append(
                        (
                            ("client_cpus",),
                            f"the load generator would share CPU(s) {','.join(map(str, shared))} with the server "
                            "it measures; give it CPUs of its own",
                        )
                    )
        if problems:
            raise validation_error("SlotRequest", problems)
        return self

    def cpu_lists(self) -> list[list[int]] | None:
        return _cpu_lists(self.cpus)

    def client_cpu_lists(self) -> list[list[int]] | None:
        return _cpu_lists(self.client_cpus)


def _cpu_lists(value: str | list[str] | None) -> list[list[int]] | None:
    if value is None:
        return None
    return [parse_cpulist(text) for text in ([value] if isinstance(value, str) else value)]


# --- identity ---


# Fields added after runs were stored under hashes without them: out of the
# identity while at their default, so those arms (and their stored runs) keep
# their hashes. ``profile`` adds runs, it changes none; ``load`` unset is an
# offline arm, as every arm was before serving arms; ``prompt_seed`` 0 is
# the prompts every run timed before it existed; the synthetic engine's
# fault knobs change nothing while off; vLLM's max_num_batched_tokens unset
# leaves vLLM's own budget wherever the batch's prefill fitted in it, as every
# stored run had (omni.engines.vllm.batched_tokens); llama.cpp's repack on is
# what every llama.cpp run did before it could be turned off.
LATE_ARM_FIELDS = ("profile", "prompt_seed", "load")
LATE_PARAMS = {
    "synthetic": ("prefix_cache", "short_iteration", "prefill_chunk_tokens", "teardown_s"),
    "vllm": ("max_num_batched_tokens",),
    "llamacpp": ("repack",),
}


def canonical_arm_json(arm: Arm) -> str:
    """Deterministic JSON of the arm, defaults included: the run identity.

    Every field takes part, so adding an Arm field changes every hash (a resume
    across such a change reruns everything, which is the safe side), but for
    :data:`LATE_ARM_FIELDS` and :data:`LATE_PARAMS` at their defaults.
    """
    fields = arm.model_dump(mode="json")
    for name in LATE_ARM_FIELDS:
        if getattr(arm, name) == Arm.model_fields[name].default:
            del fields[name]
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
