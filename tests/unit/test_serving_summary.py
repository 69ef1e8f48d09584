"""The serving part of a sweep's summary (omni.serving.summary) from stored
levels: each level's SLO over its runs, met only on a bound its requests
give, and said to be not established where they are too few."""

from __future__ import annotations

import json

import pytest

from omni.serving.levels import Level, level_record, request_records
from omni.serving.slo import run_capacity
from omni.serving.summary import LevelSlo, serving_summary
from omni.store import layout, reading, writing

SLO = {"ttft_ms": 100.0, "tpot_ms": 100.0, "percentile": 99}
SWEEP = "s-serve"
CLIENT = {"client_cpu_pct": 20.0, "client_thread_pct": 30.0}  # a load generator that kept up


def detailed(n: int, ttft_s: float) -> dict:
    """``n`` requests one after another, each its first token at ``ttft_s``
    (the last but one 20 % slower: the last is out of the steady window)
    and 15 more 10 ms apart."""
    ttfts = [ttft_s] * (n - 2) + [ttft_s * 1.2, ttft_s]
    return {
        "duration": 0.5 * n,
        "errors": [""] * n,
        "ttfts": ttfts,
        "latencies": [t + 0.15 for t in ttfts],
        "output_lens": [16] * n,
        "input_lens": [128] * n,
        "itls": [[0.01] * 15] * n,
        "start_times": [100.0 + 0.5 * i for i in range(n)],
        "queue_times": [0.0] * n,
        "max_concurrent_requests": 1,
    }


def store_serving_sweep(results, arms: dict[str, int]) -> None:
    """Two runs per arm (``requests`` per level): c=1 with 50 ms first
    tokens, c=4 with 90 ms ones, the slowest 108 ms (over the SLO's 100);
    the second run's 4 % slower."""
    for arm, requests in arms.items():
        for pass_index in range(2):
            run_id = f"{arm}-{pass_index}"
            records = []
            for order, (value, ttft_s) in enumerate([(1, 0.05), (4, 0.09)]):
                level = Level("concurrency", value)
                data = detailed(requests + 2, ttft_s * (1 + 0.04 * pass_index))  # the first and last out of the window
                record = level_record(level, order, data, request_records(level, data), SLO, CLIENT)
                records.append({**record, "server_metrics": "{}"})
            capacity = run_capacity(records, "concurrency", SLO)
            row = {
                "run_id": run_id,
                "sweep_id": SWEEP,
                "status": "ok",
                "arm": arm,
                "pass_index": pass_index,
                "engine": "vllm",
                "load_levels": len(records),
                "capacity_concurrency": capacity.value,
                "capacity_bounds": json.dumps({"concurrency": capacity.bound} if capacity.bound else {}),
                "slo": json.dumps(SLO),
            }
            writing.write_side_table(results, "levels", row, records)
            writing.write_run(results, row)


@pytest.fixture
def serving(tmp_path):
    store_serving_sweep(tmp_path, {"few": 32, "many": 299})
    ok = reading.load_runs(tmp_path, SWEEP)
    return serving_summary(tmp_path, SWEEP, ok, "few")


def test_a_level_of_too_few_requests_is_not_established_and_says_what_they_bound(serving):
    assert serving.level_slo[("few", "c=1")] == LevelSlo(("not_established",) * 2, 32, 99)
    assert serving.level_slo[("few", "c=1")].describe() == (
        "not established 2/2: 32 requests bound only p91 at 95 % (p99 needs 299)"
    )
    assert serving.slo_reach("few") == "SLO not established: 32 requests bound only p91 at 95 % (p99 needs 299)"
    # the point p99 of c=1 is well within the SLO: no capacity is claimed from it
    assert (
        serving.bounds[("few", "concurrency")] == ["not_established"] * 2
        and serving.capacity[("few", "concurrency")].n == 0
    )


def test_a_levels_row_says_its_requests_are_too_few_to_bound_its_slos_percentile(serving, tmp_path):
    """Beside ``not_established``, the stored row holds the highest percentile
    its requests bound (``slo_reach``): 32 bound p91.06, below the SLO's p99,
    so too few requests are why; 299 bound p99.003."""
    levels = reading.load_side_table(tmp_path, "levels", SWEEP)
    few, many = levels[levels["arm"] == "few"], levels[levels["arm"] == "many"]
    assert set(few.loc[few["level"] == "c=1", "slo_verdict"]) == {"not_established"}
    assert few["slo_reach"].tolist() == pytest.approx([100 * 0.05 ** (1 / 32)] * 4)  # 91.06
    assert many["slo_reach"].tolist() == pytest.approx([100 * 0.05 ** (1 / 299)] * 4)  # 99.003
    assert (few["slo_reach"] < 99).all() and (many["slo_reach"] >= 99).all()


def test_a_level_of_enough_requests_meets_its_slo_on_the_bound(serving):
    assert serving.level_slo[("many", "c=1")].describe() == "met 2/2"
    # c=4: the point p99 (90 ms) within the SLO, the bound (the slowest, 108 ms) over it
    assert serving.level_slo[("many", "c=4")].describe() == "not established 2/2: a 95 % upper bound over its limit"
    assert serving.slo_reach("many") is None
    capacity = serving.capacity[("many", "concurrency")]
    assert capacity.n == 2 and 1 < capacity.median < 4  # where the bound crosses 100 ms


def test_a_level_stored_before_the_bounds_is_never_read_as_met(tmp_path):
    store_serving_sweep(tmp_path, {"few": 32})
    path = layout.side_path(tmp_path, "levels", SWEEP, "few-0")
    table = reading.read_parquet(path)
    old = table.drop_columns(["slo_verdict", "ttft_samples", "tpot_samples"])
    old = old.set_column(old.schema.get_field_index("requests"), "requests", [[32, 32]])  # all measured then
    old = old.set_column(old.schema.get_field_index("slo_met"), "slo_met", [[True, True]])
    path.unlink()
    writing.write_once(path, old)
    serving = serving_summary(tmp_path, SWEEP, reading.load_runs(tmp_path, SWEEP), None)
    assert serving.level_slo[("few", "c=1")].verdicts == ("not_established",) * 2
    assert serving.level_slo[("few", "c=1")].requests == 32  # its requests less the failed ones


def test_the_printed_summary_says_what_each_levels_requests_bound(serving):
    from omni.report.markdown import serving_markdown

    text = "\n".join(serving_markdown(serving))
    assert "| not established 2/2: 32 requests bound only p91 at 95 % (p99 needs 299) | baseline |" in text
    assert "| met 2/2 |" in text and "p99: each run's interpolated 99th percentile" in text
    assert "2 run(s) not established (too few requests a level to bound the SLO's percentile at 95 %)" in text
    assert "; SLO not established: 32 requests bound only p91 at 95 % (p99 needs 299)" in text
