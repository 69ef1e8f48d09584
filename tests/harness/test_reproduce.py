"""``omni reproduce`` as a user runs it: a synthetic sweep reproduced from
its id, a doctored copy of its rows read from a file elsewhere, its
summary JSON alone, a copy with another CPU, and a run file from another host (the 8480 fixture).

Chance of failing: the arms' speeds come from sleeps (20 ms a step, the
CPU's speed does not move them; 0.02-0.1 % between runs here), so decode
of the rerun lies within a fraction of a percent of the recorded runs.
The doctored copy's decode is 30 % higher: its interval (drift 1 % and
that noise, at the primary level) would have to reach x0.952 from x0.77,
some 20 standard errors; far below 1 in 10,000.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from omni.host.provenance import collect_numa
from tests.conftest import omni, xeon_8480c_2s
from tests.rows import store_sweep

PARAMS = {"step_sleep_ms": 20, "work_per_token": 0, "prefill_work_per_token": 0, "iterations": 3}
SPEC = {
    "name": "reproduce-synthetic",
    "passes": 3,
    "arms": [
        {"name": "fast", "engine": "synthetic", "max_tokens": 12, "params": PARAMS},
        {"name": "slow", "engine": "synthetic", "max_tokens": 12, "params": {**PARAMS, "step_sleep_ms": 26}},
    ],
}


def record_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{\n") : stdout.rindex("}") + 1])


def one_line_refusal(done, *names: str) -> str:
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert all(name in lines[0] for name in names), lines[0]
    return lines[0]


@pytest.mark.slow
def test_a_sweep_reproduced_a_doctored_copy_not_and_another_cpu_refused(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    results = tmp_path / "results"
    done = omni("sweep", str(spec), "--results", str(results), "--force", "--json", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sweep_id = json.loads(done.stdout.strip().splitlines()[-1])["sweep_id"]

    done = omni("reproduce", sweep_id, "--results", str(results), "--force", "--json", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = record_of(done.stdout)
    verdicts = {(o["arm"], o["metric"]): o for o in record["outcomes"]}
    assert {arm for arm, _ in verdicts} == {"fast", "slow", "fast.control"}
    # exact memory figures: reproduced; nothing the sleeps time is called different
    assert all(verdicts[(arm, "rss_anon_steady_mb")]["verdict"] == "reproduced" for arm in ("fast", "slow"))
    assert not [o for o in record["outcomes"] if o["verdict"] == "not reproduced"]
    decode = verdicts[("slow", "decode_tok_s")]
    assert decode["ratio"] == pytest.approx(1.0, abs=0.02) and decode["runs"] == [3, 3]
    import pandas as pd

    rows = pd.read_parquet(results / "runs")
    rerun = rows[rows["sweep_id"] == record["sweep_id"]]
    assert len(rerun) == 9 and (rerun["reproduces"] == sweep_id).all() and rerun["spec_text"].notna().all()
    assert (results / "reproductions" / record["sweep_id"] / "reproduction.md").exists()

    # a published copy of the rows, decode 30 % higher, read from a folder of its own
    part = next((results / "compacted").glob(f"sweep={sweep_id}/part-*.parquet"))
    elsewhere = tmp_path / "published"
    elsewhere.mkdir()
    table = pq.read_table(part)
    doctored = table.set_column(
        table.schema.get_field_index("decode_tok_s"), "decode_tok_s", pc.multiply(table["decode_tok_s"], 1.3)
    )
    pq.write_table(doctored, elsewhere / "doctored.parquet")
    other = tmp_path / "other-results"
    done = omni("reproduce", str(elsewhere / "doctored.parquet"), "--results", str(other), "--force", "--json")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    for arm in ("fast", "slow", "fast.control"):
        o = {(o["arm"], o["metric"]): o for o in record_of(done.stdout)["outcomes"]}[(arm, "decode_tok_s")]
        assert o["verdict"] == "not reproduced" and o["ci"][1] < 1 / 1.05 and o["ratio"] < 1, o
    assert (other / "reproductions").is_dir()

    # a published summary JSON alone carries its rows: planned from it anywhere; one without them is refused
    assert omni("summary", sweep_id, "--results", str(results)).returncode == 0
    summary = json.loads((results / "summaries" / f"{sweep_id}.json").read_text())
    (elsewhere / "summary.json").write_text(json.dumps(summary))
    plan = omni("reproduce", str(elsewhere / "summary.json"), "--results", str(tmp_path / "fourth"), "--dry-run")
    assert plan.returncode == 0 and f"(summary): sweep {sweep_id}, 9 row(s)" in plan.stdout, plan.stdout + plan.stderr
    del summary["rows_parquet_base64"]
    (elsewhere / "bare.json").write_text(json.dumps(summary))
    bare = omni("reproduce", str(elsewhere / "bare.json"), "--results", str(tmp_path / "fourth"))
    one_line_refusal(bare, "carries no rows", f"omni summary {sweep_id}")
    assert not (tmp_path / "fourth").exists()

    # another CPU: refused before anything runs or is written
    cpu = table.schema.get_field_index("cpu_model")
    moved = table.set_column(cpu, "cpu_model", pa.array(["Intel(R) Xeon(R) Platinum 8480+"] * table.num_rows))
    pq.write_table(moved, elsewhere / "other-cpu.parquet")
    third = tmp_path / "third"
    done = omni("reproduce", str(elsewhere / "other-cpu.parquet"), "--results", str(third))
    one_line_refusal(done, "cpu_model", "8480+", "--across-hardware")
    assert not third.exists()


def test_a_run_file_from_another_host_is_refused_and_planned_across_hardware(tmp_path):
    """Rows recorded on the 8480 fixture's topology (two nodes of 112 CPUs):
    refused here, and --across-hardware --dry-run plans the rerun on this
    host's slots, naming every difference; nothing is written."""
    facts: dict = {}
    collect_numa(facts, root=xeon_8480c_2s(tmp_path / "sysfs"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    columns = {
        "numa_nodes": facts["numa_nodes"],
        "numa_topology": json.dumps(facts["numa_topology"]),
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480C",
        "spec_text": spec.read_text(),
        "spec_path": str(spec),
        "slots_override": "--cores 56-111",
    }
    theirs = tmp_path / "theirs"
    run_ids = store_sweep(theirs, "sw-8480", {"fast": [50.0, 51.0, 49.0]}, columns=columns)
    published = tmp_path / "published"
    published.mkdir()
    copy = published / "run.parquet"
    shutil.copy(next(theirs.glob(f"runs/sweep=sw-8480/{run_ids[0]}.parquet")), copy)
    ours = tmp_path / "ours"

    refused = one_line_refusal(omni("reproduce", str(copy), "--results", str(ours)), "numa_nodes: 2 -> ")
    assert "node 0: 112 CPUs, node 1: 112 CPUs" in refused and "--across-hardware" in refused

    done = omni("reproduce", str(copy), "--results", str(ours), "--across-hardware", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "numa_nodes: 2 -> " in done.stdout and "(hardware)" in done.stdout
    assert "the spec's slots" in done.stdout and "56-111" not in done.stdout  # another host's CPUs are not used
    assert "rerun: fast, slow, fast.control; 3 pass(es)" in done.stdout
    assert not ours.exists()
