"""Summaries as the CLI gives them: retraction by path, nightly regressions, compare and calibrate
over synthetic sweeps, and the HTML report rendered in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from PIL import Image

from omni.history.compare import compare_sweeps, nightly_changes, sweep_history
from omni.report.across import comparison_markdown
from omni.report.html import html_report
from omni.report.markdown import VERDICT_COLORS, summary_markdown
from omni.report.summary import summarize_sweep
from omni.store.reading import load_runs
from tests.conftest import omni
from tests.rows import store_sweep

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_a_file_can_be_retracted_by_path_and_the_cli_says_so(tmp_path):
    ids = store_sweep(tmp_path, "sw1", {"a": [1, 2, 3]})
    file = tmp_path / "runs" / "sweep=sw1" / f"{ids[0]}.parquet"
    done = omni("retract", str(file), "--reason", "bad", "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"retracted file runs/sweep=sw1/{ids[0]}.parquet (1 run(s)): bad" in done.stdout
    again = omni("retract", ids[0], "--reason", "bad", "--results", str(tmp_path))
    assert again.returncode == 0 and "is retracted already (bad): nothing recorded" in again.stdout
    shown = omni("provenance", ids[0], "--results", str(tmp_path))
    assert shown.returncode == 0 and "RETRACTED: bad" in shown.stdout and "fixture-host" in shown.stdout


def test_nightly_regression_is_flagged_with_run_ids_on_both_sides(tmp_path):
    history = [100, 101, 99, 100.5, 99.5]
    for night, center in enumerate(history):
        store_sweep(tmp_path, f"n{night}", {"a": [center - 1, center, center + 1]}, name="nightly", day=night)
    bad = store_sweep(tmp_path, "n5", {"a": [79, 80, 81]}, name="nightly", day=5)
    good = store_sweep(tmp_path, "n6", {"a": [129, 130, 131]}, name="nightly", day=6)
    small = store_sweep(tmp_path, "n7", {"a": [98, 98.5, 99]}, name="nightly", day=7)  # 2 %: below min_effect
    nightly = nightly_changes(tmp_path, "nightly", window=5)
    changes, order = nightly.changes, nightly.order
    assert order == [f"n{i}" for i in range(8)]
    flagged = {(c.sweep_id, c.metric): c for c in changes}
    assert set(flagged) == {("n5", "decode_tok_s"), ("n6", "decode_tok_s")}, set(flagged)
    regression, improvement = flagged[("n5", "decode_tok_s")], flagged[("n6", "decode_tok_s")]
    assert regression.kind == "regression" and regression.ratio == pytest.approx(0.8, rel=0.01)
    assert regression.ci_high < 0.95 and regression.drift == 0.01 and regression.drift_source.startswith("default")
    assert set(regression.run_ids) == set(bad) and len(regression.history_run_ids) == 15
    assert improvement.kind == "improvement" and set(improvement.run_ids) == set(good)
    assert "n5" in improvement.history_sweeps  # the bad night stays in the window: no hiding
    assert not set(small) & {r for c in changes for r in c.run_ids}
    done = omni("regressions", "nightly", "--results", str(tmp_path), "--window", "5")
    assert (
        done.returncode == 0 and "regression" in done.stdout and bad[0] in done.stdout
    )  # the newest (n7) did not regress


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed: scripts/bootstrap.sh installs Debian's chromium"
    return path


def test_html_report_renders_in_headless_chromium(tmp_path):
    for night in range(4):
        store_sweep(
            tmp_path, f"n{night}", {"base": [100 + night, 101, 99], "slow": [80, 82, 78]}, name="nightly", day=night
        )
    summary = summarize_sweep(tmp_path, "n3")
    page = tmp_path / "report.html"
    page.write_text(html_report(summary, sweep_history(tmp_path, summary)))
    text = page.read_text()
    external = re.findall(r'(?:src|href)="(?!#)[^"]*"', text) + re.findall(r"url\((?!#)", text)
    assert not external, external[:5]  # self-contained: nothing fetched, links only inside the page
    dom = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'profile-dom'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    # the named parts, as the browser built them
    for element in (
        '<nav id="contents">',
        '<div id="forest"><svg',
        '<table id="results">',
        '<section id="trends">',
        '<table id="provenance-table">',
        'href="#results-table"',
    ):
        assert element in dom, element
    for metric in summary.metrics:
        assert f'id="metric-{metric}"' in dom and f'href="#metric-{metric}"' in dom, metric
    assert dom.count("<tr>") >= 1 + len(summary.arms) * len(summary.metrics)
    assert "decode_tok_s (tok/s)" in dom and "rss_anon_steady_mb (MiB)" in dom  # axes carry units
    assert "fixture-host" in dom  # provenance block
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--hide-scrollbars",
            "--window-size=900,1400",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), done.stderr[-2000:]
    gray = Image.open(shot).convert("L")
    histogram = gray.histogram()  # 256 bins of gray levels
    dark = sum(histogram[:200]) / sum(histogram)
    assert 0.01 < dark < 0.6, f"{dark:.3%} of the screenshot is ink: blank or broken"
    # every forest row of a primary metric is drawn in its verdict's color: 'slow' is worse, in red;
    # the other metrics' forest sits below, folded
    forest = dom.split('<div id="forest">', 1)[1].split("</div>", 1)[0]
    drawn = dict(re.findall(r'<g id="forest-([^"]+)">\s*<path [^>]*?stroke: (#[0-9a-f]{6})', forest))
    judged = {
        f"{arm}-{metric}": j.comparison.verdict
        for (arm, metric), j in summary.judged.items()
        if j.comparison and j.comparison.ci_low and metric in summary.primary
    }
    others = set(summary.metrics) - set(summary.primary)
    assert summary.primary and ('<details id="forest-others">' in dom) == bool(others)
    assert drawn == {row: VERDICT_COLORS[verdict] for row, verdict in judged.items()}
    assert drawn["slow-decode_tok_s"] == VERDICT_COLORS["worse"] == "#cf222e"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compare_names_the_arm_made_slower_and_no_other(tmp_path):
    """With no calibration: two sweeps of arms/smoke-synthetic.yaml at 5
    passes, the second with arm large 20 % slower (each decode step waits 5 ms
    instead of 4). A rule that pooled the noise of both sweeps' arms called
    it "within noise: x0.802 [0.503, 1.278]".

    The sweeps run as the flow runs them (prepare, then every item on its
    slot, manifest and spec copy written), without Prefect: two ephemeral
    servers and their summaries cost more than the 30 runs; omni sweep
    itself is test_cli's."""
    from omni.sweep.execute import run_sweep_items
    from omni.sweep.prepare import prepare_sweep
    from omni.sweep.request import SweepRequest

    results = tmp_path / "results"
    spec = yaml.safe_load(Path("arms/smoke-synthetic.yaml").read_text())
    spec["passes"] = 5
    ids = []
    for name, step_ms in (("before", 4), ("after", 5)):
        spec["arms"][1]["params"]["step_sleep_ms"] = step_ms
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        # --force: a busy CI host must not refuse
        prepared = prepare_sweep(SweepRequest(spec=path, results=results, force=True))
        rows = run_sweep_items(prepared)
        assert len(rows) == 15 and all(row["status"] == "ok" for row in rows), [row.get("error") for row in rows]
        ids.append(prepared.sweep_id)
    assert not (results / "calibrations").exists()
    result = compare_sweeps(results, *ids)
    shown = comparison_markdown(result)
    large, small = (result.judged[(arm, "decode_tok_s")].comparison for arm in ("large", "small"))
    print("\n".join(line for line in shown.splitlines() if "decode_tok_s" in line))
    assert large.verdict == "worse" and not large.below_min_effect, shown
    # the slowdown as this host ran it: each step of large sleeps 1 ms more on top of the step the first
    # sweep measured (sleep overshoot and loop overhead grow on a loaded host), and small, unchanged,
    # shows how that overhead drifted between the sweeps
    tpot = load_runs(results).groupby(["sweep_id", "arm"])["tpot_ms"].median()
    before, after = ids
    drift_ms = tpot[(after, "small")] - tpot[(before, "small")]
    expected = tpot[(before, "large")] / (tpot[(before, "large")] + 1.0 + drift_ms)
    assert abs(large.ratio - expected) <= max(0.03, large.ci_high - large.ci_low), (large.ratio, expected, shown)
    assert small.verdict not in ("better", "worse") or small.below_min_effect, shown
    for metric in ("rss_anon_steady_mb", "pss_anon_steady_mb"):
        for arm in ("small", "large"):
            c = result.judged[(arm, metric)].comparison
            assert c.verdict == "equivalent" or c.below_min_effect, (metric, arm, shown)
    assert "params.step_sleep_ms 4.0 -> 5.0" in result.config_changes["large"]
    assert "between-sweep drift" in shown and "1.00% (default (no calibration measured it))" in shown
    # the live A/A control of each sweep (small.control, 5 passes): this host behaved
    for sweep_id in ids:
        summary = summarize_sweep(results, sweep_id)
        assert summary.control == "small.control"
        control = summary.judged[("small.control", "decode_tok_s")].comparison
        assert control.verdict in ("equivalent", "inconclusive") or control.below_min_effect, summary_markdown(summary)
        assert "decode_tok_s" not in summary.untrusted
    shown = omni("compare", *ids, "--results", str(results))
    assert shown.returncode == 0 and "| large | decode_tok_s |" in shown.stdout and "worse" in shown.stdout


def test_metric_option_focuses_summary_and_compare(tmp_path):
    store_sweep(tmp_path, "m1", {"base": [100, 101, 99], "slow": [80, 81, 79]})
    store_sweep(tmp_path, "m2", {"base": [100, 101, 99], "slow": [70, 71, 69]})
    done = omni("summary", "m1", "--results", str(tmp_path), "--metric", "decode_tok_s")
    assert done.returncode == 0, done.stderr
    assert "| slow | decode_tok_s |" in done.stdout and "rss_anon_steady_mb" not in done.stdout
    assert "rss_anon_steady_mb" in (tmp_path / "summaries" / "m1.md").read_text()  # the files stay whole
    done = omni("compare", "m1", "m2", "--results", str(tmp_path), "--metric", "rss_anon_steady_mb")
    assert done.returncode == 0 and "| slow | rss_anon_steady_mb |" in done.stdout and "decode_tok_s" not in done.stdout
    for bad, why in (("decode_tokens", "is not a judged metric"), ("ttft_ms", "has no values in these runs")):
        done = omni("compare", "m1", "m2", "--results", str(tmp_path), "--metric", bad)
        assert done.returncode == 2 and f"--metric {bad} {why}; choose from decode_tok_s" in done.stderr, done.stderr


def test_compare_and_regressions_across_hardware_refuse_unless_asked(tmp_path):
    """Two sweeps whose rows name different CPUs and slot widths: no verdict,
    the difference named at the top and in each refusal, exit 0 as for every
    refused verdict; --across-hardware judges them and still names it. The
    nightly history skips the other host's sweeps likewise."""
    intel, amd = "Intel Xeon Platinum 8480+", "AMD EPYC 9B45"
    diff = f"cpu_model {intel!r} -> {amd!r}; cores per slot 2 -> 4"
    nights = [("h0", intel, 2, 100), ("h1", intel, 2, 101), ("h2", intel, 2, 99), ("h3", amd, 4, 80)]
    for day, (sweep, cpu, cores, center) in enumerate(nights):
        columns = {"cpu_model": cpu, "cpus": list(range(cores)), "engine_version": "synthetic-1"}
        store_sweep(tmp_path, sweep, {"a": [center - 1, center, center + 1]}, name="hw", day=day, columns=columns)
    done = omni("compare", "h2", "h3", "--results", str(tmp_path), "--metric", "decode_tok_s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2] == (
        f"**No verdict** for every arm: the sweeps ran on different hardware: {diff}. Compare sweeps of the "
        "same hardware, or pass --across-hardware to judge them anyway."
    ), done.stdout
    assert f"| a | decode_tok_s | - | - | refused: the sweeps ran on different hardware: {diff} (" in done.stdout
    assert "worse" not in done.stdout
    done = omni("compare", "h2", "h3", "--results", str(tmp_path), "--metric", "decode_tok_s", "--across-hardware")
    assert done.returncode == 0, done.stderr
    assert f"**Judged across hardware** (--across-hardware), every arm: {diff}." in done.stdout, done.stdout
    assert "| a | decode_tok_s | 3 | 3 | worse: x0.808" in done.stdout, done.stdout
    done = omni("regressions", "hw", "--results", str(tmp_path), "--min-history", "2")
    assert done.returncode == 0, done.stdout  # the newest is not judged against the other host's nights
    assert f"- `a` in h3: 3 earlier sweep(s) skipped as history, they ran on different hardware: {diff}" in done.stdout
    done = omni("regressions", "hw", "--results", str(tmp_path), "--min-history", "2", "--across-hardware")
    assert done.returncode == 1 and "| h3 | a | decode_tok_s | regression |" in done.stdout, done.stdout
    assert f"- `a` in h3: judged against 3 earlier sweep(s) that ran on different hardware: {diff}" in done.stdout


def test_summary_against_another_arm_judges_every_arm_against_it_and_writes_nothing(tmp_path):
    # arms of two workloads in one sweep: the second's pair is judged against its own reference
    store_sweep(tmp_path, "w1", {"base": [100, 101, 99], "big": [50, 51, 49], "big-fast": [75, 76, 74]})
    done = omni("summary", "w1", "--results", str(tmp_path), "--against", "big", "--metric", "decode_tok_s")
    assert done.returncode == 0, done.stderr
    assert "baseline arm `big`" in done.stdout, done.stdout
    fast = next(line for line in done.stdout.splitlines() if line.startswith("| big-fast | decode_tok_s |"))
    assert "better: x1.50" in fast, fast
    assert not (tmp_path / "summaries" / "w1.md").exists()  # the sweep's own summary stays the baseline's
    done = omni("summary", "w1", "--results", str(tmp_path), "--against", "nobody")
    assert done.returncode == 2 and "--against nobody: no arm of sweep w1" in done.stderr, done.stderr
    assert "its arms: base, big, big-fast" in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_nightly_that_regressed_ends_failed_naming_arm_metric_ratio_and_runs(tmp_path):
    """Three earlier nights at 1000 tok/s, then a real sweep of the same spec
    name whose arm decodes at most 50 tok/s (a 20 ms wait per step): the flow,
    as the nightly deployment runs it (fail_on_regression), ends Failed."""
    import subprocess
    import sys

    for night in range(3):
        store_sweep(tmp_path, f"n{night}", {"a": [1000.0, 1001.0, 999.0]}, name="nightly-t", day=night)
    spec = tmp_path / "nightly-t.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "nightly-t",
                "passes": 3,
                "busy_threshold_pct": 100,
                "arms": [
                    {
                        "name": "a",
                        "engine": "synthetic",
                        "max_tokens": 4,
                        "params": {"step_sleep_ms": 20, "work_per_token": 100},
                    }
                ],
            }
        )
    )
    script = (
        "import sys\nfrom flows.sweep import sweep\n"
        "state = sweep(spec=sys.argv[1], results=sys.argv[2], force=True, fail_on_regression=True, return_state=True)\n"
        "print('STATE', state.type.value)\nprint(state.message)\n"
    )
    env = {**__import__("os").environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(spec), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert "STATE FAILED" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    assert "regression(s) against the earlier sweeps of this spec" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("- a decode_tok_s: x0.0"))
    assert "runs " in line and "history runs " in line and "did not end ok" not in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_omni_calibrate_runs_two_sweeps_and_summaries_name_it(tmp_path):
    results = tmp_path / "results"
    done = omni(
        "calibrate",
        "arms/calibrate-synthetic.yaml",
        "--sweeps",
        "2",
        "--passes",
        "3",
        "--results",
        str(results),
        "--force",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = (results / "calibrations").glob("*/*.json")
    record = json.loads(path.read_text())
    (entry,) = record["workloads"].values()  # arms a and b: one workload
    assert entry["arms"] == ["a", "b"] and entry["runs"] == 12 and len(record["sweeps"]) == 2
    assert entry["noise"]["decode_tok_s"] > 0 and entry["drift"]["decode_tok_s"] >= 0
    assert "noise" in done.stdout and "drift" in done.stdout and str(path) in done.stdout
    summary = summarize_sweep(results, record["sweeps"][0])
    assert summary.calibrations == {"a": f"calibration {path.name} (sweeps {', '.join(record['sweeps'])})"} | {
        "b": summary.calibrations["a"]
    }
    again = omni("calibrate", "--from", record["sweeps"][1], "--results", str(results))
    assert again.returncode == 0 and "(1 sweep)" in again.stdout, again.stdout + again.stderr[-2000:]
