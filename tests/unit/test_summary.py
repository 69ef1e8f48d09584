"""Summaries over stored rows: retraction, calibration, verdicts, nightly
regressions and provenance."""

from __future__ import annotations

import html
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import yaml

from omni.errors import OmniError
from omni.history.calibration import calibrate_from
from omni.history.compare import compare_sweeps
from omni.report.html import html_report
from omni.report.markdown import summary_markdown
from omni.report.summary import summarize_sweep
from omni.report.summary_json import as_json, write_outputs
from omni.run.validity import validity_rules
from omni.spec import Arm
from omni.store.retract import retract
from omni.store.writing import write_run
from tests.rows import store_sweep

T0 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "target, reason, superseded, message",
    [
        ("nope", "r", None, "is no run id, sweep id or run file"),
        ("sw1", " ", None, "needs a reason"),
        ("sw1", "r", "nothing-here", "is no run id"),
    ],
)
def test_bad_retractions_say_what_to_do(tmp_path, target, reason, superseded, message):
    store_sweep(tmp_path, "sw1", {"a": [1, 2, 3]})
    with pytest.raises(OmniError, match=message):
        retract(tmp_path, target, reason, superseded)
    assert not (tmp_path / "retractions").exists()


def test_calibration_measures_noise_and_drift_per_workload(tmp_path):
    # two sweeps of the same two workloads ("a" and its replica "b" are one
    # workload; "big" another); the second sweep sits 3 % higher
    store_sweep(
        tmp_path,
        "c1",
        {"a": [100, 102, 98, 101, 99], "b": [100, 101, 99, 103, 97], "big": [50, 50.5, 49.5]},
        extra={"big": {"params": {"mem_mb": 5}}},
    )
    store_sweep(
        tmp_path,
        "c2",
        {"a": [103, 105, 101, 104, 102], "b": [103, 104, 102, 106, 100], "big": [50, 50.5, 49.5]},
        extra={"big": {"params": {"mem_mb": 5}}},
    )
    record = json.loads(calibrate_from(tmp_path, ["c1", "c2"]).read_text())
    assert record["host"] == "fixture-host" and record["sweeps"] == ["c1", "c2"]
    by_arms = {tuple(w["arms"]): w for w in record["workloads"].values()}
    aa, big = by_arms[("a", "b")], by_arms[("big",)]
    logs = {
        k: np.log(v)
        for k, v in {
            "c1a": [100, 102, 98, 101, 99],
            "c1b": [100, 101, 99, 103, 97],
            "c2a": [103, 105, 101, 104, 102],
            "c2b": [103, 104, 102, 106, 100],
        }.items()
    }
    noise = math.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs.values()) / 16)
    assert aa["noise"]["decode_tok_s"] == pytest.approx(noise) and aa["runs"] == 20
    assert aa["noise_df"]["decode_tok_s"] == 16  # 4 samples of 5 runs: its weight as a prior
    means = [np.concatenate([logs["c1a"], logs["c1b"]]).mean(), np.concatenate([logs["c2a"], logs["c2b"]]).mean()]
    drift = math.sqrt(np.var(means, ddof=1) - noise**2 / 10)
    assert aa["drift"]["decode_tok_s"] == pytest.approx(drift) and 0.02 < drift < 0.025
    assert big["drift"]["decode_tok_s"] == 0.0  # it did not move: all its spread is run noise
    # a sweep of that workload says which calibration it used; compare adds the measured drift
    store_sweep(tmp_path, "s1", {"a": [100, 101, 99]}, name="x")
    store_sweep(
        tmp_path, "s2", {"a": [100, 101, 99], "other": [1, 2, 3]}, name="x", extra={"other": {"params": {"mem_mb": 9}}}
    )
    summary = summarize_sweep(tmp_path, "s2")
    assert summary.calibrations["a"].startswith("calibration ") and "c1, c2" in summary.calibrations["a"]
    assert summary.calibrations["other"] == "none"
    text = summary_markdown(summary)
    assert "- other: none applies" in text and "- a: calibration" in text
    # over 2 slots, every arm calibrated: the verdict scales each arm's calibrated noise by this sweep's
    store_sweep(tmp_path, "s3", {"a": [100, 101, 99], "b": [99, 101, 100]}, name="x", slots=2)
    judged = summarize_sweep(tmp_path, "s3").judged[("b", "decode_tok_s")].comparison
    assert judged.blocked and judged.calibrated and judged.df == pytest.approx(3)  # 6 runs - 2 arms - 1 slot
    store_sweep(tmp_path, "s4", {"a": [100, 101, 99], "other": [1, 2, 3]}, name="x", slots=2,
                extra={"other": {"params": {"mem_mb": 9}}})  # fmt: skip
    assert not summarize_sweep(tmp_path, "s4").judged[("other", "decode_tok_s")].comparison.calibrated
    # from 2 sweeps the drift has one degree of freedom: compare does not use it, and says why
    result = compare_sweeps(tmp_path, "s1", "s2")
    c = result.judged[("a", "decode_tok_s")].comparison
    source = result.drift_sources[("a", "decode_tok_s")]
    assert c.drift == 0.01 and c.drift_df == math.inf
    assert source.startswith("default: calibration") and "from 2 sweeps" in source and "--sweeps 3" in source
    # from 3 it does, with its 2 degrees of freedom
    store_sweep(tmp_path, "c3", {"a": [100, 102, 98, 101, 99], "b": [100, 101, 99, 103, 97]})
    record = json.loads(calibrate_from(tmp_path, ["c1", "c2", "c3"]).read_text())
    three = next(w for w in record["workloads"].values() if w["arms"] == ["a", "b"])
    result = compare_sweeps(tmp_path, "s1", "s2")
    c = result.judged[("a", "decode_tok_s")].comparison
    assert c.drift == pytest.approx(three["drift"]["decode_tok_s"]) and c.drift_df == 2
    assert result.drift_sources[("a", "decode_tok_s")].startswith("measured from 3 sweeps")
    assert c.verdict == "inconclusive"  # 2 % of drift: 3 passes cannot say "same within 5 %"
    with pytest.raises(OmniError, match="no ok runs|no rows"):
        calibrate_from(tmp_path, ["nope"])


def test_memory_compared_across_mmap_modes_is_refused(tmp_path):
    store_sweep(tmp_path, "sw", {"a": [1, 1, 1], "b": [1, 1, 1]})
    import pandas as pd

    from omni.report.verdicts import judge

    frame = pd.read_parquet(tmp_path / "runs")
    frame.loc[frame["arm"] == "b", "mmap"] = True
    judged = judge(frame, frame, "a", "b", "rss_anon_steady_mb", 0.002)
    assert judged.comparison is None and "mixed mmap" in judged.refused
    assert judge(frame, frame, "a", "b", "decode_tok_s", 0.3).comparison is not None


def test_load_time_of_an_arm_whose_runs_mixed_warm_and_cold_compiled_starts_is_refused(tmp_path):
    """vLLM's compiled mode: a run that loaded a warm AOT artifact and one that
    compiled measure the cache's history. Within one arm that is refused on
    load_s, named in the sweep's warnings; two arms each consistent (the AOT
    patch's very effect: loaded against recompiled) are compared."""
    store_sweep(tmp_path, "sw", {"a": [1, 1, 1], "b": [1, 1, 1]})
    from omni.report.verdicts import judge
    from omni.store.reading import load_runs

    frame = load_runs(tmp_path)
    frame["load_s"] = [30.0, 30.5, 29.8, 12.0, 31.0, 30.2]
    frame["compile_cache"] = ["recompiled"] * 3 + ["loaded", "compiled", "compiled"]
    judged = judge(frame, frame, "a", "b", "load_s", 0.05)
    assert judged.comparison is None and "b's runs started from different compile cache states" in judged.refused
    assert "1 loaded" in judged.refused and "2 compiled" in judged.refused
    assert judge(frame, frame, "a", "b", "decode_tok_s", 0.3).comparison is not None  # only load time is refused
    frame["compile_cache"], frame["load_s"] = ["recompiled"] * 3 + ["loaded"] * 3, [30.0, 30.5, 29.8, 12.0, 12.3, 11.9]
    assert judge(frame, frame, "a", "b", "load_s", 0.05).comparison.verdict == "better"
    frame["compile_cache"] = None  # eager, or rows before v8: nothing known, nothing refused
    assert judge(frame, frame, "a", "b", "load_s", 0.05).comparison is not None

    for i, state in enumerate(["compiled", "loaded", "loaded"]):
        write_run(
            tmp_path,
            {
                "run_id": f"mixed{i}",
                "sweep_id": "mixed",
                "sweep_name": "s",
                "status": "ok",
                "arm": "a",
                "pass_index": i,
                "order_index": i,
                "host": "fixture-host",
                "engine": "vllm",
                "arm_json": json.dumps({"name": "a"}),
                "load_s": 20.0 + i,
                "compile_cache": state,
                "started_at": T0,
                "finished_at": T0 + timedelta(seconds=1),
            },
        )
    warnings = summarize_sweep(tmp_path, "mixed").warnings
    assert any(w.startswith("mixed compile cache: a's runs started 2 loaded, 1 compiled") for w in warnings), warnings


def test_validity_rules_name_the_doubt():
    rules = dict(validity_rules(Arm(name="x", engine="vllm", model="m", prompt_len=1, kv_cache_bytes=1 << 21)))
    assert set(rules) == {"context_len_unset", "prompt_len_le_1"}
    assert "KV cache" in rules["context_len_unset"]
    assert validity_rules(Arm(name="x", engine="vllm", model="m", context_len=256, kv_cache_bytes=1 << 21)) == []
    assert validity_rules(Arm(name="x", engine="synthetic")) == []


def test_min_effect_from_the_spec_sets_the_margin_per_metric(tmp_path):
    """A 3 % slowdown with 0.5 % noise: worse; below a 5 % min_effect it is
    flagged as such, and a spec asking 2 % for decode_tok_s judges it in full."""
    store_sweep(
        tmp_path, "me", {"base": [100, 100.5, 99.5, 100.2, 99.8], "slow": [97, 97.5, 96.5, 97.2, 96.8]}, memory=100.0
    )
    default = summarize_sweep(tmp_path, "me")
    c = default.judged[("slow", "decode_tok_s")].comparison
    assert c.verdict == "worse" and c.below_min_effect and default.min_effects["decode_tok_s"] == (0.05, "default")
    assert default.min_effects["rss_anon_steady_mb"] == (0.01, "default")
    folder = tmp_path / "sweeps" / "me"
    folder.mkdir(parents=True)
    (folder / "spec.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "s",
                "baseline": "base",
                "min_effect": {"default": 0.1, "decode_tok_s": 0.02},
                "arms": [{"name": "base", "engine": "synthetic"}],
            }
        )
    )
    given = summarize_sweep(tmp_path, "me")
    assert given.min_effects["decode_tok_s"] == (0.02, "spec min_effect.decode_tok_s")
    c = given.judged[("slow", "decode_tok_s")].comparison
    assert c.verdict == "worse" and not c.below_min_effect
    assert given.min_effects["rss_anon_steady_mb"] == (0.1, "spec min_effect")
    assert given.judged[("slow", "rss_anon_steady_mb")].comparison.verdict == "equivalent"


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("min_effect", 1.5, "is not a relative effect"),
        ("min_effect", {"decode_tokens": 0.05}, "'decode_tokens' is no judged metric"),
        ("min_effect", {"run_id": 0.05}, "'run_id' is no judged metric"),
        ("min_effect", 0, "is not a relative effect"),
        ("primary_metrics", ["decode_tokens"], "'decode_tokens' is no judged metric"),
        ("primary_metrics", ["ttft_ms", "ttft_ms"], "named twice"),
        ("primary_metrics", [], ""),
    ],
)
def test_bad_min_effect_or_primary_metrics_are_a_spec_error(tmp_path, field, value, needle):
    from omni.errors import SpecError
    from omni.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", field: value, "arms": [{"name": "a", "engine": "synthetic"}]}))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert needle in str(info.value) and field in str(info.value)


def spec_copy(results: Path, sweep_id: str, arms: list[str], **fields) -> None:
    folder = results / "sweeps" / sweep_id
    folder.mkdir(parents=True)
    (folder / "spec.yaml").write_text(
        yaml.safe_dump({"name": "s", "passes": 5, **fields, "arms": [{"name": a, "engine": "synthetic"} for a in arms]})
    )


def test_a_control_that_differs_from_its_replica_flags_the_metric_untrustworthy(tmp_path):
    steady = [100, 100.5, 99.5, 100.2, 99.8]
    store_sweep(tmp_path, "ok", {"base": steady, "new": [90, 90.4, 89.6, 90.1, 89.9], "base.control": steady})
    spec_copy(tmp_path, "ok", ["base", "new"])
    calm = summarize_sweep(tmp_path, "ok")
    assert calm.control == "base.control" and calm.untrusted == {}
    assert calm.judged[("base.control", "decode_tok_s")].comparison.verdict == "equivalent"
    assert "no move of the host beyond x[" in summary_markdown(calm)
    # the host slowed down under the control's runs: A/A says 8 % worse
    store_sweep(
        tmp_path,
        "bad",
        {"base": steady, "new": [90, 90.4, 89.6, 90.1, 89.9], "base.control": [92, 92.3, 91.7, 92.1, 91.9]},
    )
    spec_copy(tmp_path, "bad", ["base", "new"])
    shaky = summarize_sweep(tmp_path, "bad")
    assert set(shaky.untrusted) == {"decode_tok_s"} and "not stable" in shaky.untrusted["decode_tok_s"]
    assert any(
        w.startswith("untrustworthy decode_tok_s: the A/A control base.control came out worse") for w in shaky.warnings
    )
    text = summary_markdown(shaky)
    assert "worse: x0.900" in text and "(untrustworthy: see the control)" in text and "differs on decode_tok_s" in text
    assert as_json(shaky)["untrusted"] == shaky.untrusted
    # without a control in the spec (control: false) nothing is judged as one
    store_sweep(tmp_path, "off", {"base": steady, "new": steady})
    spec_copy(tmp_path, "off", ["base", "new"], control=False)
    assert summarize_sweep(tmp_path, "off").control is None


# --- primary metrics, multiplicity, VOID arms, slots, warnings ---


def test_primary_metrics_lead_every_view_and_the_others_are_adjusted(tmp_path):
    from omni.report.markdown import verdicts_markdown

    store_sweep(tmp_path, "pm", {"base": [100, 101, 99, 100.5, 99.5], "new": [90, 91, 89, 90.5, 89.5]}, memory=100.0)
    spec_copy(tmp_path, "pm", ["base", "new"], primary_metrics=["rss_anon_steady_mb"], control=False)
    summary = summarize_sweep(tmp_path, "pm")
    assert summary.primary == ("rss_anon_steady_mb",) and summary.metrics[:2] == ("rss_anon_steady_mb", "decode_tok_s")
    # the one primary metric at 1 - 0.8 x 5 %, the one other at 1 - 0.2 x 5 %
    assert summary.adjustment.confidence == {
        "rss_anon_steady_mb": pytest.approx(0.96),
        "decode_tok_s": pytest.approx(0.99),
    }
    c = summary.judged[("new", "decode_tok_s")].comparison
    assert c.confidence == pytest.approx(0.99) and c.verdict == "worse"
    text = summary_markdown(summary)
    assert text.index("Primary metrics:") < text.index("| new | rss_anon_steady_mb |") < text.index("Other metrics")
    assert "at 99 %" in text and "Multiplicity: Bonferroni, weighted" in text
    shown = verdicts_markdown(summary)
    assert shown.index("Primary metrics:") < shown.index("Other metrics")
    assert as_json(summary)["primary_metrics"] == ["rss_anon_steady_mb"]
    # omni's default when the spec names none: decode rate, TTFT, steady RSS (those measured here)
    store_sweep(tmp_path, "dflt", {"base": [100, 101, 99], "new": [90, 91, 89]})
    assert summarize_sweep(tmp_path, "dflt").primary == ("decode_tok_s", "rss_anon_steady_mb")


def test_a_void_arm_is_marked_in_every_view_and_kept_out_of_every_verdict(tmp_path):
    from omni.measure.ops import HEAD_RULE
    from omni.report.across import comparison_markdown
    from omni.report.markdown import verdicts_markdown

    for sweep in ("v1", "v2"):
        store_sweep(tmp_path, sweep, {"base": [100, 101, 99], "int4": [150, 151, 149]})
        write_run(
            tmp_path,
            {
                "run_id": f"{sweep}-bad",
                "sweep_id": sweep,
                "sweep_name": "s",
                "status": "invalid",
                "error": f"{HEAD_RULE}: the arm claims a quantized output head but ran a dense one",
                "arm": "int4",
                "pass_index": 3,
                "order_index": 9,
                "host": "fixture-host",
                "engine": "synthetic",
                "arm_json": json.dumps({"name": "int4", "engine": "synthetic"}),
                "started_at": T0,
                "finished_at": T0,
            },
        )
    summary = summarize_sweep(tmp_path, "v2")
    assert set(summary.void) == {"int4"}
    judged = summary.judged[("int4", "decode_tok_s")]
    assert judged.comparison is None and judged.refused.startswith(f"VOID ({HEAD_RULE}): int4's runs are kept out")
    assert "| int4 (VOID) | decode_tok_s |" in summary_markdown(summary)
    assert "| int4 (VOID) | VOID (bf16 head) |" in verdicts_markdown(summary)
    assert "VOID `int4`: pass 3: bf16 head" in verdicts_markdown(summary)
    compared = compare_sweeps(tmp_path, "v1", "v2")
    assert compared.judged[("int4", "decode_tok_s")].refused.startswith("VOID") and "int4" in compared.void
    assert "| int4 (VOID) | decode_tok_s |" in comparison_markdown(compared)


def test_slot_is_a_blocking_factor_in_verdicts(tmp_path):
    """Slot 1 is 20 % slower for both arms, which alternate over the slots;
    the arm is 5 % faster within each slot: blocked, that is certain."""
    order = 0
    for arm, level in (("base", 100.0), ("new", 105.0)):
        for p, noise in enumerate((1.0, 1.002, 0.998, 1.001)):
            slot = (p + (arm == "new")) % 2
            write_run(
                tmp_path,
                {
                    "run_id": f"{arm}{p}",
                    "sweep_id": "sl",
                    "sweep_name": "s",
                    "status": "ok",
                    "arm": arm,
                    "pass_index": p,
                    "order_index": order,
                    "slot_index": slot,
                    "host": "fixture-host",
                    "engine": "synthetic",
                    "arm_json": json.dumps({"name": arm, "engine": "synthetic"}),
                    "decode_tok_s": level * noise * (0.8 if slot else 1.0),
                    "started_at": T0,
                    "finished_at": T0,
                },
            )
            order += 1
    c = summarize_sweep(tmp_path, "sl").judged[("new", "decode_tok_s")].comparison
    assert c.blocked and c.verdict == "better" and c.ratio == pytest.approx(1.05, rel=0.005)
    assert "arm + slot fitted in log space" in summary_markdown(summarize_sweep(tmp_path, "sl"))


def test_too_few_passes_is_one_line_and_warnings_of_one_rule_collapse(tmp_path):
    from omni.report.markdown import collapse_warnings

    store_sweep(tmp_path, "few", {"base": [100, 130, 80], "new": [90, 120, 70]}, memory=100.0)
    summary = summarize_sweep(tmp_path, "few")
    short = [w for w in summary.warnings if w.startswith("too_few_passes")]
    assert len(short) == 1 and short[0].startswith("too_few_passes: 1 metric(s) need more than the 3 ok run(s)")
    assert collapse_warnings(["void arm a: x", "void arm b: y", "mixed compile cache: z", "void arm a: x"]) == [
        "void arm a: x",
        "void arm b: y",
        "mixed compile cache: z",
    ]
    assert collapse_warnings(["too_few_passes: a", "r: 1", "r: 2", "r: 3"]) == ["too_few_passes: a", "r (3): 1; 2; 3"]


def _store_states(
    results: Path, sweep_id: str, arms: dict[str, list[float]], nivcsw: dict[str, list[int]], **columns
) -> None:
    """Rows with per-run telemetry: decode_tok_s, slot (every state on both), the
    EngineCore thread's involuntary switches where ``nivcsw`` gives them, and ``columns`` on every row."""
    order = 0
    for arm, values in arms.items():
        for p, value in enumerate(values):
            row = {
                "run_id": f"{sweep_id}-{arm}{p}",
                "sweep_id": sweep_id,
                "sweep_name": "s",
                "status": "ok",
                "arm": arm,
                "pass_index": p,
                "order_index": order,
                "slot_index": (0, 0, 1, 1, 0, 1)[p],
                "host": "fixture-host",
                "engine": "vllm",
                "arm_json": json.dumps({"name": arm, "engine": "vllm"}),
                "decode_tok_s": value,
                "rss_anon_steady_mb": 100.0,
                "cpu_freq_mhz": 2900.0 + p,
                "telemetry_window_s": 1.0,
                "started_at": T0,
                "finished_at": T0,
                **columns,
            }
            if arm in nivcsw:
                threads = [
                    {"name": "EngineCore", "cpu_s": 9.0, "nvcsw": 10, "nivcsw": nivcsw[arm][p], "migrations": 2},
                    {"name": "python", "cpu_s": 1.0, "nvcsw": 4, "nivcsw": 3, "migrations": 1},
                ]
                row["thread_sched"] = json.dumps(threads)
            write_run(results, row)
            order += 1


def test_a_bimodal_arm_is_found_explained_and_named_beside_its_verdict(tmp_path):
    """The arm's engine processes ran near 480 or near 1150 tok/s, the slow
    ones with 40x the EngineCore thread's involuntary switches; the
    baseline's runs agree. Then a bimodal baseline with no telemetry."""
    from omni.report.markdown import verdicts_markdown

    slow_fast = [480.0, 1150.0, 470.0, 1130.0, 495.0, 1160.0]
    steady = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]
    _store_states(tmp_path, "bi", {"base": steady, "new": slow_fast}, {"new": [4000, 90, 4100, 100, 3900, 110]})
    summary = summarize_sweep(tmp_path, "bi")
    modes = summary.modes[("new", "decode_tok_s")]
    assert modes.found and [c.count for c in modes.clusters] == [3, 3]
    assert modes.clusters[0].run_ids == ("bi-new0", "bi-new2", "bi-new4")
    assert not summary.modes[("base", "decode_tok_s")].found and list(summary.states) == [("new", "decode_tok_s")]
    assert not summary.modes[("new", "rss_anon_steady_mb")].found  # one memory figure: no states
    assert summary.judged[("new", "decode_tok_s")].bimodal == ("arm",)
    line = (
        "- `new` decode_tok_s: 2 states: 3 runs near 480, 3 near 1,150 tok/s; the slow runs had 40x the "
        "involuntary switches of the EngineCore thread (median 4000/s vs 100/s) (10 column(s) compared; at 3 v 3 "
        "runs an unrelated one separates completely 10% of the time)"
    )
    text = summary_markdown(summary)
    assert line in text and "(bimodal arm: see states) |" in text
    assert "| new | decode_tok_s | 6 |" in text and "| base | decode_tok_s | 6 |" in text
    assert line in verdicts_markdown(summary) and "(bimodal arm: see states)" in verdicts_markdown(summary)
    assert as_json(summary)["states"][0]["separators"][0]["column"] == "thread_sched"

    _store_states(tmp_path, "bb", {"base": slow_fast, "new": steady}, {})
    summary = summarize_sweep(tmp_path, "bb")
    assert summary.judged[("new", "decode_tok_s")].bimodal == ("baseline",)
    text = summary_markdown(summary)
    assert "| base | decode_tok_s | 6 |" in text and "| baseline (bimodal: see states) |" in text
    assert "(bimodal baseline: see states) |" in text
    assert (
        "- `base` decode_tok_s: 2 states: 3 runs near 480, 3 near 1,150 tok/s; nothing measured separates them ("
        in text
    )


def test_a_comparison_of_two_sweeps_says_which_sweep_ran_an_arm_in_two_states_or_swinging(tmp_path):
    """Across sweeps as within one: a verdict on an arm that ran in two
    states in one of the sweeps says so, and the states (and runs that
    differ beyond their iterations) of each sweep are listed with the sweep."""
    from omni.report.across import comparison_markdown

    steady = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]
    slow_fast = [480.0, 1150.0, 470.0, 1130.0, 495.0, 1160.0]
    _store_states(tmp_path, "b1", {"new": steady, "other": [1000.0, 1001.0, 640.0]}, {},
                  decode_tok_s_iter_sd_log=0.01, decode_tok_s_iter_ac1_log=-0.2, iterations=5)  # fmt: skip
    _store_states(tmp_path, "b2", {"new": slow_fast, "other": [1000.0, 1001.0, 999.0]}, {"new": [4000, 90] * 3})
    result = compare_sweeps(tmp_path, "b1", "b2")
    assert result.judged[("new", "decode_tok_s")].bimodal == ("after",)
    assert result.judged[("other", "decode_tok_s")].bimodal == ()
    assert list(result.states) == [("after", "new", "decode_tok_s")]
    assert list(result.swings) == [("before", "other", "decode_tok_s")]
    text = comparison_markdown(result)
    assert "(bimodal after: see states) |" in text
    assert "- `new` decode_tok_s (after, b2): 2 states: 3 runs near 480, 3 near 1,150 tok/s; the slow runs had" in text
    assert "- `other` decode_tok_s (before, b1): runs differ beyond their iterations (" in text
    assert "slow 1 run(s) near 640, fast 2 near 1,000 tok/s" in text


def test_a_nightly_change_made_by_one_disturbed_run_says_so(tmp_path):
    """A night whose five runs each held their iterations within 0.5 % but
    one ran 14 % slower than the others: the regression is flagged as
    every regression is, and named as a night whose runs were not steady;
    a night that moved as a whole is not."""
    from omni.history.compare import nightly_changes
    from omni.report.across import changes_markdown

    iterated = {"decode_tok_s_iter_sd_log": 0.005, "decode_tok_s_iter_ac1_log": -0.2, "iterations": 5}
    for night, center in enumerate([100, 101, 99, 100.5, 99.5]):
        store_sweep(tmp_path, f"n{night}", {"a": [center - 0.5, center, center + 0.5]}, name="nightly", day=night,
                    columns=iterated)  # fmt: skip
    store_sweep(tmp_path, "n5", {"a": [79.5, 80, 80.5]}, name="nightly", day=5, columns=iterated)
    store_sweep(tmp_path, "n6", {"a": [80, 80.5, 79.5, 80.2, 69]}, name="nightly", day=6, columns=iterated)
    nightly = nightly_changes(tmp_path, "nightly", window=5)
    flagged = {c.sweep_id: c for c in nightly.changes if c.metric == "decode_tok_s"}
    assert set(flagged) == {"n5", "n6"} and flagged["n5"].unsteady is None
    kind, swing, explained = flagged["n6"].unsteady
    assert kind == "swing" and [c.count for c in swing.clusters] == [1, 4]
    text = changes_markdown("nightly", nightly)
    assert "Changes whose own sweep's runs were not steady" in text
    assert "- `a` decode_tok_s in n6: runs differ beyond their iterations (" in text
    assert "slow 1 run(s) near 69, fast 4 near 80" in text


def test_a_verdict_across_hosts_says_on_which_host_a_side_ran_in_two_states():
    from types import SimpleNamespace

    from omni.report.summary import across_hosts
    from omni.report.verdicts import Judged
    from omni.stats.verdicts import Comparison

    def host(bimodal):
        worse = Comparison(6, 6, 0.8, 0.7, 0.9, 0.05, 0.1, 0.0, "worse")
        return SimpleNamespace(judged={("new", "decode_tok_s"): Judged(worse, bimodal=bimodal)}, untrusted={})

    judged = across_hosts(("new", "decode_tok_s"), {"h1": host(()), "h2": host(("arm", "baseline"))})
    assert judged.refused.startswith("worse on every host (h1 worse x0.800; h2 worse x0.800)")
    assert judged.bimodal == ("arm on h2", "baseline on h2")


def test_a_host_setting_that_changed_during_the_sweep_is_a_warning(tmp_path):
    """The governor went from powersave to performance after two runs: every
    later run is on another host, as far as the numbers go."""
    from tests.rows import T0

    for i, governor in enumerate(["powersave", "powersave", "performance", "performance"]):
        conditions = {"governor": governor, "thp_enabled": "madvise", "swap_used_mb": "0"}
        write_run(
            tmp_path,
            {
                "run_id": f"h{i}",
                "sweep_id": "hc",
                "sweep_name": "hc",
                "status": "ok",
                "arm": "ab"[i % 2],
                "pass_index": i // 2,
                "order_index": i,
                "host": "fixture-host",
                "engine": "synthetic",
                "arm_json": json.dumps({"name": "ab"[i % 2], "engine": "synthetic"}),
                "decode_tok_s": 100.0 + i,
                "host_conditions": json.dumps(conditions),
                "started_at": T0,
                "finished_at": T0,
            },
        )
    warnings = summarize_sweep(tmp_path, "hc").warnings
    assert [w for w in warnings if w.startswith("host conditions")] == [
        "host conditions: governor changed during the sweep: 'powersave' in 2 rows, 'performance' in 2 rows"
    ]


def test_two_wild_runs_a_side_summarize_to_an_unbounded_interval_and_strict_json(tmp_path):
    """2 runs a side, load times alike in one arm and 25x apart in the other (a
    first start and a resumed one): at a secondary metric's Bonferroni level
    Welch's t has one degree of freedom, t near 700, and the log interval
    passes the float range. The
    summary still forms, its Markdown reads ``>1000`` and its JSON (which has
    no Infinity) ``null``."""
    secondary = {"e2e_s": 2.0, "wall_s": 3.0, "ttft_ms": 30.0, "tpot_ms": 10.0, "itl_p50_ms": 9.0}
    secondary |= {"itl_p90_ms": 12.0, "itl_p99_ms": 20.0, "rss_anon_tree_mb": 500.0, "rss_anon_steady_mb": 490.0}
    secondary |= {"pss_anon_tree_mb": 480.0, "pss_anon_steady_mb": 470.0, "prefill_tok_s": 900.0}
    for order, (arm, p, load_s) in enumerate((("a", 0, 0.05), ("a", 1, 0.051), ("b", 0, 0.04), ("b", 1, 1.0))):
        write_run(
            tmp_path,
            {
                "run_id": f"{arm}{p}",
                "sweep_id": "wild",
                "sweep_name": "s",
                "status": "ok",
                "arm": arm,
                "pass_index": p,
                "order_index": order,
                "host": "fixture-host",
                "engine": "synthetic",
                "arm_json": json.dumps({"name": arm, "engine": "synthetic"}),
                "decode_tok_s": 100.0 + order,
                "load_s": load_s,
                **{m: v * (1 + 0.01 * order) for m, v in secondary.items()},
                "started_at": T0,
                "finished_at": T0,
            },
        )
    summary = summarize_sweep(tmp_path, "wild")
    c = summary.judged[("b", "load_s")].comparison
    assert c.verdict == "inconclusive" and c.ci_high == math.inf, c
    assert ">1000]" in summary_markdown(summary)
    page = html_report(summary)
    assert 'id="forest-b-load_s-beyond"' in page  # the interval drawn to the shown range, arrows beyond
    embedded = html.unescape(page.split('<script type="application/json" id="summary">')[1].split("</script>")[0])
    assert json.loads(embedded, parse_constant=lambda name: pytest.fail(name))["sweep_id"] == "wild"
    paths = write_outputs(tmp_path, summary, page)
    record = json.loads(Path(paths["json"]).read_text(), parse_constant=lambda name: pytest.fail(name))
    (judged,) = [j for j in record["against_baseline"] if j["arm"] == "b" and j["metric"] == "load_s"]
    assert judged["ci_high"] is None and judged["ratio"] == pytest.approx(c.ratio)


def test_identical_memory_values_never_give_an_interval_of_width_zero():
    """Two identical RssAnon values a side, through the judge a summary uses:
    one page of spread a run, so the interval has width and says the values
    were identical; one page more is no longer 'worse [1.0000, 1.0000]' but
    equivalent within min_effect."""
    import pandas as pd

    from omni.report.verdicts import judge

    def frame(a, b):
        n = len(a) + len(b)
        return pd.DataFrame(
            {"arm": ["a"] * len(a) + ["b"] * len(b), "rss_anon_steady_mb": a + b, "warning_rules": [[]] * n}
        )

    same = judge(frame([512.0, 512.0], [512.0, 512.0]), frame([512.0, 512.0], [512.0, 512.0]), "a", "b",
                 "rss_anon_steady_mb", 0.01, confidence=0.9867).comparison  # fmt: skip
    assert same.ci_high > same.ci_low and same.identical == 4 and same.floor == pytest.approx(4096 / 2**29)
    page = 4096 / 2**20
    apart = frame([512.0, 512.0], [512.0 + page, 512.0 + page])
    assert judge(apart, apart, "a", "b", "rss_anon_steady_mb", 0.01, confidence=0.9867).comparison.verdict == (
        "equivalent"
    )
