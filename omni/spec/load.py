"""A serving arm's load: the levels (or the capacity search) a load
generator drives the server through, its SLO, and its prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from omni.spec.base import SpecModel
from omni.spec.problems import problem, validation_error
from omni.spec.prompts import (
    PromptsFile,
    checked_prompts_file,
    prompts_path,
)

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
