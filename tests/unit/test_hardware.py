"""Verdicts across sweeps only between runs of the same hardware and engine
env (omni.history.hardware): what differs, per arm, and what was not recorded."""

from __future__ import annotations

import numpy as np
import pandas as pd

from omni.history.compare import compare_sweeps, nightly_changes, sweep_history
from omni.history.hardware import check_hardware, hardware_facts
from omni.report.across import changes_markdown, comparison_markdown
from omni.report.summary import summarize_sweep
from tests.rows import store_sweep

INTEL, AMD = "Intel Xeon Platinum 8480+", "AMD EPYC 9B45"


def runs(cpu_model=INTEL, cpus=(0, 1), engine_version="vllm 0.32.0", n: int = 3) -> pd.DataFrame:
    """Rows as load_runs gives them: the CPU list an array, one value per run."""
    return pd.DataFrame(
        {
            "cpu_model": [cpu_model] * n,
            "cpus": [np.array(cpus)] * n,
            "engine_version": [engine_version] * n,
        }
    )


def hardware(cpu_model: str, cores: int) -> dict:
    return {"cpu_model": cpu_model, "cpus": list(range(cores)), "engine_version": "synthetic-1"}


def test_the_same_hardware_is_no_difference():
    check = check_hardware(runs(), runs())
    assert check.same and check.differences == () and check.unknown == ()
    assert hardware_facts(runs()) == {
        "cpu_model": (INTEL,),
        "cores per slot": (2,),
        "engine_version": ("vllm 0.32.0",),
    }


def test_a_new_cpu_and_wider_slots_are_named_with_both_values():
    check = check_hardware(runs(), runs(cpu_model=AMD, cpus=(0, 1, 2, 3)))
    assert not check.same and check.kind() == "hardware"
    assert check.describe() == f"cpu_model {INTEL!r} -> {AMD!r}; cores per slot 2 -> 4"
    assert check.refusal() == (
        f"refused: the sweeps ran on different hardware: cpu_model {INTEL!r} -> {AMD!r}; cores per slot 2 -> 4 "
        "(--across-hardware judges them anyway)"
    )


def test_another_engine_version_is_a_different_engine_env():
    check = check_hardware(runs(), runs(engine_version="vllm 0.33.0"))
    assert check.kind() == "engine env"
    assert check.reason() == "ran on a different engine env: engine_version 'vllm 0.32.0' -> 'vllm 0.33.0'"
    both = check_hardware(runs(), runs(cpu_model=AMD, engine_version="vllm 0.33.0"))
    assert both.kind() == "hardware and engine env"


def test_runs_of_mixed_values_differ_from_runs_of_one():
    mixed = pd.concat([runs(), runs(cpus=(0, 1, 2, 3))])
    assert hardware_facts(mixed)["cores per slot"] == (2, 4)
    assert check_hardware(runs(), mixed).describe() == "cores per slot 2 -> [2, 4]"


def test_facts_older_rows_did_not_record_are_unknown_not_equal():
    old = pd.DataFrame({"run_id": ["r1", "r2"], "cpus": [None, None], "engine_version": [pd.NA, ""]})
    assert hardware_facts(old) == {"cpu_model": (), "cores per slot": (), "engine_version": ()}
    check = check_hardware(old, runs(cpu_model=AMD, cpus=(0, 1, 2, 3)))
    assert check.same  # nothing known differs: judged, and the gap is said
    assert ("cpu_model", "before") in check.unknown and ("cpu_model", "after") not in check.unknown
    assert check.describe_unknown("s1", "s2") == (
        "not recorded, so not checked: cpu_model in s1; cores per slot in s1; engine_version in s1"
    )
    assert check_hardware(pd.DataFrame(), pd.DataFrame()).same  # no column at all: no crash


def test_compare_refuses_only_the_arms_whose_runs_differ(tmp_path):
    """Hardware and engine env are checked per arm: an arm whose engine
    version alone changed is refused, its neighbour is judged."""
    store_sweep(tmp_path, "s1", {"a": [100, 101, 99], "b": [100, 101, 99]}, columns=hardware(INTEL, 2))
    store_sweep(tmp_path, "s2", {"a": [80, 81, 79]}, columns=hardware(INTEL, 2))
    store_sweep(tmp_path, "s2", {"b": [80, 81, 79]}, columns={**hardware(INTEL, 2), "engine_version": "synthetic-2"})
    result = compare_sweeps(tmp_path, "s1", "s2")
    assert result.judged[("a", "decode_tok_s")].comparison.verdict == "worse"
    refused = result.judged[("b", "decode_tok_s")]
    assert refused.comparison is None and refused.refused == (
        "refused: the sweeps ran on a different engine env: engine_version 'synthetic-1' -> 'synthetic-2' "
        "(--across-hardware judges them anyway)"
    )
    text = comparison_markdown(result)
    assert text.splitlines()[2] == (
        "**No verdict** for `b`: the sweeps ran on a different engine env: engine_version 'synthetic-1' -> "
        "'synthetic-2'. Compare sweeps of the same engine env, or pass --across-hardware to judge them anyway."
    )
    across = compare_sweeps(tmp_path, "s1", "s2", across_hardware=True)
    assert across.judged[("b", "decode_tok_s")].comparison.verdict == "worse"
    assert "**Judged across engine env** (--across-hardware), `b`: engine_version" in comparison_markdown(across)


def test_compare_says_which_facts_it_could_not_check(tmp_path):
    store_sweep(tmp_path, "s1", {"a": [100, 101, 99]})  # rows of an omni that recorded none of them
    store_sweep(tmp_path, "s2", {"a": [100, 101, 99]}, columns=hardware(AMD, 4))
    result = compare_sweeps(tmp_path, "s1", "s2")
    assert result.judged[("a", "decode_tok_s")].comparison is not None
    assert (
        "- hardware of every arm not recorded, so not checked: cpu_model in s1; cores per slot in s1; "
        "engine_version in s1"
    ) in comparison_markdown(result)


def store_nights(results, hosts: list[tuple[str, int, float]]) -> None:
    for night, (cpu_model, cores, center) in enumerate(hosts):
        store_sweep(
            results,
            f"n{night}",
            {"a": [center - 1, center, center + 1]},
            name="nightly",
            day=night,
            columns=hardware(cpu_model, cores),
        )


def test_a_night_on_a_new_host_is_not_judged_against_the_old_hosts_nights(tmp_path):
    """Four nights on one CPU, then one on a slower CPU: no regression (its
    history is all skipped, too short to judge), unless asked."""
    store_nights(tmp_path, [(INTEL, 2, 100), (INTEL, 2, 101), (INTEL, 2, 99), (INTEL, 2, 100), (AMD, 2, 80)])
    nightly = nightly_changes(tmp_path, "nightly", window=5)
    assert nightly.changes == [] and nightly.unknown == {}
    why = f"ran on different hardware: cpu_model {INTEL!r} -> {AMD!r}"
    assert nightly.differing == {("n4", "a"): {why: ("n0", "n1", "n2", "n3")}}
    text = changes_markdown("nightly", nightly)
    assert f"- `a` in n4: 4 earlier sweep(s) skipped as history, they {why} (n0, n1, n2, n3)" in text
    assert "History on other hardware or engine env is skipped (a sweep left with fewer than --min-history " in text
    across = nightly_changes(tmp_path, "nightly", window=5, across_hardware=True)
    assert [(c.sweep_id, c.kind) for c in across.changes if c.metric == "decode_tok_s"] == [("n4", "regression")]
    assert f"- `a` in n4: judged against 4 earlier sweep(s) that {why} (n0, n1, n2, n3; --across-hardware)" in (
        changes_markdown("nightly", across)
    )


def test_history_keeps_the_nights_of_the_same_hardware_around_a_visit_elsewhere(tmp_path):
    """A, A, A, B, B, then A 20 % slower: judged against the three A nights
    of its window only, and flagged."""
    hosts = [(INTEL, 2, 100), (INTEL, 2, 101), (INTEL, 2, 99), (AMD, 4, 150), (AMD, 4, 151), (INTEL, 2, 80)]
    store_nights(tmp_path, hosts)
    nightly = nightly_changes(tmp_path, "nightly", window=5)
    [change] = [c for c in nightly.changes if c.metric == "decode_tok_s"]
    assert change.sweep_id == "n5" and change.kind == "regression" and change.history_sweeps == ("n0", "n1", "n2")
    assert nightly.differing[("n5", "a")] == {
        f"ran on different hardware: cpu_model {AMD!r} -> {INTEL!r}; cores per slot 4 -> 2": ("n3", "n4")
    }
    # the report's trend plots read the same history: the flagged night is the same-hardware one
    history = sweep_history(tmp_path, summarize_sweep(tmp_path, "n5"))
    assert [c.sweep_id for c in history["changes"] if c.metric == "decode_tok_s"] == ["n5"]
    assert [s for s, _, _ in history["points"][("a", "decode_tok_s")]] == [f"n{i}" for i in range(6)]


def test_nights_that_recorded_no_hardware_are_history_and_said_unchecked(tmp_path):
    for night, center in enumerate([100, 101, 99, 80]):
        store_sweep(tmp_path, f"n{night}", {"a": [center - 1, center, center + 1]}, name="nightly", day=night)
    nightly = nightly_changes(tmp_path, "nightly", window=5)
    assert [c.sweep_id for c in nightly.changes if c.metric == "decode_tok_s"] == ["n3"]
    assert nightly.differing == {}
    facts = ("cpu_model", "cores per slot", "engine_version")
    assert nightly.unknown == {f"n{i}": facts for i in range(4)}
    assert "- cpu_model, cores per slot, engine_version not recorded in n0, n1, n2, n3: not checked" in (
        changes_markdown("nightly", nightly)
    )
