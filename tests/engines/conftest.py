"""The real engines on omni's tiny model: vLLM and llama.cpp (``make engines`` builds their envs and the
model)."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from omni.run.schedule import run_concurrently
from omni.sweep.execute import run_and_store
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest
from tests.conftest import mark_layer
from tests.engines.arms import (
    PROFILED_ONLY,
    SHARED_ARMS,
    SHARED_SWEEP_TIMEOUT_S,
    SIDE_BY_SIDE,
    make_head_cases,
    write_spec,
)


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
    for item in items:
        # the session sweep runs in the setup of the first test that reads it,
        # under that test's timeout: each reader gets the sweep's whole budget
        if "eager_vllm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S), append=False)


@dataclass(frozen=True)
class SharedSweep:
    results: Path
    sweep_id: str
    rows: list[dict]

    def row(self, arm: str, profiled: bool = False) -> dict:
        (found,) = [r for r in self.rows if r["arm"] == arm and bool(r.get("profiled")) == profiled]
        return found


@pytest.fixture(scope="session")
def eager_vllm(tmp_path_factory) -> SharedSweep:
    """ONE sweep of the eager runs several tests read rows of (tests/engines/arms.py SHARED_ARMS),
    two at a time on one-core slots, rather than a sweep per test: a vLLM start is 40-100 s of two
    cores, and a slot one test's sweep leaves idle (a KV budget that fails at once) runs another's."""
    base = tmp_path_factory.mktemp("eager-vllm")
    make_head_cases()  # the head arms' models, given by path
    prepared = prepare_sweep(SweepRequest(spec=write_spec(base, SHARED_ARMS, **SIDE_BY_SIDE), results=base / "results"))
    items = [item for item in prepared.items if item.profiled or item.arm.name not in PROFILED_ONLY]
    rows = run_concurrently(items, prepared.slots, lambda item: run_and_store(prepared.context, item))
    return SharedSweep(base / "results", prepared.sweep_id, rows)
