"""The whole harness on the synthetic engine, without Prefect: exact and fast."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from omni.host.placement import INTERFERENCE_BOUND_PCT
from omni.run.reaper import find_run_processes
from omni.spec import Sweep
from omni.store.layout import list_temp_files
from omni.store.reading import load_runs
from omni.sweep.execute import run_and_store
from omni.sweep.prepare import prepare_sweep, write_manifest
from omni.sweep.request import SweepRequest
from tests.conftest import reap_budget_s
from tests.specs import synthetic, write_spec

pytestmark = pytest.mark.slow


def run_all(tmp_path: Path, arms: list[dict], force: bool = False, **sweep) -> dict[str, dict]:
    prepared = prepare_sweep(
        SweepRequest(spec=write_spec(tmp_path, arms, **sweep), results=tmp_path / "results", force=force)
    )
    rows = {}
    for item in prepared.items:
        rows[item.arm.name] = run_and_store(prepared.context, item)
    return rows


def test_memory_is_measured_exactly_over_a_process_tree(tmp_path):
    rows = run_all(
        tmp_path, [synthetic("zero", mem_mb=0, procs=3, hold_s=0.5), synthetic("big", mem_mb=512, procs=3, hold_s=0.5)]
    )
    zero, big = rows["zero"], rows["big"]
    assert zero["status"] == big["status"] == "ok"
    assert zero["n_procs"] == big["n_procs"] == 3
    delta = big["rss_anon_steady_mb"] - zero["rss_anon_steady_mb"]
    assert abs(delta - 512) <= 0.01 * 512, delta
    pss_delta = big["pss_anon_steady_mb"] - zero["pss_anon_steady_mb"]
    assert abs(pss_delta - 512) <= 0.01 * 512, pss_delta
    assert big["rss_samples"] >= 5 and 40 <= big["rss_interval_ms"] <= 80
    assert big["binding_ok"] and big["binding_procs_checked"] == 3


def test_steady_memory_is_the_hold_not_the_teardown_after_it(tmp_path):
    """An engine lingers after freeing its memory (vLLM's LLM shuts its EngineCore
    down as it goes out of scope, before the result is written): those samples
    are teardown, not steady state, however many more of them there are."""
    rows = run_all(
        tmp_path,
        [
            synthetic("zero", mem_mb=0, procs=2, hold_s=0.5),
            synthetic("lingers", mem_mb=256, procs=2, hold_s=0.5, teardown_s=2.0),
        ],
    )
    zero, lingers = rows["zero"], rows["lingers"]
    assert zero["status"] == lingers["status"] == "ok"
    delta = lingers["rss_anon_steady_mb"] - zero["rss_anon_steady_mb"]
    assert abs(delta - 256) <= 0.01 * 256, delta
    assert lingers["numa_steady_missing"] == 0 and lingers["memory_binding_verified"]


def test_hang_times_out_and_nothing_survives(tmp_path):
    rows = run_all(tmp_path, [synthetic("stuck", hang=True, daemonize=True, procs=2)], timeout_s=5)
    row = rows["stuck"]
    assert row["status"] == "timeout"
    assert "timeout_s=5" in row["error"]
    # the run's own wall time (setup excluded): its deadline, then no more than reaping may take
    assert 5 <= row["wall_s"] <= 5 + reap_budget_s(), row["wall_s"]
    assert find_run_processes(row["run_id"]) == set()
    assert "leftover_processes" in row["warning_rules"]


def test_crash_is_a_failed_row_with_its_stderr(tmp_path):
    rows = run_all(tmp_path, [synthetic("boom", crash=True), synthetic("fine"), synthetic("rc3", exit_code=3)])
    assert rows["boom"]["status"] == "failed"
    assert "RuntimeError: synthetic engine crashed" in rows["boom"]["stderr_tail"]
    assert "exited with code 1" in rows["boom"]["error"]
    assert rows["boom"].get("decode_tok_s") is None
    assert rows["rc3"]["status"] == "failed" and rows["rc3"]["exit_code"] == 3
    assert rows["fine"]["status"] == "ok"
    frame = load_runs(tmp_path / "results")
    assert sorted(frame["arm"]) == ["boom", "fine", "rc3"]
    by_arm = frame.set_index("arm")
    assert by_arm["decode_tok_s"].isna()["boom"] and not by_arm["decode_tok_s"].isna()["fine"]
    assert "RuntimeError" in by_arm.loc["boom", "stderr_tail"]
    assert list_temp_files(tmp_path / "results") == []


def test_daemon_left_behind_is_killed_and_recorded(tmp_path):
    row = run_all(tmp_path, [synthetic("leaky", daemonize=True)])["leaky"]
    assert row["status"] == "ok"
    assert "leftover_processes" in row["warning_rules"]
    assert find_run_processes(row["run_id"]) == set()


def test_binding_is_checked_on_an_explicit_cpu(tmp_path):
    row = run_all(tmp_path, [synthetic("one", procs=2)], slots={"cpus": "1"})["one"]
    assert row["status"] == "ok"
    assert row["binding_method"] == "numactl"
    assert row["cpus"] == [1] and row["cpus_allowed_seen"] == [1] and row["mems_allowed_seen"] == [0]
    assert row["threads"] == 1


def test_busy_cores_refuse_then_force_runs(tmp_path, hog):
    hog(0)
    hog(1)
    time.sleep(0.5)
    refused = run_all(tmp_path / "a", [synthetic("x")], busy_threshold_pct=50)["x"]
    assert refused["status"] == "refused"
    assert "cpu0" in refused["error"] and "cpu1" in refused["error"] and "--force" in refused["error"]
    assert refused["busy_max_pct"] > 50
    forced = run_all(tmp_path / "b", [synthetic("x")], force=True, busy_threshold_pct=50)["x"]
    assert forced["status"] == "ok" and forced["forced"] is True
    assert "forced_busy" in forced["warning_rules"]


def test_without_numactl_affinity_is_set_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr("omni.run.engine_process.numactl_path", lambda: None)
    row = run_all(tmp_path, [synthetic("plain", procs=2)], slots={"cpus": "0"})["plain"]
    assert row["status"] == "ok"
    assert row["binding_method"] == "sched_setaffinity"
    assert "omni.host.pin" in row["command"]
    assert row["cpus_allowed_seen"] == [0] and row["binding_ok"]


def test_crash_in_teardown_after_the_result_keeps_the_numbers_with_a_warning(tmp_path):
    row = run_all(tmp_path, [synthetic("late", abort_at_exit=True)])["late"]
    assert row["status"] == "ok" and row["exit_code"] == -6
    assert row["decode_tok_s"] > 0
    assert "teardown_crash" in row["warning_rules"] and "SIGABRT" in " ".join(row["warnings"])


def test_cores_override_is_recorded_and_kept_on_resume(tmp_path):
    from omni.errors import OmniError
    from omni.run.plan import SlotOverride

    spec = write_spec(tmp_path, [synthetic("a"), synthetic("b")])
    results = tmp_path / "results"
    prepared = prepare_sweep(SweepRequest(spec=spec, results=results, cores=("0",)))
    write_manifest(prepared)
    row = run_and_store(prepared.context, prepared.items[0])  # then "crash": one run left
    assert row["slots_override"] == "--cores 0" and row["cpus"] == [0] and row["straddle"] is False
    resumed = prepare_sweep(SweepRequest(results=results, resume=prepared.sweep_id))
    assert [i.slot.cpus for i in resumed.items] == [(0,)] and resumed.context.slots_override == SlotOverride(("0",))
    with pytest.raises(OmniError, match="started on --cores 0; resume it without --node 0"):
        prepare_sweep(SweepRequest(results=results, resume=prepared.sweep_id, node=0))


def test_a_note_is_in_every_row_of_the_sweep_and_kept_on_resume(tmp_path):
    from omni.errors import OmniError

    results = tmp_path / "results"
    spec = write_spec(tmp_path, [synthetic("a")], passes=2)
    prepared = prepare_sweep(SweepRequest(spec=spec, results=results, note="kernel 6.8, turbo off"))
    write_manifest(prepared)
    first = run_and_store(prepared.context, prepared.items[0])  # then "crash": one run left
    resumed = prepare_sweep(SweepRequest(results=results, resume=prepared.sweep_id))
    second = run_and_store(resumed.context, resumed.items[0])
    assert first["note"] == second["note"] == "kernel 6.8, turbo off"
    assert load_runs(results)["note"].tolist() == ["kernel 6.8, turbo off"] * 2
    with pytest.raises(OmniError, match="started with --note 'kernel 6.8, turbo off': resume it without --note"):
        prepare_sweep(SweepRequest(results=results, resume=prepared.sweep_id, note="other"))


def test_memory_policy_and_locality_are_recorded_and_a_reset_policy_is_invalid(tmp_path):
    """On any host, one node or more: numactl's bind policy is seen in every
    process's numa_maps, the pages sit on the slot's node, and an engine that
    resets its own policy (set_mempolicy(MPOL_DEFAULT)) is stored invalid."""
    rows = run_all(
        tmp_path, [synthetic("bound", mem_mb=64, procs=2), synthetic("reset", mem_mb=16, escape="reset_policy")]
    )
    bound, reset = rows["bound"], rows["reset"]
    node = bound["numa_node"]
    assert bound["status"] == "ok" and bound["binding_ok"], bound.get("error")
    assert f"bind:{node}" in bound["mempolicies_seen"]
    assert set(bound["mempolicies_seen"]) <= {f"bind:{node}", "local"}  # local: OpenBLAS buffers, if loaded
    assert bound["mem_local_fraction"] == 1.0 and bound["mem_anon_kib_by_node"][node] >= 64 * 1024
    assert len(bound["numa_by_proc"]) == 2 and bound["numa_maps_reads"] >= 2
    assert bound["numa_steady_missing"] == 0 and "numa_not_steady" not in bound["warning_rules"]
    assert reset["status"] == "invalid" and not reset["binding_ok"]
    assert f"memory policy default, not bind:{node}" in reset["error"] and "pid " in reset["error"]
    assert "default" in reset["mempolicies_seen"]


def test_migrate_pages_escape_needs_a_second_node(tmp_path):
    rows = run_all(tmp_path, [synthetic("migrate", escape="migrate_pages")])
    row = rows["migrate"]
    if row["numa_nodes"] > 1:
        assert row["status"] == "invalid" and "outside membind" in row["error"]
    else:  # one node: nowhere to move pages to, and the engine says so
        assert row["status"] == "failed" and "needs a NUMA node outside the slot" in row["error"]


def test_the_row_keeps_the_engines_environment_configuration_and_iterations(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    arm = {**synthetic("env", iterations=3), "env": {"OMP_NUM_THREADS": "3"}}
    row = run_all(tmp_path, [arm])["env"]
    assert row["status"] == "ok"
    # the engine process's variables (the arm's), not the orchestrator's, which lacks it
    assert row["env_vars"]["OMP_NUM_THREADS"] == "3"
    assert row["engine_config"]["procs"] == 1
    # load_s from outside (process start to the loaded mark) spans the engine's own clock
    assert row["load_s"] >= row["engine_config"]["engine_load_s"] > 0
    stored = load_runs(tmp_path / "results").iloc[0]
    assert '"OMP_NUM_THREADS": "3"' in stored["env_vars"] and stored["iterations"] == 3
    from omni.store.reading import load_iterations

    its = load_iterations(tmp_path / "results")
    assert list(its["iteration"]) == [0, 1, 2] and (its["steps"] == 7).all()
    assert stored["tpot_ms"] == pytest.approx(its["tpot_ms"].median())


def test_busy_wait_runs_once_the_neighbour_stops_and_refuses_after_the_wait(tmp_path, hog):
    import os
    import signal
    import threading

    pid = hog(0)
    time.sleep(0.5)
    # the neighbour stops after about 4 s: a run that may wait 60 s runs, and says how long it waited
    stopped_at = []

    def stop_neighbour() -> None:
        stopped_at.append(time.time())
        os.kill(pid, signal.SIGKILL)

    threading.Timer(4.0, stop_neighbour).start()
    waited = run_all(tmp_path / "a", [synthetic("x")], busy_threshold_pct=50, busy_wait_s=60, slots={"cpus": "0"})["x"]
    assert waited["status"] == "ok", waited.get("error")
    assert 0 < waited["busy_waited_s"] < 60 and waited["busy_max_pct"] <= 50
    # the wait (from the run's start, for as long as it says) ended once the neighbour had stopped
    assert waited["started_at"].timestamp() + waited["busy_waited_s"] >= stopped_at[0], (waited, stopped_at)
    # one that never stops: refused once the wait is spent, naming it
    hog(0)
    time.sleep(0.5)
    refused = run_all(tmp_path / "b", [synthetic("x")], busy_threshold_pct=50, busy_wait_s=3, slots={"cpus": "0"})["x"]
    assert refused["status"] == "refused" and "busy_wait_s=3" in refused["error"]
    assert refused["busy_waited_s"] >= 3


DEFAULT_BUSY_PCT = Sweep.model_fields["busy_threshold_pct"].default


def test_a_neighbour_at_40_percent_of_a_slot_cpu_is_refused_by_default(tmp_path, hog):
    """This host has no SMT: the slot's own CPU stands in for a sibling (the
    sibling logic is tests/unit/test_topology.py's)."""
    hog(0, duty=0.4)
    time.sleep(0.5)
    row = run_all(tmp_path, [synthetic("x")], busy_threshold_pct=DEFAULT_BUSY_PCT, slots={"cpus": "0"})["x"]
    assert row["status"] == "refused" and "cpu0" in row["error"], row.get("error")
    assert row["busy_max_pct"] > DEFAULT_BUSY_PCT
    assert (row["smt_mode"], row["smt_siblings"]) == ("false", [])


def test_a_neighbour_starting_mid_run_is_interference_with_its_figure(tmp_path, hog):
    import threading

    # about 4 s of timed steps, mostly waiting, so the neighbour gets its share
    arm = synthetic("x", step_sleep_ms=100, iterations=5)
    rows: dict = {}
    runner = threading.Thread(target=lambda: rows.update(run_all(tmp_path, [arm], slots={"cpus": "0"})))
    runner.start()
    logs = tmp_path / "results"
    while runner.is_alive() and not any("omni-phase: loaded" in p.read_text() for p in logs.rglob("engine.log")):
        time.sleep(0.05)
    hog(0, duty=0.4)  # after the start check and the engine's load: mid-run
    runner.join()
    row = rows["x"]
    assert row["status"] == "ok", row.get("error")
    assert row["interference_samples"] >= 3
    # 40 % of the CPU, less the part of the first window before it started
    assert row["foreign_cpu_peak_pct"] > 30, row["foreign_cpu_peak_pct"]
    assert row["foreign_cpu_peak_pct"] > INTERFERENCE_BOUND_PCT and row["foreign_cpu_mean_pct"] > 0
    assert row["run_delay_ms"] >= 0 and row["interference_cpu_ms"] > 0
    message = row["warnings"][row["warning_rules"].index("interference")]
    assert f"CPU 0 spent {row['foreign_cpu_peak_pct']:.0f}%" in message


def test_a_slot_holds_its_idle_siblings_lock(tmp_path, monkeypatch):
    """The run waits for the lock on its slot's idle SMT sibling (here CPU 1
    stands in for one), held by another process, and starts once it is free."""
    import threading
    from dataclasses import replace

    from omni.host.topology import Slot
    from tests.harness.test_schedule import another_process_holding

    monkeypatch.setenv("OMNI_LOCK_DIR", str(tmp_path / "locks"))
    holder = another_process_holding("hold_cpus((1,), {directory})", tmp_path / "locks")
    prepared = prepare_sweep(SweepRequest(spec=write_spec(tmp_path, [synthetic("x")]), results=tmp_path / "results"))
    item = replace(prepared.items[0], slot=Slot(0, 0, (0,), (0,), siblings=(1,)))
    rows = []
    runner = threading.Thread(target=lambda: rows.append(run_and_store(prepared.context, item)))
    runner.start()
    time.sleep(1.0)
    released = datetime.now(UTC)
    holder.communicate("go\n")
    runner.join()
    assert rows[0]["status"] == "ok", rows[0].get("error")
    assert rows[0]["started_at"] >= released, "the run started while its sibling's lock was held"
    assert rows[0]["smt_siblings"] == [1]
