"""vLLM's admission of a batch (params.admission): paused, omni's default, adds it with the scheduler
paused so the first step holds every prompt; as_generate adds it as LLM.generate (vllm bench latency)
does, the engine core stepping on the first request. The spec, the arm's identity, the engine's loop
against a stand-in engine core, and the row's not_lock_step rule."""

from __future__ import annotations

import itertools
import sys
import types
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from omni.engines.vllm import timed_generate
from omni.measure.iterations import run_metrics
from omni.run.validity import fill_audits
from omni.spec import Arm, arm_hash, canonical_arm_json


def vllm_arm(**fields) -> Arm:
    return Arm(name="v", engine="vllm", model="tiny-llama", batch_size=4, prompt_len=16, max_tokens=3, **fields)


# --- the spec and the arm's identity ---


def test_the_default_is_paused_and_as_generate_is_the_other_way():
    assert vllm_arm().params["admission"] == "paused"
    assert vllm_arm(params={"admission": "as_generate"}).params["admission"] == "as_generate"


@pytest.mark.parametrize("value", ["lock_step", "generate", True])
def test_an_unknown_admission_is_a_spec_error_naming_it(value):
    with pytest.raises(ValidationError) as err:
        vllm_arm(params={"admission": value})
    assert "admission" in str(err.value)


def test_paused_keeps_every_stored_arms_hash_and_as_generate_is_another_arm():
    plain = vllm_arm()
    assert "admission" not in canonical_arm_json(plain)  # as every vLLM arm hashed before the param
    assert arm_hash(vllm_arm(params={"admission": "paused"})) == arm_hash(plain)
    other = vllm_arm(params={"admission": "as_generate"})
    assert '"admission":"as_generate"' in canonical_arm_json(other) and arm_hash(other) != arm_hash(plain)


def test_a_serving_arm_refuses_as_generate():
    load = {"concurrency": [1], "requests": 4}
    assert vllm_arm(load=load).params["admission"] == "paused"
    with pytest.raises(ValidationError) as err:
        vllm_arm(load=load, params={"admission": "as_generate"})
    assert "admission is how the offline engine adds its batch" in str(err.value)


# --- the engine's loop, against a stand-in engine core ---


class StandInEngine:
    """vLLM's front (LLMEngine) over an engine core that, when not paused,
    steps as soon as a request reaches it idle, as EngineCoreProc's busy
    loop does: a prefill gives a sequence its first token, each later step
    one more, until max_tokens."""

    def __init__(self, events: list, max_tokens: int) -> None:
        self.events, self.max_tokens = events, max_tokens
        self.paused, self.waiting, self.running, self.ready = False, [], {}, []

    def add_request(self, request_id, prompt, sampling) -> None:
        self.events.append("add")
        self.waiting.append(request_id)
        if not self.paused and not self.ready:  # idle: it steps on what has arrived
            self.ready.append(self.core_step())

    def core_step(self) -> list[tuple[str, int]]:
        for request_id in self.running:
            self.running[request_id] += 1
        delivered = [(r, 1) for r in self.running] + [(r, 1) for r in self.waiting]
        self.running.update({r: 1 for r in self.waiting})
        self.waiting = []
        self.running = {r: n for r, n in self.running.items() if n < self.max_tokens}
        return delivered

    def step(self):
        delivered = self.ready.pop(0) if self.ready else self.core_step()
        self.events.append("step")
        return [SimpleNamespace(request_id=r, outputs=[SimpleNamespace(token_ids=[7] * n)]) for r, n in delivered]

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running or self.ready)


class StandInLLM:
    def __init__(self, max_tokens: int) -> None:
        self.events: list = []
        self.llm_engine = StandInEngine(self.events, max_tokens)
        self.request_counter = itertools.count()

    def _preprocess_cmpl_one(self, prompt):
        return prompt

    def sleep(self, level, mode):
        self.events.append(("sleep", level, mode))
        self.llm_engine.paused = True

    def wake_up(self, tags):
        self.events.append(("wake_up", tags))
        self.llm_engine.paused = False


@pytest.fixture
def stand_in_vllm(monkeypatch):
    """The three names timed_generate imports from vllm."""
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kwargs: SimpleNamespace(**kwargs)
    vllm.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.RequestOutputKind = SimpleNamespace(DELTA="delta", FINAL_ONLY="final_only")
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)


PROMPTS = [[i] * 16 for i in range(4)]


def test_paused_adds_the_batch_behind_a_pause_and_its_first_step_holds_every_prompt(stand_in_vllm):
    llm = StandInLLM(max_tokens=3)
    raw = timed_generate(llm, PROMPTS, 3, "paused")
    assert llm.events == [("sleep", 0, "keep"), *["add"] * 4, ("wake_up", ["scheduling"]), *["step"] * 3]
    metrics, (it,) = run_metrics(4, 16, 3, [raw])
    assert it["step_tokens"] == [4, 4, 4] and metrics["lock_step"] is True and metrics["partial_steps"] == 0


def test_as_generate_lets_the_core_step_on_the_first_request_and_times_every_step(stand_in_vllm):
    llm = StandInLLM(max_tokens=3)
    raw = timed_generate(llm, PROMPTS, 3, "as_generate")
    assert not [e for e in llm.events if isinstance(e, tuple)]  # no sleep, no wake_up
    assert raw["tokens"] == [3, 3, 3, 3] and len(raw["step_end_s"]) == 4
    metrics, (it,) = run_metrics(4, 16, 3, [raw])
    # the core prefilled the first prompt alone, then the other three beside its decode
    assert it["step_tokens"] == [1, 4, 4, 3] and metrics["lock_step"] is False and metrics["partial_steps"] == 1


def test_an_unknown_admission_reaches_no_engine(stand_in_vllm):
    llm = StandInLLM(max_tokens=3)
    with pytest.raises(ValueError, match="admission 'lock_step'"):
        timed_generate(llm, PROMPTS, 3, "lock_step")
    assert llm.events == []


# --- the row ---


def audited_row(admission: str | None, per_iteration: list[dict]) -> dict:
    params = {} if admission is None else {"admission": admission}
    row = {"max_tokens": 3, "status": "ok", "warnings": [], "warning_rules": [], "engine_params": params}
    fill_audits(row, per_iteration, None)
    return row


def test_partial_steps_an_arm_asked_for_are_counted_not_warned_of(stand_in_vllm):
    raws = [timed_generate(StandInLLM(max_tokens=3), PROMPTS, 3, "as_generate") for _ in range(2)]
    metrics, per_iteration = run_metrics(4, 16, 3, raws)
    assert metrics["partial_steps"] == 2 and metrics["lock_step"] is False  # the row keeps both
    asked = audited_row("as_generate", per_iteration)
    assert asked["status"] == "ok" and "not_lock_step" not in asked["warning_rules"]
    # the same steps under a paused arm (a chunked prefill) or a row without the key are warned of
    for admission in ("paused", None):
        (message,) = [m for m in audited_row(admission, per_iteration)["warnings"] if m.startswith("not_lock_step")]
        assert "2 of 8 engine steps, in 2 of 2 timed iteration(s)" in message
