"""A summary as JSON (results/summaries/<sweep>.json, and embedded in the
HTML report) and the files ``omni summary`` writes. The JSON file also
carries the sweep's own rows, so a published summary alone can be reproduced
(``omni reproduce FILE.json``)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from omni.report.markdown import summary_markdown, swing_text
from omni.report.summary import SweepSummary
from omni.store.objstore import ResultsPath, results_root


def finite(value):
    """``value`` with every NaN or infinite float as None: JSON has neither
    (Python would write ``NaN`` / ``Infinity``, which strict parsers refuse).
    A ``ci_high`` of null is an interval with no upper bound, a NaN a value
    not measured."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def as_json(summary: SweepSummary) -> dict:
    """A JSON-ready form of a summary (results/summaries/<sweep>.json, and
    embedded in the HTML report): strict JSON, no NaN or Infinity (:func:`finite`)."""
    record = {
        "sweep_id": summary.sweep_id,
        "sweep_name": summary.sweep_name,
        "baseline": summary.baseline,
        "excluded_retracted": summary.excluded,
        "profiled_runs": summary.profiled,
        "void": summary.void,
        "primary_metrics": list(summary.primary),
        "multiplicity": summary.adjustment.describe() if summary.adjustment else None,
        "interval_levels": dict(summary.adjustment.confidence) if summary.adjustment else {},
        "warnings": list(summary.warnings),
        "floors": {m: {"floor": f, "source": s} for m, (f, s) in summary.floors.items()},
        "min_effects": {m: {"min_effect": e, "source": s} for m, (e, s) in summary.min_effects.items()},
        "control": summary.control,
        "untrusted": summary.untrusted,
        "calibrations": summary.calibrations,
        "provenance": summary.provenance,
        "arms": {
            arm: {
                "runs": summary.runs[arm],
                "ok": summary.ok[arm],
                "metrics": {m: asdict(summary.cells[(arm, m)]) for m in summary.metrics},
            }
            for arm in summary.arms
        },
        "against_baseline": [
            {
                "arm": arm,
                "metric": m,
                "refused": j.refused,
                "warnings": list(j.warnings),
                **(asdict(j.comparison) if j.comparison else {}),
            }
            for (arm, m), j in summary.judged.items()
        ],
        "hosts": {host: as_json(part) for host, part in summary.hosts.items()},
        "roofs": {arm: asdict(r) for arm, r in summary.roofs.items()},
        "states": [states_json(summary, arm, m) for arm, m in summary.states],
        "swings": [
            {"arm": arm, "metric": m, "text": swing_text(summary, arm, m), "p": summary.swings[(arm, m)][0].p}
            for arm, m in summary.swings
        ],
    }
    return finite(record)


def states_json(summary: SweepSummary, arm: str, metric: str) -> dict:
    """One bimodal arm and metric: its states, the test and what separates them."""
    modes, explained = summary.modes[(arm, metric)], summary.states[(arm, metric)]
    return {
        "arm": arm,
        "metric": metric,
        "clusters": [asdict(c) for c in modes.clusters],
        "statistic": modes.statistic,
        "critical": modes.critical,
        "swing": modes.swing,
        "explanation": explained.text,
        "separators": [
            {"column": s.column, "key": s.key, "text": s.text, "ratio": s.ratio, "chance": s.chance}
            for s in explained.separators
        ],
    }


def carried_rows(results: str | Path | ResultsPath, sweep_id: str) -> dict:
    """What lets the summary JSON alone be reproduced (``omni reproduce
    FILE.json``): every stored row of the sweep, retracted ones too, embedded
    as a results file's bytes (:func:`omni.store.writing.rows_as_text`), and
    the retractions that cover them."""
    from omni.store.reading import read_table
    from omni.store.retract import covering
    from omni.store.writing import rows_as_text

    table = read_table(results, sweep_id)
    retractions = covering(results, table.column("run_id").to_pylist())
    return {"rows_parquet_base64": rows_as_text(table), "retractions": retractions}


def write_outputs(results: str | Path | ResultsPath, summary: SweepSummary, page: str) -> dict[str, ResultsPath]:
    """results/summaries/<sweep>.{md,json,html}: derived views, regenerated on
    demand; ``page`` is the HTML report (:func:`omni.report.html.html_report`)."""
    folder = results_root(results) / "summaries"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "md": folder / f"{summary.sweep_id}.md",
        "json": folder / f"{summary.sweep_id}.json",
        "html": folder / f"{summary.sweep_id}.html",
    }
    paths["md"].write_text(summary_markdown(summary))
    record = {**as_json(summary), **carried_rows(results, summary.sweep_id)}
    paths["json"].write_text(json.dumps(record, indent=1, default=str, allow_nan=False) + "\n")
    paths["html"].write_text(page)
    return paths
