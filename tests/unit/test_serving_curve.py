"""The HTML report's serving curve (omni.report.serving_curve, drawn by
omni.report.html.curve_svg), tested on the data it is drawn from: closed-
and open-loop levels apart, latency at each arm's SLO percentile with its
95 % upper bound, flagged levels left out or marked, and a note naming them."""

from __future__ import annotations

import json
from statistics import median

import pytest

from omni.report.html import curve_svg
from omni.report.serving_curve import curve_note, curve_series
from omni.serving.levels import Level, level_record, request_records
from omni.serving.summary import serving_summary
from omni.store import reading, writing
from tests.unit.test_load_levels import detailed, fifo

SWEEP = "s-curve"
SLOS = {
    "p90": {"ttft_ms": 100.0, "tpot_ms": 100.0, "percentile": 90},
    "p99": {"ttft_ms": 100.0, "tpot_ms": 100.0, "percentile": 99},
}
CLIENT = {"client_cpu_pct": 20.0, "client_thread_pct": 30.0}
BUSY = {"client_cpu_pct": 20.0, "client_thread_pct": 97.0}  # the load generator timed itself: flagged


def level_data(level: Level, pass_index: int) -> dict:
    """32 requests in the steady window (34 sent: the first and last are out):
    closed loop one after another, open loop sent at the level's rate; r=8
    to a server that completes a quarter of it (saturated)."""
    gap = 0.5 if level.kind == "concurrency" else 1 / level.value
    ttft = (0.02 * level.value if level.kind == "concurrency" else 0.03) * (1 + 0.05 * pass_index)
    if level.value == 8 and level.kind == "rate":
        return fifo(n=34, gap=gap, service=4 * gap)
    return detailed(n=34, ttft=ttft, gap=gap)


@pytest.fixture
def serving(tmp_path):
    """Arms p90 and p99 (their SLO's percentile), two runs each at c=1, c=4,
    r=2 and r=8; p90's second run at c=4 had a busy load generator."""
    levels = [Level("concurrency", 1), Level("concurrency", 4), Level("rate", 2), Level("rate", 8)]
    for arm, slo in SLOS.items():
        for pass_index in range(2):
            records = []
            for order, level in enumerate(levels):
                data = level_data(level, pass_index)
                client = BUSY if (arm, pass_index, level.key) == ("p90", 1, "c=4") else CLIENT
                record = level_record(level, order, data, request_records(level, data), slo, client)
                records.append({**record, "server_metrics": "{}"})
            row = {
                "run_id": f"{arm}-{pass_index}",
                "sweep_id": SWEEP,
                "status": "ok",
                "arm": arm,
                "pass_index": pass_index,
                "engine": "vllm",
                "load_levels": len(records),
                "slo": json.dumps(slo),
            }
            writing.write_side_table(tmp_path, "levels", row, records)
            writing.write_run(tmp_path, row)
    return serving_summary(tmp_path, SWEEP, reading.load_runs(tmp_path, SWEEP), "p90")


def by(series, **match):
    return {(s.arm, s.kind, s.figure): s for s in series if all(getattr(s, k) == v for k, v in match.items())}


def test_closed_and_open_loop_levels_are_separate_series_never_one_line(serving):
    series = curve_series(serving)
    for s in series:
        prefix = "c=" if s.kind == "concurrency" else "r="
        assert all(p.level.startswith(prefix) for p in s.points), s
        assert [p.load for p in s.points] == sorted(p.load for p in s.points)
    mine = by(series, arm="p90")
    assert [p.level for p in mine[("p90", "concurrency", "ttft")].points] == ["c=1", "c=4"]
    assert [p.level for p in mine[("p90", "rate", "ttft")].points] == ["r=2"]  # r=8 saturated: not drawn
    assert {(kind, figure) for _, kind, figure in mine} == {
        (kind, figure) for kind in ("concurrency", "rate") for figure in ("ttft", "tpot", "output_tok_s")
    }


def test_the_latency_drawn_is_at_each_arms_slo_percentile_with_its_upper_bound(serving):
    series = curve_series(serving)
    p90, p99 = by(series, arm="p90"), by(series, arm="p99")
    assert p90[("p90", "concurrency", "ttft")].column == "ttft_p90_ms"
    assert p90[("p90", "rate", "tpot")].column == "tpot_p90_ms" and p90[("p90", "rate", "tpot")].percentile == 90
    assert p99[("p99", "concurrency", "ttft")].column == "ttft_p99_ms"
    assert (
        p90[("p90", "concurrency", "ttft")].limit == 100.0 and p90[("p90", "concurrency", "output_tok_s")].limit is None
    )
    # the median over runs of the stored p90, the runs' range around it
    c1 = p90[("p90", "concurrency", "ttft")].points[0]
    runs = serving.points[("p90", "c=1")]["ttft_p90_ms"]
    assert (c1.runs, c1.median, c1.low, c1.high) == (2, median(runs), min(runs), max(runs))
    # 32 requests bound p90 at 95 % (29 do), not p99 (299 do): a bound for one arm, none for the other
    assert c1.upper95 == median(serving.points[("p90", "c=1")]["ttft_p90_upper95_ms"]) >= c1.median
    assert all(p.upper95 is None for p in p99[("p99", "concurrency", "ttft")].points)
    assert all(p.upper95 is None for p in p90[("p90", "concurrency", "output_tok_s")].points)


def test_a_flagged_level_is_left_out_or_marked_and_the_note_says_which(serving):
    c4 = by(curve_series(serving), arm="p90")[("p90", "concurrency", "ttft")].points[1]
    assert c4.level == "c=4" and c4.partial and c4.runs == 1  # over its one judged run, hollow
    assert curve_note(serving) == (
        "Not drawn (no run judged): p90 r=8 (2 run(s) saturated); p99 r=8 (2 run(s) saturated). "
        "Over the judged runs only (hollow marker): p90 c=4 (1 run(s) client_bound)."
    )


def test_the_svg_draws_each_series_apart_with_its_axes_in_units(serving):
    svg = curve_svg(serving)
    for arm in SLOS:
        for kind in ("concurrency", "rate"):
            assert f'id="curve-{arm}-{kind}-ttft"' in svg and f'id="curve-{arm}-{kind}-tpot"' in svg
    assert 'id="curve-p90-concurrency-ttft-upper95"' in svg and "curve-p99-concurrency-ttft-upper95" not in svg
    assert 'id="slo-ttft-concurrency' in svg and 'id="slo-tpot-rate' in svg
    for label in ("requests in flight (closed loop)", "requests/s offered (open loop)", "output (tok/s)"):
        assert label in svg
    # two arms at two percentiles share a panel: the axis says so, the legend which is which
    assert "p90/p99 TTFT (ms)" in svg and "p90/p99 TPOT (ms)" in svg
    assert "p90 (SLO at p90)" in svg and "p99 (SLO at p99)" in svg


def test_the_report_section_draws_the_curve_and_names_the_levels_it_leaves_out(serving):
    from types import SimpleNamespace

    from omni.report.html import serving_section

    page = "".join(serving_section(SimpleNamespace(serving=serving)))
    assert 'id="curve-p90-rate-ttft"' in page and "closed-loop levels (requests in flight)" in page
    assert '<p id="curve-note">Not drawn (no run judged): p90 r=8 (2 run(s) saturated)' in page
