"""Summaries as text: Markdown (CLI, Prefect artifacts, results/summaries/)
and a self-contained HTML report per sweep with inline SVG plots:
per-arm distributions with intervals, a ratio forest plot against the
baseline, and nightly trends with noise bands. No JavaScript, no external
files: the report is one file that opens anywhere.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from dataclasses import asdict

from omni.summary import Change, Judged, SweepComparison, SweepSummary

VERDICT_COLORS = {"better": "#1a7f37", "worse": "#cf222e", "equivalent": "#57606a", "inconclusive": "#bf8700"}


def _num(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4g}"


def _verdict_text(judged: Judged) -> str:
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
    lines.append(f"spec `{summary.sweep_name}`, baseline arm `{summary.baseline}`; "
                 f"{summary.excluded} retracted run(s) left out.")  # fmt: skip
    for arm in summary.arms:
        lines.append(f"- `{arm}`: {summary.ok[arm]} ok of {summary.runs[arm]} run(s)")
    lines += ["", "| arm | metric | n | median | MAD | CV | 95% CI of median | min | max | vs baseline |",
              "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm in summary.arms:
        for metric in summary.metrics:
            cell = summary.cells[(arm, metric)]
            ci = f"[{_num(cell.ci_low)}, {_num(cell.ci_high)}]" if cell.ci_low is not None else "-"
            cv = f"{cell.cv:.1%}" if cell.cv is not None else "-"
            verdict = "baseline" if arm == summary.baseline else _verdict_text(summary.judged[(arm, metric)])
            if metric in summary.untrusted and arm not in (summary.baseline, summary.control):
                verdict += " (untrustworthy: see the control)"
            outliers = f" ({len(cell.outliers)} outlier(s))" if cell.outliers else ""
            lines.append(f"| {arm} | {metric} | {cell.n}{outliers} | {_num(cell.median)} | {_num(cell.mad)} | {cv} "
                         f"| {ci} | {_num(cell.min)} | {_num(cell.max)} | {verdict} |")  # fmt: skip
    if summary.control:
        judged = [summary.judged[(summary.control, m)] for m in summary.metrics if (summary.control, m) in summary.judged]
        counts = {v: sum(1 for j in judged if j.comparison and j.comparison.verdict == v) for v in VERDICT_COLORS}
        lines += ["", f"Live A/A control `{summary.control}` (a replica of `{summary.baseline}`, interleaved): "
                  + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
                  + (f"; differs on {', '.join(summary.untrusted)}" if summary.untrusted else "; this host behaved")]
    lines += ["", "Provenance:"] + provenance_lines(summary.provenance)
    used = {}
    for arm, source in summary.calibrations.items():
        used.setdefault(source, []).append(arm)
    lines += ["", "Calibration (noise and between-sweep drift of each arm's workload, omni calibrate):"]
    lines += [f"- {', '.join(arms)}: {'none applies' if src == 'none' else src}" for src, arms in used.items()]
    lines += ["", "Smallest effect that matters (min_effect; equivalent = the interval inside +-min_effect):"]
    lines += [f"- {m}: {e:.1%} ({src})" for m, (e, src) in summary.min_effects.items()]
    lines += ["", "Verdicts: Welch t interval of the ratio of geometric means on log run values, noise from "
              "these runs (interleaved passes: drift cancels within the sweep)."]  # fmt: skip
    extra = sorted({w for j in summary.judged.values() for w in j.warnings})
    if summary.warnings or extra:
        lines += ["", "Warnings:"] + [f"- {w}" for w in (*summary.warnings, *extra)]
    return "\n".join(lines) + "\n"


HEADLINE_METRICS = ("ttft_ms", "prefill_tok_s", "decode_tok_s", "tpot_ms", "itl_p99_ms", "rss_anon_steady_mb")


def verdicts_markdown(summary: SweepSummary, metrics: tuple[str, ...] = HEADLINE_METRICS) -> str:
    """What to read first after a sweep: each arm against the baseline on the
    headline metrics (every metric: omni summary), and the live control."""
    shown = [m for m in metrics if m in summary.metrics] or list(summary.metrics)
    lines = [f"against the baseline `{summary.baseline}` (every metric: omni summary {summary.sweep_id}):", "",
             "| arm | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]  # fmt: skip
    for arm in summary.arms:
        if arm == summary.baseline:
            continue
        cells = [_verdict_text(summary.judged[(arm, m)]) + (" (untrustworthy)" if m in summary.untrusted else "")
                 for m in shown]  # fmt: skip
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    if summary.untrusted:
        lines += ["", *[f"untrustworthy {m}: {why}" for m, why in summary.untrusted.items()]]
    return "\n".join(lines) + "\n"


def provenance_lines(provenance: dict) -> list[str]:
    """One line for the sweep-wide facts, one per arm; lists are values that differed."""
    def show(facts: dict) -> str:
        return ", ".join(f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in facts.items()
                         if v is not None)  # fmt: skip

    lines = [f"- sweep: {show(provenance.get('sweep', {}))}"]
    lines += [f"- `{arm}`: {show(facts)}" for arm, facts in provenance.get("arms", {}).items()]
    return lines


def comparison_markdown(result: SweepComparison) -> str:
    lines = [f"# {result.after} against {result.before}", "",
             f"{result.excluded} retracted run(s) left out.", ""]  # fmt: skip
    for arm, change in result.config_changes.items():
        lines.append(f"- `{arm}` changed: {change}")
    lines += ["", "| arm | metric | n before | n after | verdict |", "|---|---|---|---|---|"]
    for (arm, metric), judged in result.judged.items():
        c = judged.comparison
        n_before, n_after = (c.n_base, c.n_other) if c else ("-", "-")
        lines.append(f"| {arm} | {metric} | {n_before} | {n_after} | {_verdict_text(judged)} |")
    drifts = sorted({(j.comparison.drift, result.drift_sources.get(key, "default"))
                     for key, j in result.judged.items() if j.comparison})  # fmt: skip
    lines += ["", "Two sweeps: each interval includes a between-sweep drift, which interleaving cannot cancel "
              "across sweeps: " + "; ".join(f"{d:.2%} ({src})" for d, src in drifts) + "."]  # fmt: skip
    extra = sorted({w for j in result.judged.values() for w in j.warnings})
    if extra:
        lines += ["", "Warnings:"] + [f"- {w}" for w in extra]
    return "\n".join(lines) + "\n"


def changes_markdown(sweep_name: str, changes: list[Change], sweeps: list[str]) -> str:
    lines = [f"# nightly changes of `{sweep_name}` over {len(sweeps)} sweep(s)", ""]
    if not changes:
        return "\n".join(lines + ["No regression or improvement beyond min_effect."]) + "\n"
    lines += ["| sweep | arm | metric | kind | ratio to history [95 % CI] | drift | runs | history runs |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in changes:
        lines.append(f"| {c.sweep_id} | {c.arm} | {c.metric} | {c.kind} | x{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}] "
                     f"| {c.drift:.2%} ({c.drift_source}) | {', '.join(c.run_ids)} | {', '.join(c.history_run_ids)} |")  # fmt: skip
    lines += ["", "Rule: each sweep's runs against the runs of the sweeps before it (Welch t on log run values, "
              "the between-sweep drift added); a change is better/worse with its interval reaching past min_effect."]
    return "\n".join(lines) + "\n"


# --- JSON ---


def as_json(summary: SweepSummary) -> dict:
    """A JSON-ready form of a summary (results/summaries/<sweep>.json)."""
    return {
        "sweep_id": summary.sweep_id, "sweep_name": summary.sweep_name, "baseline": summary.baseline,
        "excluded_retracted": summary.excluded, "warnings": list(summary.warnings),
        "floors": {m: {"floor": f, "source": s} for m, (f, s) in summary.floors.items()},
        "min_effects": {m: {"min_effect": e, "source": s} for m, (e, s) in summary.min_effects.items()},
        "control": summary.control, "untrusted": summary.untrusted, "calibrations": summary.calibrations,
        "provenance": summary.provenance,
        "arms": {arm: {"runs": summary.runs[arm], "ok": summary.ok[arm],
                       "metrics": {m: asdict(summary.cells[(arm, m)]) for m in summary.metrics}}
                 for arm in summary.arms},
        "against_baseline": [
            {"arm": arm, "metric": m, "refused": j.refused, "warnings": list(j.warnings),
             **(asdict(j.comparison) if j.comparison else {})}
            for (arm, m), j in summary.judged.items()
        ],
    }  # fmt: skip


# --- HTML with inline SVG ---

W, ROW_H, LEFT, RIGHT = 760, 26, 190, 30


def _scale(lo: float, hi: float, x0: float, x1: float):
    if hi <= lo:
        lo, hi = lo - 1, hi + 1
    pad = (hi - lo) * 0.06
    lo, hi = lo - pad, hi + pad
    return lambda v: x0 + (v - lo) / (hi - lo) * (x1 - x0), lo, hi


def _axis(scale, lo: float, hi: float, y: float, label=lambda v: f"{v:.4g}") -> str:
    ticks = []
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        x = scale(v)
        ticks.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#888"/>'
                     f'<text x="{x:.1f}" y="{y + 16}" font-size="10" text-anchor="middle">{label(v)}</text>')  # fmt: skip
    return f'<line x1="{LEFT}" y1="{y}" x2="{W - RIGHT}" y2="{y}" stroke="#888"/>' + "".join(ticks)


def distribution_svg(summary: SweepSummary, metric: str) -> str:
    """Each arm's runs as dots, its median as a bar, the median's 95 % interval as a whisker."""
    arms = summary.arms
    values = [v for a in arms for v in summary.values[(a, metric)]]
    if not values:
        return ""
    scale, lo, hi = _scale(min(values), max(values), LEFT, W - RIGHT)
    h = ROW_H * len(arms) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" role="img" aria-label="{metric} per arm">']
    for i, arm in enumerate(arms):
        y = ROW_H * i + ROW_H / 2
        cell = summary.cells[(arm, metric)]
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4}" font-size="12" text-anchor="end">{html.escape(arm)}</text>')
        if cell.ci_low is not None:
            parts.append(f'<line x1="{scale(cell.ci_low):.1f}" y1="{y}" x2="{scale(cell.ci_high):.1f}" y2="{y}" '
                         'stroke="#0969da" stroke-width="3" opacity="0.5"/>')  # fmt: skip
        for j, v in enumerate(summary.values[(arm, metric)]):
            jitter = ((j * 7) % 9 - 4) * 1.2
            parts.append(f'<circle cx="{scale(v):.1f}" cy="{y + jitter:.1f}" r="3" fill="#24292f" opacity="0.7"/>')
        if cell.median is not None:
            x = scale(cell.median)
            parts.append(f'<line x1="{x:.1f}" y1="{y - 9}" x2="{x:.1f}" y2="{y + 9}" stroke="#0969da" stroke-width="2"/>')
    parts.append(_axis(scale, lo, hi, ROW_H * len(arms) + 6))
    return "".join(parts) + "</svg>"


def forest_svg(rows: list[tuple[str, Judged]], title: str) -> str:
    """Ratio to the baseline with its interval per (arm, metric), on a log
    axis (x2 and x0.5 equally far from 1); the shaded band is +-min_effect:
    an interval wholly inside it is "equivalent"."""
    shown = [(label, j.comparison) for label, j in rows if j.comparison and j.comparison.ci_low]
    if not shown:
        return ""
    log = math.log
    band = lambda c: (-log(1 + c.min_effect), log(1 + c.min_effect))  # noqa: E731
    lows = [log(c.ci_low) for _, c in shown] + [band(c)[0] for _, c in shown]
    highs = [log(c.ci_high) for _, c in shown] + [band(c)[1] for _, c in shown]
    scale, lo, hi = _scale(min(lows), max(highs), LEFT, W - RIGHT)
    h = ROW_H * len(shown) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" role="img" aria-label="{html.escape(title)}">']
    for i, (label, c) in enumerate(shown):
        y = ROW_H * i + ROW_H / 2
        color = VERDICT_COLORS[c.verdict]
        x0, x1 = (scale(v) for v in band(c))
        parts.append(f'<rect x="{x0:.1f}" y="{y - ROW_H / 2 + 2}" width="{x1 - x0:.1f}" height="{ROW_H - 4}" fill="#d0d7de" opacity="0.5"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{y + 4}" font-size="11" text-anchor="end">{html.escape(label)}</text>')
        parts.append(f'<line x1="{scale(log(c.ci_low)):.1f}" y1="{y}" x2="{scale(log(c.ci_high)):.1f}" y2="{y}" stroke="{color}" stroke-width="2"/>')
        parts.append(f'<rect x="{scale(log(c.ratio)) - 4:.1f}" y="{y - 4}" width="8" height="8" fill="{color}">'
                     f'<title>{html.escape(label)}: x{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}] {c.verdict}</title></rect>')  # fmt: skip
    one = scale(0.0)
    parts.append(f'<line x1="{one:.1f}" y1="0" x2="{one:.1f}" y2="{ROW_H * len(shown)}" stroke="#24292f" stroke-dasharray="3,3"/>')
    parts.append(_axis(scale, lo, hi, ROW_H * len(shown) + 6, label=lambda v: f"x{math.exp(v):.3g}"))
    return "".join(parts) + "</svg>"


def trend_svg(points: list[tuple[str, float, float]], changes: set[str], title: str) -> str:
    """Per-sweep medians of one arm and metric, with a band of +-floor around each."""
    if len(points) < 2:
        return ""
    h, top, bottom = 170, 10, 140
    ys = [m * (1 + s * f) for _, m, f in points for s in (-1, 1)]
    yscale, ylo, yhi = _scale(min(ys), max(ys), bottom, top)
    xs = [LEFT + (W - RIGHT - LEFT) * i / (len(points) - 1) for i in range(len(points))]
    upper = " ".join(f"{x:.1f},{yscale(m * (1 + f)):.1f}" for x, (_, m, f) in zip(xs, points))
    lower = " ".join(f"{x:.1f},{yscale(m * (1 - f)):.1f}" for x, (_, m, f) in reversed(list(zip(xs, points))))
    line = " ".join(f"{x:.1f},{yscale(m):.1f}" for x, (_, m, _f) in zip(xs, points))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{LEFT - 8}" y="{top + 10}" font-size="11" text-anchor="end">{html.escape(title)}</text>',
             f'<polygon points="{upper} {lower}" fill="#d0d7de" opacity="0.6"/>',
             f'<polyline points="{line}" fill="none" stroke="#0969da" stroke-width="2"/>']  # fmt: skip
    for x, (sweep, m, _f) in zip(xs, points):
        color = "#cf222e" if sweep in changes else "#0969da"
        parts.append(f'<circle cx="{x:.1f}" cy="{yscale(m):.1f}" r="4" fill="{color}"><title>{html.escape(sweep)}: {m:.4g}</title></circle>')
    for i, v in enumerate((ylo, (ylo + yhi) / 2, yhi)):
        parts.append(f'<text x="{LEFT + 4}" y="{yscale(v):.1f}" font-size="9" fill="#57606a">{v:.4g}</text>')
    return "".join(parts) + "</svg>"


def html_report(summary: SweepSummary, history: dict | None = None) -> str:
    """``history``: {"points": {(arm, metric): [(sweep, median, floor)]}, "changes": [Change]}."""
    md_rows = summary_markdown(summary)
    body = [f"<h1>sweep {html.escape(summary.sweep_id)}</h1>",
            f"<p>spec <code>{html.escape(summary.sweep_name)}</code>, baseline arm <code>{html.escape(str(summary.baseline))}</code>, "
            f"{summary.excluded} retracted run(s) left out.</p>"]  # fmt: skip
    if summary.warnings:
        body.append("<ul class=warn>" + "".join(f"<li>{html.escape(w)}</li>" for w in summary.warnings) + "</ul>")
    rows = [(f"{arm} {metric}", j) for (arm, metric), j in summary.judged.items()]
    if rows:
        body += ["<h2>Against the baseline</h2>",
                 "<p>Ratio of geometric means (arm / baseline) with its 95 % interval, log axis; grey band: +-min_effect. "
                 + " ".join(f'<span style="color:{c}">&#9632; {v}</span>' for v, c in VERDICT_COLORS.items()) + "</p>",
                 forest_svg(rows, "ratio to baseline")]  # fmt: skip
    body.append("<h2>Per-arm distributions</h2>")
    for metric in summary.metrics:
        effect, source = summary.min_effects[metric]
        body += [f"<h3>{html.escape(metric)} <small>(min_effect {effect:.1%}, {html.escape(source)})</small></h3>",
                 distribution_svg(summary, metric)]  # fmt: skip
    if history and history.get("points"):
        flagged = {(c.arm, c.metric): set() for c in history["changes"]}
        for c in history["changes"]:
            flagged[(c.arm, c.metric)].add(c.sweep_id)
        body.append("<h2>Nightly trend</h2><p>Per-sweep medians of this spec; band: +-noise floor; red: flagged change.</p>")
        for (arm, metric), points in sorted(history["points"].items()):
            body.append(trend_svg(points, flagged.get((arm, metric), set()), f"{arm} {metric}"))
    body += ["<h2>Table</h2>", f"<pre>{html.escape(md_rows)}</pre>",
             f'<script type="application/json" id="summary">{html.escape(json.dumps(as_json(summary), default=str))}</script>']  # fmt: skip
    style = ("body{font-family:system-ui,sans-serif;margin:24px;color:#24292f;background:#fff}"
             "pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:11px}.warn{color:#9a6700}")  # fmt: skip
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>omni {html.escape(summary.sweep_id)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")  # fmt: skip


def write_outputs(results: Path, summary: SweepSummary, history: dict | None = None) -> dict[str, Path]:
    """results/summaries/<sweep>.{md,json,html}: derived views, regenerated on demand."""
    folder = Path(results) / "summaries"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "md": folder / f"{summary.sweep_id}.md",
        "json": folder / f"{summary.sweep_id}.json",
        "html": folder / f"{summary.sweep_id}.html",
    }
    paths["md"].write_text(summary_markdown(summary))
    paths["json"].write_text(json.dumps(as_json(summary), indent=1, default=str) + "\n")
    paths["html"].write_text(html_report(summary, history))
    return paths
