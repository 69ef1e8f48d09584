"""``passes: auto`` end to end on the synthetic engine, without Prefect: a
sweep runs pass by pass and stops by the sequential rule (omni.stats.sequential).

The synthetic engine's speed on a loaded host varies, so these assert what
the rule guarantees (where it stopped, it stopped for the reason it gives,
at the look's levels, with the summary agreeing), not a pass count.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from omni.errors import OmniError
from omni.report.summary import summarize_sweep
from omni.stats.sequential import look_confidence
from omni.store.reading import load_runs
from omni.sweep.execute import run_sweep_items
from omni.sweep.prepare import prepare_sweep, read_stops
from omni.sweep.request import SweepRequest

pytestmark = pytest.mark.slow


def auto_spec(tmp_path: Path, name: str, step_ms: tuple[float, float], **extra) -> Path:
    spec = yaml.safe_load(Path("arms/smoke-synthetic.yaml").read_text())
    spec.update(name=name, passes="auto", control=False, primary_metrics=["decode_tok_s"], **extra)
    for arm, ms in zip(spec["arms"], step_ms):
        arm["params"].update(mem_mb=64, procs=1, step_sleep_ms=ms)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_auto(tmp_path: Path, spec: Path) -> tuple[str, list[str], dict]:
    results = tmp_path / "results"
    prepared = prepare_sweep(SweepRequest(spec=spec, results=results, force=True, cores=("0",)))
    looks: list[str] = []
    rows = run_sweep_items(prepared, looks.append)
    assert all(row["status"] == "ok" for row in rows), [row.get("error") for row in rows]
    return prepared.sweep_id, looks, read_stops(results, prepared.sweep_id)


def check_stop(tmp_path: Path, sweep_id: str, looks: list[str], stop: dict, max_passes: int):
    """Where and why it stopped, the rows it ran, and the summary at that look."""
    results = tmp_path / "results"
    passes = stop["passes"]
    assert 3 <= passes <= max_passes and stop["max_passes"] == max_passes
    assert looks[-len(stop["verdicts"]) - 1] == stop["describe"]
    assert sum(line.startswith("after pass") for line in looks) == passes - 2  # one look per pass from the third
    runs = load_runs(results, sweep_id=sweep_id)
    assert sorted(runs.groupby("arm")["pass_index"].max()) == [passes - 1] * 2 and len(runs) == 2 * passes
    summary = summarize_sweep(results, sweep_id)
    assert summary.adjustment.look == (passes, max_passes)
    assert f"stopped by the rule {stop['describe']}" in summary.adjustment.describe()
    decode = summary.judged[("large", "decode_tok_s")].comparison
    assert decode.confidence == pytest.approx(look_confidence(0.96, passes, max_passes))
    return decode


@pytest.mark.timeout(300)
def test_a_20_percent_slower_arm_is_found_worse_and_the_sweep_stops(tmp_path):
    spec = auto_spec(tmp_path, "auto-slower", (4, 5), max_passes=12)
    sweep_id, looks, stop = run_auto(tmp_path, spec)
    print("\n".join(looks))
    decode = check_stop(tmp_path, sweep_id, looks, stop, 12)
    assert decode.verdict == "worse" and decode.ratio < 0.95, looks
    assert stop["reason"] == "conclusive" and stop["passes"] < 12, looks
    # a resume has nothing left to run: the rule has answered
    assert prepare_sweep(SweepRequest(results=tmp_path / "results", resume=sweep_id)).items == []
    # --passes would replace the rule: refused, with what to do instead
    with pytest.raises(OmniError, match="passes: auto.*set max_passes in the spec"):
        prepare_sweep(SweepRequest(spec=spec, results=tmp_path / "results", passes=4))


@pytest.mark.timeout(500)
def test_an_aa_pair_stops_equivalent_or_at_its_budget(tmp_path):
    """The rule may call an A/A pair different: at most its alpha, here 4 %
    (decode_tok_s the one primary: 80 % of the arm's 5 %); simulated sweeps
    stay within it (benchmarks/sequential_rules.py). A sweep that
    does is met by another, independent one, up to three in all, which must
    not: all three come about once in 15,000, where one alone would fail
    this test once in 25."""
    for attempt in ("first", "second", "third"):
        where = tmp_path / attempt
        where.mkdir()
        spec = auto_spec(where, "auto-aa", (4, 4), max_passes=8, budget="40s")
        sweep_id, looks, stop = run_auto(where, spec)
        print("\n".join(looks))
        decode = check_stop(where, sweep_id, looks, stop, 8)
        assert stop["reason"] in ("conclusive", "max_passes", "budget")
        called_different = stop["reason"] == "conclusive" and decode.verdict != "equivalent"
        if not called_different or decode.below_min_effect:
            break
    if stop["reason"] == "conclusive":
        assert decode.verdict == "equivalent" or decode.below_min_effect, looks
    else:
        assert decode.verdict == "inconclusive" and stop["pending"] == ["large decode_tok_s"], looks
