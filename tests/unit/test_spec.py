"""Sweep specs: loading, matrix expansion, run identity, and one clear error per mistake."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from omni.errors import SpecError
from omni.spec import (
    Arm,
    Sweep,
    SyntheticParams,
    arm_hash,
    canonical_arm_json,
    load_spec,
    validate_sweep,
)

REPO = Path(__file__).resolve().parents[2]

GOOD_YAML = """\
# two arms, one slot of 2 cores
name: good
description: a good spec
passes: 2
seed: 7
timeout_s: 30
baseline: big
slots: {cores: 2, node: 0}
arms:
  - name: small
    engine: synthetic
    prompt_len: 16
    max_tokens: 8
    env: {OMP_NUM_THREADS: 4}
    params: {mem_mb: 64}
  - name: big
    engine: synthetic
    threads: 2
    patches: [explicit_kv_cache_memory, release_memory_after_load]
    params: {mem_mb: 256, procs: 2}
"""

MATRIX_YAML = """\
name: grid
arms:
  - {name: plain, engine: synthetic}
matrix:
  - name: "mem{params.mem_mb}-t{threads}"
    base: {engine: synthetic, max_tokens: 4, params: {procs: 3}}
    axes:
      params.mem_mb: [0, 512]
      threads: [1, 2]
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_good_yaml_loads(tmp_path):
    path = write(tmp_path, GOOD_YAML)
    loaded = load_spec(path)
    sweep = loaded.sweep
    assert loaded.path == path.resolve()
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert loaded.text == GOOD_YAML
    assert (sweep.name, sweep.passes, sweep.seed, sweep.timeout_s) == ("good", 2, 7, 30.0)
    assert sweep.baseline_arm == "big"
    assert (sweep.slots.cores, sweep.slots.node, sweep.slots.cpus) == (2, 0, None)
    small, big = sweep.arms
    assert small.env == {"OMP_NUM_THREADS": "4"}  # YAML's int, as an env var's text
    assert small.params["mem_mb"] == 64.0 and small.params["procs"] == 1  # defaults stored
    assert big.patches == ["explicit_kv_cache_memory", "release_memory_after_load"] and small.patches == "none"
    params = big.engine_params()
    assert isinstance(params, SyntheticParams) and (params.mem_mb, params.procs) == (256.0, 2)


def test_good_json_loads(tmp_path):
    spec = {
        "name": "good-json",
        "slots": {"cpus": "0-1"},
        "arms": [{"name": "a", "engine": "synthetic", "params": {"hold_s": 0}}],
    }
    loaded = load_spec(write(tmp_path, json.dumps(spec, indent=2), "spec.json"))
    assert loaded.sweep.baseline_arm == "a"
    assert loaded.sweep.slots.cpu_lists() == [[0, 1]]
    assert loaded.sweep.arms[0].engine_params().hold_s == 0.0
    assert loaded.sweep.passes == 3


def test_matrix_expands_after_explicit_arms(tmp_path):
    sweep = load_spec(write(tmp_path, MATRIX_YAML)).sweep
    # then the live A/A control, a replica of the baseline (5 arms, 3 passes by default)
    assert [a.name for a in sweep.arms] == ["plain", "mem0-t1", "mem0-t2", "mem512-t1", "mem512-t2", "plain.control"]
    assert sweep.arms[-1].model_dump(exclude={"name"}) == sweep.arms[0].model_dump(exclude={"name"})
    grid = {a.name: a for a in sweep.arms[1:-1]}
    assert grid["mem512-t2"].threads == 2
    assert grid["mem512-t2"].params["mem_mb"] == 512.0
    assert all(a.params["procs"] == 3 and a.max_tokens == 4 for a in grid.values())  # base kept
    assert sweep.baseline_arm == "plain"


def test_matrix_alone_and_env_axis(tmp_path):
    text = """\
        name: env-grid
        control: false
        matrix:
          - name: "omp{env.OMP_NUM_THREADS}"
            base: {engine: synthetic, env: {KMP_AFFINITY: compact}}
            axes:
              env.OMP_NUM_THREADS: ["1", "2"]
    """
    sweep = load_spec(write(tmp_path, text)).sweep
    assert [a.name for a in sweep.arms] == ["omp1", "omp2"]  # control: false
    assert sweep.arms[1].env == {"KMP_AFFINITY": "compact", "OMP_NUM_THREADS": "2"}


def test_validated_sweep_round_trips(tmp_path):
    sweep = load_spec(write(tmp_path, MATRIX_YAML)).sweep
    assert Sweep.model_validate(sweep.model_dump()) == sweep


def test_canonical_arm_json_is_key_order_independent_and_includes_defaults():
    a = Arm.model_validate({"name": "x", "engine": "synthetic", "threads": 2, "params": {"procs": 2, "mem_mb": 8}})
    b = Arm.model_validate({"params": {"mem_mb": 8.0, "procs": 2}, "threads": 2, "engine": "synthetic", "name": "x"})
    spelled_out = Arm.model_validate(
        {
            "name": "x",
            "engine": "synthetic",
            "threads": 2,
            "prompt_len": 128,
            "params": {"mem_mb": 8, "procs": 2, "hold_s": 0.3},
        }
    )
    text = canonical_arm_json(a)
    assert text == canonical_arm_json(a) == canonical_arm_json(b) == canonical_arm_json(spelled_out)
    assert " " not in text and json.loads(text)["params"]["work_per_token"] == 20000
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert arm_hash(a) == hashlib.sha256(text.encode()).hexdigest()
    assert arm_hash(a.model_copy(update={"threads": 3})) != arm_hash(a)


def test_default_and_explicit_zero_hash_alike():
    # mem_mb defaults to 0.0, so `mem_mb: 0` (an int in YAML) must not change the identity.
    assert arm_hash(Arm(name="a", engine="synthetic")) == arm_hash(
        Arm(name="a", engine="synthetic", params={"mem_mb": 0, "load_s": 0})
    )


def test_validate_sweep_from_dict_names_the_field():
    with pytest.raises(SpecError, match=r"^flow-param arms\[0\]\.threads: must be >= 1$"):
        validate_sweep({"name": "x", "arms": [{"name": "a", "engine": "synthetic", "threads": 0}]}, "flow-param")


def test_models_are_frozen_and_plain_outside_load_spec():
    arm = Arm(name="a", engine="synthetic")
    with pytest.raises(ValidationError):
        arm.threads = 2
    with pytest.raises(ValidationError) as err:
        Arm(name="a", engine="synthetic", params={"procs": 0})
    assert err.value.errors()[0]["msg"] == "must be >= 1"
    assert err.value.errors()[0]["loc"] == ("params", "procs")


def test_every_problem_listed_in_file_order(in_tmp):
    text = """\
        name: many
        passes: 0
        arms:
          - name: a
            engine: synthetic
            threads: 0
            params: {procs: 99}
        seed: x
    """
    write(in_tmp, text)
    message = str(_load_error(Path("spec.yaml")))
    assert message.splitlines() == [
        "spec.yaml:2 passes: must be >= 1",
        "spec.yaml:6 arms[0].threads: must be >= 1",
        "spec.yaml:7 arms[0].params.procs: must be <= 64",
        "spec.yaml:8 seed: must be an integer, got 'x'",
    ]
    assert "pydantic" not in message


@pytest.mark.parametrize(
    "name,arms",
    [("smoke-synthetic.yaml", ["small", "large", "small.control"]), ("calibrate-synthetic.yaml", ["a", "b"])],
)  # itself A/A: control: false
def test_repo_arms_files_load(name, arms):
    sweep = load_spec(REPO / "arms" / name).sweep
    assert sweep.name == name.removesuffix(".yaml")
    assert [a.name for a in sweep.arms] == arms and all(a.engine == "synthetic" for a in sweep.arms)


@pytest.mark.parametrize(
    "passes,arms,control,expected",
    [
        (3, 2, None, "a.control"),  # default: something to compare, enough passes
        (2, 2, None, None),  # too few passes for a verdict on it
        (5, 1, None, None),  # nothing to compare
        (2, 1, True, "a.control"),  # asked for
        (5, 2, False, None),  # refused
    ],
)
def test_live_control_defaults(tmp_path, passes, arms, control, expected):
    spec = {"name": "ctl", "passes": passes, "arms": [{"name": n, "engine": "synthetic"} for n in "ab"[:arms]]}
    if control is not None:
        spec["control"] = control
    sweep = load_spec(write(tmp_path, json.dumps(spec), "ctl.json")).sweep
    assert sweep.control_arm == expected
    names = [a.name for a in sweep.arms]
    assert names == [*"ab"[:arms], *([expected] if expected else [])]
    assert [a.name for a in type(sweep).model_validate(sweep.model_dump()).arms] == names  # added once


def test_control_suffix_is_reserved(tmp_path):
    spec = {
        "name": "ctl",
        "baseline": "b",
        "arms": [{"name": "a.control", "engine": "synthetic"}, {"name": "b", "engine": "synthetic"}],
    }
    with pytest.raises(SpecError, match=r"ending in '\.control' are kept for the A/A control"):
        load_spec(write(tmp_path, json.dumps(spec), "ctl.json"))


@pytest.mark.parametrize("path", sorted((REPO / "arms").glob("*.yaml")), ids=lambda p: p.name)
def test_every_repo_spec_is_valid_and_named_after_its_file(path):
    sweep = load_spec(path).sweep
    assert sweep.name == path.stem and sweep.baseline_arm in {a.name for a in sweep.arms}


def test_calibrate_arms_differ_only_by_name():
    a, b = load_spec(REPO / "arms" / "calibrate-synthetic.yaml").sweep.arms
    assert a.model_dump(exclude={"name"}) == b.model_dump(exclude={"name"})


# --- bad specs: one SpecError each, naming file, line and field ---

ARM = "  - {name: a, engine: synthetic}\n"

BAD_SPECS = {
    "unknown top-level key": (
        "name: x\npasses: 2\npasss: 3\narms:\n" + ARM,
        ["spec.yaml:3 passs: unknown key 'passs'", "known: name, description, passes", "matrix"],
    ),
    "unknown arm key": (
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    thread: 2\n",
        ["spec.yaml:5 arms[0].thread: unknown key 'thread'", "threads"],
    ),
    "duplicate key": (
        "name: x\narms:\n  - name: a\n    threads: 1\n    engine: synthetic\n    threads: 2\n",
        ["spec.yaml:6 arms[0].threads: duplicate key 'threads'", "line 4", "line 6"],
    ),
    "python tag": (
        "name: x\narms: !!python/object/apply:os.system ['echo pwned']\n",
        ["spec.yaml:2 arms: YAML tag '!!python/object/apply:os.system' is not allowed"],
    ),
    "local tag": ("name: !foo x\narms:\n" + ARM, ["spec.yaml:1 name: YAML tag '!foo' is not allowed"]),
    "str tag": (
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    threads: !!str 2\n",
        ["spec.yaml:5 arms[0].threads: YAML tag '!!str' is not allowed"],
    ),
    "anchor": (
        "name: x\narms:\n  - &base {name: a, engine: synthetic}\n  - *base\n",
        ["spec.yaml:3 arms[0]: anchor &base is not supported", "matrix"],
    ),
    "tag written out in full": (
        "name: x\narms:\n  - name: !<tag:yaml.org,2002:str> a\n    engine: synthetic\n",
        ["spec.yaml:3 arms[0].name: YAML tag '!!str' is not allowed"],
    ),
    "billion laughs": (  # 9**5 values if the aliases were expanded: refused at the first anchor
        "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nname: x\n",
        ["spec.yaml:1 a: anchor &a is not supported"],
    ),
    "merge key": (
        "name: x\narms:\n  - name: a\n    <<: {engine: synthetic}\n",
        ["spec.yaml:4 arms[0]: merge keys (<<) are not supported; use matrix:"],
    ),
    "key that is a list": ("name: x\n? [a, b]\n: 1\narms: []\n", ["spec.yaml:2 a key must be a plain name"]),
    "key that is a number": ("name: x\n1: 2\narms:\n" + ARM, ["spec.yaml:2 [1]: a key must be a name (text), got 1"]),
    "duplicate key in a flow mapping": (
        "name: x\narms:\n  - {name: a, engine: synthetic, name: b}\n",
        ["spec.yaml:3 arms[0].name: duplicate key 'name' (first at line 3, again at line 3)"],
    ),
    "yes is text, not true": (  # YAML 1.2: only true/false are booleans
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    params: {crash: yes}\n",
        ["spec.yaml:5 arms[0].params.crash: must be true or false, got 'yes'"],
    ),
    "nested too deep": ("name: x\narms: " + "[" * 200 + "]" * 200 + "\n", ["spec.yaml:2 nested more than 100 levels"]),
    "wrong type": (
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    threads: two\n",
        ["spec.yaml:5 arms[0].threads: must be an integer, got 'two'"],
    ),
    "quoted number": (
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    threads: '2'\n",
        ["spec.yaml:5 arms[0].threads: must be an integer, got '2'"],
    ),
    "threads zero": (
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    threads: 0\n",
        ["spec.yaml:5 arms[0].threads: must be >= 1"],
    ),
    "passes zero": ("name: x\npasses: 0\narms:\n" + ARM, ["spec.yaml:2 passes: must be >= 1"]),
    "bad dtype": (
        "name: x\narms:\n  - {name: a, engine: synthetic, dtype: bf16}\n",
        ["spec.yaml:3 arms[0].dtype: must be 'auto', 'bfloat16', 'float16' or 'float32', got 'bf16'"],
    ),
    "duplicate arm names": (
        "name: x\narms:\n" + ARM + "  - name: a\n    engine: synthetic\n",
        ["spec.yaml:4 arms[1].name: arm name 'a' is used by an earlier arm too"],
    ),
    "bad arm name": (
        "name: x\narms:\n  - {name: 'a b', engine: synthetic}\n",
        ["spec.yaml:3 arms[0].name: 'a b' is not a valid name"],
    ),
    "unknown engine": (
        "name: x\narms:\n  - name: a\n    engine: vlm\n",
        ["spec.yaml:4 arms[0].engine: unknown engine 'vlm' (known: llamacpp, synthetic, vllm)"],
    ),
    "missing engine": ("name: x\narms:\n  - name: a\n", ["spec.yaml:3 arms[0].engine: is required"]),
    "baseline not an arm": (
        "name: x\nbaseline: b\narms:\n" + ARM,
        ["spec.yaml:2 baseline: no arm is named 'b' (arms: a)"],
    ),
    "empty arms and no matrix": ("name: x\narms: []\n", ["spec.yaml:2 arms: no arms", "matrix:"]),
    "no arms key at all": ("# nothing\nname: x\n", ["spec.yaml:2 arms: no arms"]),
    "yaml syntax error": (
        "name: x\narms:\n  - name: a\n   engine: [synthetic\n",
        ["spec.yaml:", "YAML syntax error"],
    ),
    "unknown synthetic param": (
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    params:\n      mem_gb: 1\n",
        ["spec.yaml:6 arms[0].params.mem_gb: unknown key 'mem_gb' (known: mem_mb,"],
    ),
    "synthetic param out of range": (
        "name: x\narms:\n" + ARM + "  - name: b\n    engine: synthetic\n    params: {exit_code: 300}\n",
        ["spec.yaml:6 arms[1].params.exit_code: must be <= 255"],
    ),
    "bad cpulist": (
        "name: x\nslots:\n  cpus: 0-x\narms:\n" + ARM,
        ["spec.yaml:3 slots.cpus: bad CPU list '0-x'"],
    ),
    "cores and cpus both": (
        "name: x\nslots:\n  cores: 2\n  cpus: 0-3\narms:\n" + ARM,
        ["spec.yaml:4 slots.cpus: give cores or cpus, not both"],
    ),
    "bad cpulist in a list of slots": (
        "name: x\nslots:\n  cpus: ['0-3', '4-']\narms:\n" + ARM,
        ["spec.yaml:3 slots.cpus: bad CPU list '4-'"],
    ),
    "node and cpus both": (
        "name: x\nslots:\n  node: 1\n  cpus: 0-3\narms:\n" + ARM,
        ["spec.yaml:3 slots.node: give node or cpus, not both"],
    ),
    "zero slots": (
        "name: x\nslots:\n  count: 0\narms:\n" + ARM,
        ["spec.yaml:3 slots.count: must be >= 1"],
    ),
    "bad env var name": (
        "name: x\narms:\n  - name: a\n    engine: synthetic\n    env:\n      OMP-THREADS: '2'\n",
        ["spec.yaml:6 arms[0].env['OMP-THREADS']: 'OMP-THREADS' is not an environment variable name"],
    ),
    "matrix duplicate names": (
        "name: x\nmatrix:\n  - name: 'mem{params.mem_mb}'\n    base: {engine: synthetic}\n"
        "    axes:\n      params.mem_mb: [0, 64]\n      threads: [1, 2]\n",
        ["spec.yaml:3 matrix[0].name: the template gives several arms the name 'mem0'", "add {threads}"],
    ),
    "matrix axis unknown field": (
        "name: x\nmatrix:\n  - name: 't{thread}'\n    base: {engine: synthetic}\n    axes:\n      thread: [1, 2]\n",
        ["spec.yaml:6 matrix[0].axes.thread: 'thread' is not an arm field", "threads"],
    ),
    "matrix axis unknown param": (
        "name: x\nmatrix:\n  - name: 'm{params.mem}'\n    base: {engine: synthetic}\n"
        "    axes:\n      params.mem: [1, 2]\n",
        ["spec.yaml:6 matrix[0].axes['params.mem']: 'mem' is not a parameter of engine 'synthetic'"],
    ),
    "matrix bad axis value": (
        "name: x\nmatrix:\n  - name: 't{threads}'\n    base: {engine: synthetic}\n    axes:\n"
        "      threads:\n        - 1\n        - 0\n",
        ["spec.yaml:8 matrix[0].axes.threads[1]: must be >= 1"],
    ),
    "matrix empty axis": (
        "name: x\nmatrix:\n  - name: 't{threads}'\n    base: {engine: synthetic}\n    axes:\n      threads: []\n",
        ["spec.yaml:6 matrix[0].axes.threads: must not be empty"],
    ),
    "matrix template names no axis": (
        "name: x\nmatrix:\n  - name: 't{thread}'\n    base: {engine: synthetic}\n    axes:\n      threads: [1, 2]\n",
        ["spec.yaml:3 matrix[0].name: {thread} is not an axis (axes: threads)"],
    ),
    "top level a list": ("- name: x\n- arms: []\n", ["spec.yaml:1 the top level must be a mapping", "got a list"]),
    "empty file": ("\n  \n", ["spec.yaml: the file is empty"]),
    "only comments": ("# name: x\n", ["spec.yaml:1 the file holds no data"]),
}


def _load_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as err:
        load_spec(path)
    return err.value


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Work in tmp_path, so messages name ``spec.yaml`` as a user would give it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("text, expected", BAD_SPECS.values(), ids=BAD_SPECS.keys())
def test_bad_yaml_spec(in_tmp, text, expected):
    write(in_tmp, text)
    message = str(_load_error(Path("spec.yaml")))
    assert len(message.splitlines()) == 1, message  # one mistake, one line
    for fragment in expected:
        assert fragment in message, message
    assert "errors.pydantic.dev" not in message


def test_yaml_syntax_error_names_the_line(in_tmp):
    write(in_tmp, "name: x\narms:\n  - name: a\n  engine: b\n    threads: 2\n")
    message = str(_load_error(Path("spec.yaml")))
    assert message.startswith("spec.yaml:4 YAML syntax error"), message


BAD_JSON = {
    "json duplicate key": ('{"name": "x",\n "name": "y",\n "arms": []}', ["spec.json:2 name: duplicate key 'name'"]),
    "json syntax error": ('{"name": "x",\n "arms": [}\n', ["spec.json:2 JSON syntax error"]),
    "json bad field": (
        '{"name": "x",\n "arms": [\n  {"name": "a",\n   "engine": "synthetic",\n   "threads": 0}]}',
        ["spec.json:5 arms[0].threads: must be >= 1"],
    ),
    "json duplicate key inside an arm": (
        '{"name": "x",\n "arms": [{"name": "a",\n  "engine": "synthetic",\n  "engine": "vllm"}]}',
        ["spec.json:4 arms[0].engine: duplicate key 'engine' (first at line 3, again at line 4)"],
    ),
    "json indented with tabs": (  # YAML refuses tabs as indentation; the lines must not be lost
        '{\n\t"name": "x",\n\t"arms": [\n\t\t{"name": "a",\n\t\t "engine": "synthetic",\n\t\t "threads": 0}]}',
        ["spec.json:6 arms[0].threads: must be >= 1"],
    ),
    "json top level a list": ("[1, 2]", ["spec.json:1 the top level must be a mapping"]),
}


@pytest.mark.parametrize("text, expected", BAD_JSON.values(), ids=BAD_JSON.keys())
def test_bad_json_spec(in_tmp, text, expected):
    write(in_tmp, text, "spec.json")
    message = str(_load_error(Path("spec.json")))
    assert len(message.splitlines()) == 1, message
    for fragment in expected:
        assert fragment in message, message


def test_missing_file(in_tmp):
    message = str(_load_error(Path("arms/nope.yaml")))
    assert message == f"arms/nope.yaml: no such file (relative to {in_tmp})", message


def test_directory_instead_of_file(tmp_path):
    (tmp_path / "arms.yaml").mkdir()
    assert "is a directory" in str(_load_error(tmp_path / "arms.yaml"))


def test_unsupported_extension(in_tmp):
    write(in_tmp, "name: x\n", "spec.toml")
    message = str(_load_error(Path("spec.toml")))
    assert "spec.toml: unsupported spec type '.toml'" in message
    assert ".yaml, .yml or .json" in message


def test_not_utf8(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"name: \xff\n")
    assert "spec.yaml: not UTF-8 text" in str(_load_error(path))


def test_yaml_scalars_read_as_meant(tmp_path):
    # YAML 1.1 would read the name as a datetime.date and 1e3 as the text '1e3'.
    text = "name: 2024-01-01\narms:\n  - {name: a, engine: synthetic, params: {mem_mb: 1e3}}\n"
    sweep = load_spec(write(tmp_path, text)).sweep
    assert sweep.name == "2024-01-01"
    assert sweep.arms[0].params["mem_mb"] == 1000.0


def test_a_defaulted_control_leaves_with_passes_below_three(tmp_path):
    from omni.host.topology import Slot
    from omni.run.plan import plan_sweep

    spec = {"name": "ctl", "arms": [{"name": n, "engine": "synthetic"} for n in "ab"]}
    loaded = load_spec(write(tmp_path, json.dumps(spec), "ctl.json"))
    slot = Slot(index=0, node=0, cpus=(0,), mems=(0,))
    assert {i.arm.name for i in plan_sweep(loaded, "s", [slot])} == {"a", "b", "a.control"}
    assert {i.arm.name for i in plan_sweep(loaded, "s", [slot], passes=1)} == {"a", "b"}
    asked = load_spec(write(tmp_path, json.dumps({**spec, "control": True}), "ctl2.json"))
    assert {i.arm.name for i in plan_sweep(asked, "s", [slot], passes=1)} == {"a", "b", "a.control"}


def test_vllm_arms_are_patched_unless_they_say_stock(tmp_path):
    spec = {
        "name": "p",
        "arms": [
            {"name": "v", "engine": "vllm"},
            {"name": "s", "engine": "vllm", "patches": "none"},
            {"name": "l", "engine": "llamacpp"},
            {"name": "y", "engine": "synthetic"},
        ],
    }
    arms = {a.name: a for a in load_spec(write(tmp_path, json.dumps(spec), "p.json")).sweep.arms}
    assert (arms["v"].patches, arms["s"].patches, arms["l"].patches, arms["y"].patches) == (
        "all",
        "none",
        "none",
        "none",
    )


@pytest.mark.parametrize("path", sorted((REPO / "arms").glob("*.yaml")), ids=lambda p: p.name)
def test_repo_arms_size_their_kv_pool_to_the_need(path):
    """Every real-engine arm of arms/ on a preset sets context_len, and a vLLM
    arm's pool is its need (batch x context_len x the shape's KV bytes per
    token) up to the factor block rounding may take, so its memory verdicts
    are like for like (omni.measure.kv); llama.cpp's context is the need.
    The pool holds every sequence's whole 128-token blocks (vLLM CPU's block
    size) and one more: vLLM keeps one back as its null block, and a pool of
    exactly the need preempts a sequence."""
    from omni.measure.kv import OVER_FACTOR
    from omni.models.factory import PRESETS

    block = 128
    for arm in load_spec(path).sweep.arms:
        if arm.engine == "synthetic" or arm.model not in PRESETS:
            continue
        assert arm.context_len, f"{path.name}: {arm.name} leaves context_len to the engine"
        per_token = PRESETS[arm.model].kv_bytes_per_token
        need = arm.batch_size * arm.context_len * per_token
        if arm.engine == "vllm":
            pool = arm.kv_cache_bytes
            blocks = arm.batch_size * -(-arm.context_len // block) + 1
            assert pool and blocks * block * per_token <= pool <= OVER_FACTOR * need, (
                f"{path.name}: {arm.name} pool {pool}, need {need} ({blocks} blocks of {block} tokens)"
            )


@pytest.mark.parametrize(("name", "passes"), [("cpu-suite-1b.yaml", 2), ("cpu-suite-8b.yaml", 3)])
def test_cpu_suite_specs_run_vllms_workloads_on_both_engines(name, passes):
    """vLLM's CPU-suite workloads: bf16 and cpu_int4 on vLLM, bf16 and q4_0 on
    llama.cpp, at 128/128 and 2048/128 at least (the 8B one: also 128/2048,
    and batch 1 and 8 of each)."""
    sweep = load_spec(REPO / "arms" / name).sweep
    assert sweep.passes == passes
    variants: dict[tuple, set] = {}
    for arm in sweep.arms:
        variant = (arm.engine, arm.quantization or getattr(arm.engine_params(), "gguf", "bf16"))
        variants.setdefault(variant, set()).add((arm.prompt_len, arm.max_tokens, arm.batch_size))
    assert set(variants) == {("vllm", "bf16"), ("vllm", "cpu_int4"), ("llamacpp", "bf16"), ("llamacpp", "q4_0")}
    shapes = set.intersection(*variants.values())
    assert {(128, 128, 1), (2048, 128, 1)} <= shapes
    if name == "cpu-suite-8b.yaml":
        assert shapes == {(p, m, b) for p, m in ((128, 128), (128, 2048), (2048, 128)) for b in (1, 8)}
    assert all(a.engine_params().load_format == "dummy" for a in sweep.arms if a.engine == "vllm")
    assert not any(a.engine_params().mmap for a in sweep.arms if a.engine == "llamacpp")
