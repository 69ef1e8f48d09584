"""Summaries as text: Markdown (CLI, Prefect artifacts, results/summaries/)
and JSON, and the verdict wording and colours the HTML report
(:mod:`omni.report_html`) shares with them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from omni import units
from omni.compare import Change, SweepComparison
from omni.objstore import ResultsPath, results_root
from omni.summary import Judged, SweepSummary, untrusted

VERDICT_COLORS = {"better": "#1a7f37", "worse": "#cf222e", "equivalent": "#57606a", "inconclusive": "#bf8700"}


def format_number(value: float | None) -> str:
    """Four significant digits, never in scientific notation (omni.units); ``-`` for a missing value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return units.number(value)


def verdict_text(judged: Judged) -> str:
    """A verdict as one line: the verdict, ratio and interval, or why there is none."""
    if judged.refused:
        return judged.refused
    c = judged.comparison
    if c is None or c.ratio is None:
        return "inconclusive (no values)"
    if c.ci_low is None:
        return f"inconclusive: x{c.ratio:.3f}, fewer than 2 runs on a side"
    text = f"{c.verdict}: x{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]"
    if c.below_min_effect:
        text += f", below min_effect {c.min_effect:.0%}"
    if c.passes_needed:
        text += f", needs {c.passes_needed} passes"
    return text


def summary_markdown(summary: SweepSummary) -> str:
    lines = [f"# sweep {summary.sweep_id}", ""]
    lines.append(
        f"spec `{summary.sweep_name}`, baseline arm `{summary.baseline}`; {summary.excluded} retracted run(s) left out."
    )
    if summary.profiled:
        lines[-1] += (
            f" {summary.profiled} profiled run(s) kept out of the verdicts "
            f"(the profiler distorts timing): `omni ops {summary.sweep_id}` reads them."
        )
    for arm in summary.arms:
        lines.append(f"- `{arm}`: {summary.ok[arm]} ok of {summary.runs[arm]} run(s)")
    lines += [
        "",
        "| arm | metric | n | median | MAD | CV | 95% CI of median | min | max | vs baseline |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in summary.arms:
        for metric in summary.metrics:
            cell = summary.cells[(arm, metric)]
            ci = f"[{format_number(cell.ci_low)}, {format_number(cell.ci_high)}]" if cell.ci_low is not None else "-"
            cv = f"{cell.cv:.1%}" if cell.cv is not None else "-"
            verdict = "baseline" if arm == summary.baseline else verdict_text(summary.judged[(arm, metric)])
            if arm not in (summary.baseline, summary.control) and untrusted(summary, arm, metric):
                verdict += " (untrustworthy: see the control)"
            if arm in summary.void:
                verdict = f"VOID ({summary.void[arm].split(':')[1].strip()}): {verdict}"
            outliers = f" ({len(cell.outliers)} outlier(s))" if cell.outliers else ""
            lines.append(
                f"| {arm} | {metric} | {cell.n}{outliers} | {format_number(cell.median)} | {format_number(cell.mad)} | {cv} "
                f"| {ci} | {format_number(cell.min)} | {format_number(cell.max)} | {verdict} |"
            )
    if summary.control and not summary.hosts:  # a replicated sweep's control is judged per host, below
        judged = [
            summary.judged[(summary.control, m)] for m in summary.metrics if (summary.control, m) in summary.judged
        ]
        counts = {v: sum(1 for j in judged if j.comparison and j.comparison.verdict == v) for v in VERDICT_COLORS}
        lines += [
            "",
            f"Live A/A control `{summary.control}` (a replica of `{summary.baseline}`, interleaved): "
            + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
            + (f"; differs on {', '.join(summary.untrusted)}" if summary.untrusted else "; this host behaved"),
        ]
    if summary.hosts:
        lines += [
            "",
            f"Replicated on {len(summary.hosts)} hosts: the table pools their runs; each arm is judged "
            "against the baseline within each host (host as a blocking factor), and `vs baseline` says "
            "whether the effect holds on every host. Per host:",
        ]
        for host, part in summary.hosts.items():
            lines += [
                "",
                f"## host {host}",
                "",
                *[f"- `{a}`: {part.ok[a]} ok of {part.runs[a]} run(s)" for a in part.arms],
                "",
                verdicts_markdown(part, summary.metrics).rstrip(),
            ]
    lines += ["", "Provenance:"] + provenance_lines(summary.provenance)
    used = {}
    for arm, source in summary.calibrations.items():
        used.setdefault(source, []).append(arm)
    lines += ["", "Calibration (noise and between-sweep drift of each arm's workload, omni calibrate):"]
    lines += [f"- {', '.join(arms)}: {'none applies' if src == 'none' else src}" for src, arms in used.items()]
    lines += ["", "Smallest effect that matters (min_effect; equivalent = the interval inside +-min_effect):"]
    lines += [f"- {m}: {e:.1%} ({src})" for m, (e, src) in summary.min_effects.items()]
    lines += [
        "",
        "Verdicts: Welch t interval of the ratio of geometric means on log run values, noise from "
        "these runs (interleaved passes: drift cancels within the sweep).",
    ]
    extra = sorted({w for j in summary.judged.values() for w in j.warnings})
    if summary.warnings or extra:
        lines += ["", "Warnings:"] + [f"- {w}" for w in (*summary.warnings, *extra)]
    return "\n".join(lines) + "\n"


HEADLINE_METRICS = ("ttft_ms", "prefill_tok_s", "decode_tok_s", "tpot_ms", "itl_p99_ms", "rss_anon_steady_mb")


def verdicts_markdown(summary: SweepSummary, metrics: tuple[str, ...] = HEADLINE_METRICS) -> str:
    """What to read first after a sweep: each arm against the baseline on the
    headline metrics (every metric: omni summary), and the live control."""
    shown = [m for m in metrics if m in summary.metrics] or list(summary.metrics)
    hosts = f" on {', '.join(summary.hosts)}, within each host" if summary.hosts else ""
    lines = [
        f"against the baseline `{summary.baseline}`{hosts} (every metric: omni summary {summary.sweep_id}):",
        "",
        "| arm | " + " | ".join(shown) + " |",
        "|---|" + "---|" * len(shown),
    ]
    for arm in summary.arms:
        if arm == summary.baseline:
            continue
        cells = [
            verdict_text(summary.judged[(arm, m)]) + (" (untrustworthy)" if untrusted(summary, arm, m) else "")
            for m in shown
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    if summary.untrusted:
        lines += ["", *[f"untrustworthy {m}: {why}" for m, why in summary.untrusted.items()]]
    return "\n".join(lines) + "\n"


def provenance_lines(provenance: dict) -> list[str]:
    """One line for the sweep-wide facts, one per arm; lists are values that differed."""

    def show(facts: dict) -> str:
        return ", ".join(
            f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in facts.items() if v is not None
        )

    lines = [f"- sweep: {show(provenance.get('sweep', {}))}"]
    lines += [f"- `{arm}`: {show(facts)}" for arm, facts in provenance.get("arms", {}).items()]
    return lines


def comparison_markdown(result: SweepComparison) -> str:
    lines = [f"# {result.after} against {result.before}", "", f"{result.excluded} retracted run(s) left out.", ""]
    for arm, change in result.config_changes.items():
        lines.append(f"- `{arm}` changed: {change}")
    lines += ["", "| arm | metric | n before | n after | verdict |", "|---|---|---|---|---|"]
    for (arm, metric), judged in result.judged.items():
        c = judged.comparison
        n_before, n_after = (c.n_base, c.n_other) if c else ("-", "-")
        lines.append(f"| {arm} | {metric} | {n_before} | {n_after} | {verdict_text(judged)} |")
    drifts = sorted(
        {
            (j.comparison.drift, result.drift_sources.get(key, "default"))
            for key, j in result.judged.items()
            if j.comparison
        }
    )
    lines += [
        "",
        "Two sweeps: each interval includes a between-sweep drift, which interleaving cannot cancel "
        "across sweeps: " + "; ".join(f"{d:.2%} ({src})" for d, src in drifts) + ".",
    ]
    extra = sorted({w for j in result.judged.values() for w in j.warnings})
    if extra:
        lines += ["", "Warnings:"] + [f"- {w}" for w in extra]
    return "\n".join(lines) + "\n"


def changes_markdown(sweep_name: str, changes: list[Change], sweeps: list[str]) -> str:
    lines = [f"# nightly changes of `{sweep_name}` over {len(sweeps)} sweep(s)", ""]
    if not changes:
        return "\n".join(lines + ["No regression or improvement beyond min_effect."]) + "\n"
    lines += [
        "| sweep | arm | metric | kind | ratio to history [95 % CI] | drift | runs | history runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in changes:
        lines.append(
            f"| {c.sweep_id} | {c.arm} | {c.metric} | {c.kind} | x{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}] "
            f"| {c.drift:.2%} ({c.drift_source}) | {', '.join(c.run_ids)} | {', '.join(c.history_run_ids)} |"
        )
    lines += [
        "",
        "Rule: each sweep's runs against the runs of the sweeps before it (Welch t on log run values, "
        "the between-sweep drift added); a change is better/worse with its interval reaching past min_effect.",
    ]
    return "\n".join(lines) + "\n"


# --- JSON ---


def as_json(summary: SweepSummary) -> dict:
    """A JSON-ready form of a summary (results/summaries/<sweep>.json)."""
    return {
        "sweep_id": summary.sweep_id,
        "sweep_name": summary.sweep_name,
        "baseline": summary.baseline,
        "excluded_retracted": summary.excluded,
        "profiled_runs": summary.profiled,
        "void": summary.void,
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
    }


def write_outputs(results: str | Path | ResultsPath, summary: SweepSummary, page: str) -> dict[str, ResultsPath]:
    """results/summaries/<sweep>.{md,json,html}: derived views, regenerated on
    demand; ``page`` is the HTML report (:func:`omni.report_html.html_report`)."""
    folder = results_root(results) / "summaries"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "md": folder / f"{summary.sweep_id}.md",
        "json": folder / f"{summary.sweep_id}.json",
        "html": folder / f"{summary.sweep_id}.html",
    }
    paths["md"].write_text(summary_markdown(summary))
    paths["json"].write_text(json.dumps(as_json(summary), indent=1, default=str) + "\n")
    paths["html"].write_text(page)
    return paths
