"""Fleet sweeps without a server: which hosts, which runs each, what a
resume sends where, and the refusals (omni.fleet.hosts, omni.sweep.prepare.prepare_fleet)."""

from __future__ import annotations

import contextlib
import platform
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from omni.errors import OmniError, SpecError
from omni.fleet import hosts as fleet
from omni.fleet.hosts import HostState
from omni.run.plan import plan_sweep
from omni.spec import load_spec
from omni.store.layout import run_path
from omni.sweep.prepare import prepare_sweep, write_manifest
from omni.sweep.request import SweepRequest, parse_replacements
from tests.conftest import REPO

EPYC = {"cpu_model": "AMD EPYC 7763", "isa": ["avx", "avx2", "fma"], "topology": {"0": "0-63"}}
SPR = {
    "cpu_model": "Intel Xeon Platinum 8480C",
    "isa": ["amx_bf16", "avx", "avx2", "avx512f", "fma"],
    "topology": {"0": "0-55,112-167", "1": "56-111,168-223"},
}


def spec(tmp_path, hosts: dict, passes: int = 3):
    data = yaml.safe_load((REPO / "arms" / "smoke-synthetic.yaml").read_text())
    data.update(passes=passes, hosts=hosts)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def alive(name: str, facts: dict, machine: str | None = None) -> HostState:
    return HostState(name, {**facts, "host": name, "hostname": machine or platform.node()}, True, datetime.now(UTC))


def dead(name: str, facts: dict, ago_s: float = 90) -> HostState:
    return HostState(
        name,
        {**facts, "host": name, "hostname": platform.node()},
        False,
        datetime.now(UTC) - timedelta(seconds=ago_s),
    )


@pytest.fixture
def server(monkeypatch):
    """A Prefect API that knows the hosts the test puts in ``states``."""
    states: dict[str, HostState] = {}
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setattr("prefect.client.orchestration.get_client", lambda **_: contextlib.nullcontext(None))
    monkeypatch.setattr(fleet, "read_hosts", lambda client, pool=None: states)
    return states


@pytest.mark.parametrize(
    "hosts, needle",
    [
        ({"names": ["a", "B"]}, "'B' is not a fleet host name"),
        ({"names": ["a", "a"]}, "host(s) named more than once: a"),
        ({"names": []}, "give a list of host names"),
        ({"names": "a"}, "give a list of host names"),
        ({"names": ["a"], "mode": "spread"}, "hosts.mode: must be 'replicate' or 'split'"),
        ({"names": ["a"], "extra": 1}, "hosts.extra"),
    ],
)
def test_a_bad_hosts_block_names_the_field_and_line(tmp_path, hosts, needle):
    path = spec(tmp_path, hosts)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert needle in str(caught.value) and f"{path}:" in str(caught.value)


def test_replicate_gives_every_host_the_whole_plan_with_run_ids_of_its_own(tmp_path):
    loaded = load_spec(spec(tmp_path, {"names": ["a", "b"]}))
    runs = fleet.assign(loaded, "s1", 3, ["a", "b"], "replicate")
    assert len(runs["a"]) == len(runs["b"]) == 9 and not set(runs["a"]) & set(runs["b"])
    assert runs == fleet.assign(loaded, "s1", 3, ["a", "b"], "replicate")  # deterministic: resume replans them


def test_split_gives_each_host_whole_passes_of_the_one_plan(tmp_path):
    loaded = load_spec(spec(tmp_path, {"names": ["a", "b"], "mode": "split"}))
    items = plan_sweep(loaded, "s1", [fleet.NO_SLOT], 3)
    runs = fleet.assign(loaded, "s1", 3, ["a", "b"], "split")
    passes = {h: {i.pass_index for i in items if i.run_id in ids} for h, ids in runs.items()}
    assert passes == {"a": {0, 2}, "b": {1}}
    assert sorted(runs["a"] + runs["b"]) == sorted(i.run_id for i in items)  # the run ids of the plan on one host


def test_split_differences_name_each_fact_and_host():
    assert fleet.split_differences({"a": EPYC, "b": dict(EPYC)}) == []
    lines = fleet.split_differences({"a": EPYC, "b": SPR})
    assert [line.split(":")[0] for line in lines] == ["cpu_model", "isa", "topology"]
    assert "b has amx_bf16, avx512f" in lines[1] and "a has (none beyond the common ones)" in lines[1]
    assert "b node 0 cpus 0-55,112-167, node 1 cpus 56-111,168-223" in lines[2]


def test_hosts_are_chosen_alive_and_identical_for_split():
    states = {"a": alive("a", EPYC), "b": alive("b", SPR), "c": dead("c", EPYC), "d": alive("d", EPYC)}
    assert fleet.choose_hosts("all", "replicate", states) == ["a", "b", "d"]
    assert fleet.choose_hosts(["a", "d"], "split", states) == ["a", "d"]
    with pytest.raises(OmniError, match=r"host c is offline: its worker's last heartbeat was 9\d s ago"):
        fleet.choose_hosts(["a", "c"], "replicate", states)
    with pytest.raises(OmniError, match="host x is unknown.*Alive hosts: a, b, d"):
        fleet.choose_hosts(["x"], "replicate", states)
    with pytest.raises(OmniError, match="these differ: cpu_model: a 'AMD EPYC 7763'; b 'Intel"):
        fleet.choose_hosts(["a", "b"], "split", states)
    assert fleet.choose_hosts(["a", "b"], "split", states, force=True) == ["a", "b"]
    with pytest.raises(OmniError, match="no host is alive"):
        fleet.choose_hosts("all", "replicate", {"c": states["c"]})


def test_resume_sends_exactly_the_missing_runs_to_their_host_or_its_replacement(tmp_path, server):
    server.update(a=alive("a", EPYC), b=alive("b", EPYC), c=alive("c", EPYC), d=alive("d", SPR))
    results = tmp_path / "results"
    started = prepare_sweep(SweepRequest(spec=spec(tmp_path, {"names": ["a", "b"], "mode": "split"}), results=results))
    assert started.fleet["hosts"] == ["a", "b"] and not started.slots and not started.context.resources
    assert [s["host"] for s in started.fleet["shards"]] == ["a", "b"] and len(started.items) == 9
    write_manifest(started)
    runs = started.fleet["runs"]
    for run_id in runs["a"] + runs["b"][:1]:  # a finished, b stored one run and died
        path = run_path(results, started.sweep_id, run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    server["b"] = dead("b", EPYC)
    with pytest.raises(OmniError, match="host b is offline"):
        prepare_sweep(SweepRequest(resume=started.sweep_id, results=results))
    moved = prepare_sweep(SweepRequest(resume=started.sweep_id, results=results, replace_hosts=["b=c"]))
    assert moved.fleet["shards"] == [{"host": "c", "plan_host": "b", "run_ids": runs["b"][1:]}]
    assert [i.run_id for i in moved.items] == runs["b"][1:] and moved.planned == 9
    with pytest.raises(OmniError, match="these differ: cpu_model"):  # split: the replacement must match too
        prepare_sweep(SweepRequest(resume=started.sweep_id, results=results, replace_hosts=["b=d"]))
    with pytest.raises(OmniError, match="ran on a, b only"):
        prepare_sweep(SweepRequest(resume=started.sweep_id, results=results, replace_hosts=["e=c"]))
    server["b"] = alive("b", EPYC)
    back = prepare_sweep(SweepRequest(resume=started.sweep_id, results=results))
    assert back.fleet["shards"] == [{"host": "b", "plan_host": "b", "run_ids": runs["b"][1:]}]


def test_a_fleet_spec_needs_a_server_and_force_flags_need_a_fleet(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with pytest.raises(OmniError, match="set PREFECT_API_URL"):
        prepare_sweep(SweepRequest(spec=spec(tmp_path, {"names": ["a"]}), results=tmp_path / "r"))
    local = tmp_path / "local.yaml"
    local.write_text((REPO / "arms" / "smoke-synthetic.yaml").read_text())
    with pytest.raises(OmniError, match="for fleet sweeps"):
        prepare_sweep(SweepRequest(spec=local, results=tmp_path / "r", force_hosts=True, dry_run=True))
    assert not (tmp_path / "r").exists()
    with pytest.raises(OmniError, match="give OLD=NEW"):
        parse_replacements(["b"])


def test_a_fleet_on_other_machines_needs_one_shared_store(tmp_path, server):
    server.update(a=alive("a", EPYC), far=alive("far", EPYC, machine="spr-box"))
    with pytest.raises(OmniError, match=r"hosts far \(spr-box\) run elsewhere.*--results s3://"):
        prepare_sweep(SweepRequest(spec=spec(tmp_path, {"names": ["a", "far"]}), results=tmp_path / "results"))
    one = prepare_sweep(SweepRequest(spec=spec(tmp_path, {"names": ["a"]}), results=tmp_path / "results"))
    assert one.fleet["hosts"] == ["a"]


def test_the_shard_deployment_is_registered_again_when_it_takes_other_parameters(monkeypatch):
    """A server whose sweep-shard deployment another omni registered (other
    parameter names) would refuse every part sent to it."""
    import inspect
    import subprocess
    from types import SimpleNamespace

    from flows.fleet import sweep_shard
    from flows.worker import ensure_shard_deployment
    from omni.fleet import hosts as fleet

    assert tuple(inspect.signature(sweep_shard.fn).parameters) == fleet.SHARD_PARAMETERS
    deploys = []
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda argv, **kw: deploys.append(argv) or SimpleNamespace(returncode=0, stdout="", stderr=""),
    )

    def client(names):
        schema = {"properties": {n: {} for n in names}}
        return SimpleNamespace(read_deployment_by_name=lambda name: SimpleNamespace(parameter_openapi_schema=schema))

    ensure_shard_deployment(client(fleet.SHARD_PARAMETERS))
    assert deploys == []
    ensure_shard_deployment(client(["spec", "passes", "host", "run_ids"]))
    assert len(deploys) == 1 and deploys[0][-2:] == ["deploy", "--all"]


def test_the_coordinators_pool_survives_a_server_that_refuses_at_first_and_an_existing_pool(monkeypatch) -> None:
    """scripts/worker.sh's first step: the API refusing right after the stack
    came up, then a pool that exists already, is a pool, not an exit."""
    import contextlib
    from types import SimpleNamespace

    from prefect.exceptions import ObjectAlreadyExists

    from flows import worker

    answers = [ConnectionError("refused"), RuntimeError("503"), None]
    created = []

    def create_work_pool(pool):
        created.append(pool.name)
        raise ObjectAlreadyExists(SimpleNamespace(), "exists")

    client = SimpleNamespace(api_healthcheck=lambda: answers.pop(0), create_work_pool=create_work_pool)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    monkeypatch.setattr("prefect.client.orchestration.get_client", lambda **_: contextlib.nullcontext(client))
    monkeypatch.setattr(worker.time, "sleep", lambda s: None)
    worker.ensure_pool("omni", wait_s=60)
    assert created == ["omni"] and answers == []

    # a server that never answers: the error says where it asked and what to do
    monkeypatch.setattr(worker.time, "monotonic", iter(range(0, 1000, 30)).__next__)
    client.api_healthcheck = lambda: ConnectionError("refused")
    with pytest.raises(OmniError, match=r"127\.0\.0\.1:9/api did not answer within 60 s .*omni stack up"):
        worker.ensure_pool("omni", wait_s=60)
