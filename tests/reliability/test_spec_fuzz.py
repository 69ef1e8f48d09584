"""The spec loader under property-based fuzzing (hypothesis): 1,000 specs,
YAML and JSON, built from the spec's own keys and values of every type.

Each one either loads or is one SpecError whose every line names the file
and a line of it (``FILE:LINE FIELD: message``). No traceback, and nothing
is launched: loading a spec runs no process.

Deterministic (``derandomize``), so CI sees the same 1,000 specs each time
(2,000 took 108 s of a 48-minute CI run).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni.errors import SpecError
from omni.spec import Sweep, load_spec
from omni.spec.arm import ENGINE_PARAMS, Arm
from omni.spec.slots import SlotRequest

ARM_KEYS = sorted(Arm.model_fields)
SWEEP_KEYS = sorted(Sweep.known_keys())
SLOT_KEYS = sorted(SlotRequest.model_fields)
PARAM_KEYS = sorted({k for model in ENGINE_PARAMS.values() for k in model.model_fields})
ENGINES = sorted(ENGINE_PARAMS)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "all",
            "yes",
            "no",
            "1e3",
            "0x10",
            "~",
            "null",
            "bfloat16",
            "eager",
            "synthetic",
            "vllm",
            "llamacpp",
            "tiny-llama",
            "0-1",
            "a",
            "split",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def fields(keys: list[str], value=values, extra=0.2):
    """A mapping of some of ``keys`` (and, sometimes, a stray key) to ``value``s."""
    known = st.dictionaries(st.sampled_from(keys), value, max_size=len(keys))
    stray = st.dictionaries(st.text(min_size=1, max_size=10), values, max_size=2)
    return st.tuples(known, st.booleans().map(lambda b: b and extra > 0), stray).map(
        lambda t: {**t[0], **(t[2] if t[1] else {})}
    )


arm_value = st.one_of(values, st.sampled_from(ENGINES))
params = fields(PARAM_KEYS)
arm = st.tuples(fields(ARM_KEYS, arm_value), st.sampled_from(ENGINES), st.text(min_size=1, max_size=8), params).map(
    lambda t: {"name": t[2], "engine": t[1], **t[0], **({"params": t[3]} if t[3] else {})}
)
matrix = st.fixed_dictionaries(
    {
        "name": st.text(max_size=20),
        "base": arm,
        "axes": st.dictionaries(
            st.sampled_from(["threads", "batch_size", "params.mem_mb", "dtype", "nope"]),
            st.lists(scalars, max_size=3),
            max_size=2,
        ),
    }
)
sweep = st.tuples(
    fields(SWEEP_KEYS),
    st.lists(st.one_of(arm, values), max_size=3),
    st.lists(matrix, max_size=1),
    fields(SLOT_KEYS),
    st.one_of(st.none(), fields(["names", "mode"])),
    st.text(max_size=10),
).map(
    lambda t: {
        **t[0],
        "name": t[5] or t[0].get("name", "fz"),
        "arms": t[1],
        **({"matrix": t[2]} if t[2] else {}),
        **({"slots": t[3]} if t[3] else {}),
        **({"hosts": t[4]} if t[4] is not None else {}),
    }
)
documents = st.one_of(sweep, sweep, sweep, values)  # a document that is not even a mapping, now and then

WORK = Path(tempfile.mkdtemp(prefix="omni-spec-fuzz-"))
LINE = re.compile(r"^(?P<file>\S+?):(?P<line>\d+) ")


@pytest.fixture(autouse=True)
def nothing_launches(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"loading a spec launched a process: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


@settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(document=documents, as_json=st.booleans())
def test_every_generated_spec_loads_or_is_one_error_naming_file_and_line(document, as_json):
    path = WORK / ("spec.json" if as_json else "spec.yaml")
    path.write_text(json.dumps(document, indent=1) if as_json else yaml.safe_dump(document, sort_keys=False))
    try:
        load_spec(path)
    except SpecError as error:
        for line in str(error).splitlines():
            match = LINE.match(line)
            assert match and match["file"] == str(path), f"no FILE:LINE in {line!r} of {path.read_text()[:2000]}"
            assert int(match["line"]) <= len(path.read_text().splitlines()) + 1, line
