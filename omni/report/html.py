"""The sweep report: one self-contained HTML file, plots drawn by matplotlib.

Sections, linked from a contents list at the top: the verdicts against the
baseline (a forest plot), the results table per arm, one plot per metric
(runs, median and its interval, in the metric's unit), nightly trends when
the spec has earlier sweeps, and the sweep's provenance. Plots are inline
SVG with their text kept as text (``svg.fonttype: none``); no scripts run
and nothing is fetched, so the file opens anywhere.
"""

from __future__ import annotations

import html
import io
import json
import math

from omni.report.markdown import (
    VERDICT_COLORS,
    arm_label,
    bimodal_note,
    collapse_warnings,
    format_number,
    median_interval,
    metric_groups,
    serving_markdown,
    states_text,
    verdict_method,
    verdict_text,
)
from omni.report.roofs import PHASES, memory_text, share_text
from omni.report.serving_curve import FIGURES, KINDS, LOAD_AXIS, curve_note, curve_series
from omni.report.summary import SweepSummary
from omni.report.summary_json import as_json
from omni.report.units import RATIO_SHOWN
from omni.stats.controls import untrusted
from omni.stats.verdicts import MIN_INTERVAL_RUNS
from omni.store.columns import COLUMNS_BY_NAME

WIDTH_IN = 8.5  # inches at 96 dpi: about 820 px, the page's column
# ratios a person reads at a glance, symmetric on a log axis (x0.8 and x1.25)
RATIO_TICKS = (
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    0.667,
    0.8,
    0.9,
    0.95,
    0.98,
    1,
    1.02,
    1.05,
    1.1,
    1.25,
    1.5,
    2,
    5,
    10,
    20,
    50,
    100,
)


def preload() -> None:
    """Import and set up matplotlib now (half a second), while something else is waited for."""
    _pyplot()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display; also keeps a worker thread off any GUI
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "none",
            "font.size": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "figure.dpi": 96,
        }
    )
    return plt


def _svg(fig) -> str:
    """The figure as inline SVG, cropped to its ink so no label is cut."""
    plt = _pyplot()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def unit_of(metric: str) -> str:
    unit = COLUMNS_BY_NAME[metric].unit
    return f"{metric} ({unit})" if unit else metric


def spaced_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """RATIO_TICKS inside (low, high), 1 always, none closer than 1/most of the log span."""
    import math

    gap = (math.log(high) - math.log(low)) / most
    kept = [1.0]
    for tick in sorted(RATIO_TICKS, key=lambda t: abs(math.log(t))):
        if low <= tick <= high and all(abs(math.log(tick) - math.log(k)) >= gap for k in kept):
            kept.append(tick)
    return sorted(kept)


def forest_svg(summary: SweepSummary, metrics=None) -> str:
    """Ratio (arm / baseline) with its interval per (arm, metric) on a log
    axis, for ``metrics`` (default: all); the grey band of each row is its
    +-min_effect, the verdict its color. A VOID arm has no verdict, no row."""
    shown = set(summary.metrics if metrics is None else metrics)
    rows = [
        ((arm, metric), j.comparison)
        for (arm, metric), j in summary.judged.items()
        if j.comparison and j.comparison.ci_low is not None and metric in shown
    ]
    if not rows:
        return ""
    plt = _pyplot()
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.28 * len(rows) + 1.0))
    for y, ((arm, metric), c) in enumerate(rows):
        ax.fill_betweenx([y - 0.4, y + 0.4], 1 / (1 + c.min_effect), 1 + c.min_effect, color="#d0d7de", alpha=0.6, lw=0)
        color = VERDICT_COLORS[c.verdict]
        # one group per row in the SVG, <g id="forest-ARM-METRIC">: linkable, and checkable.
        # Drawn within the ratios the tables show: a bound beyond them (2 runs a
        # side can reach 1e-300 or inf) ends in an arrow, not a scale of 600 decades
        low, high = max(c.ci_low, RATIO_SHOWN[0]), min(c.ci_high, RATIO_SHOWN[1])
        ax.plot([low, high], [y, y], color=color, lw=2, gid=f"forest-{arm}-{metric}")
        for bound, end, arrow in ((c.ci_low, low, "<"), (c.ci_high, high, ">")):
            if bound != end:
                ax.plot([end], [y], arrow, color=color, ms=6, gid=f"forest-{arm}-{metric}-beyond")
        ax.plot([c.ratio], [y], "s", color=color, ms=5, gid=f"forest-{arm}-{metric}-ratio")
    ax.axvline(1.0, color="#24292f", lw=0.8, ls="--")
    ax.set_xscale("log")
    low, high = ax.get_xlim()
    ax.xaxis.set_major_locator(FixedLocator(spaced_ticks(low, high)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"×{v:g}"))
    ax.set_yticks(range(len(rows)), [f"{arm} · {metric}" for (arm, metric), _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ratio to the baseline (geometric means, interval at the metric's level; grey: ±min_effect)")
    return _svg(fig)


def distribution_svg(summary: SweepSummary, metric: str) -> str:
    """Each arm's runs as dots, its median as a bar, the median's interval as a thick line."""
    arms = [a for a in summary.arms if summary.values.get((a, metric))]
    if not arms:
        return ""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.35 * len(arms) + 0.9))
    for y, arm in enumerate(arms):
        cell = summary.cells[(arm, metric)]
        values = summary.values[(arm, metric)]
        jitter = [((j * 7) % 9 - 4) * 0.03 for j in range(len(values))]
        ax.plot(values, [y + d for d in jitter], "o", color="#24292f", alpha=0.7, ms=4)
        if cell.ci_low is not None:
            ax.plot([cell.ci_low, cell.ci_high], [y, y], color="#0969da", lw=5, alpha=0.4, solid_capstyle="butt")
        if cell.median is not None:
            ax.plot([cell.median, cell.median], [y - 0.3, y + 0.3], color="#0969da", lw=2)
    ax.set_yticks(range(len(arms)), arms)
    ax.set_ylim(len(arms) - 0.5, -0.5)
    ax.set_xlabel(unit_of(metric))
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    return _svg(fig)


def trend_svg(points: list[tuple[str, float, float]], changes: set[str], title: str, metric: str) -> str:
    """Per-sweep medians of one arm and metric with a band of +-noise; red: a flagged change."""
    if len(points) < 2:
        return ""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.0))
    xs = list(range(len(points)))
    meds = [m for _, m, _ in points]
    ax.fill_between(
        xs, [m * (1 - f) for _, m, f in points], [m * (1 + f) for _, m, f in points], color="#d0d7de", alpha=0.6, lw=0
    )
    ax.plot(xs, meds, color="#0969da", lw=1.5)
    for x, (sweep, m, _f) in zip(xs, points):
        ax.plot([x], [m], "o", color="#cf222e" if sweep in changes else "#0969da", ms=5)
    ax.set_xticks(xs, [s[-12:] for s, _, _ in points], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(unit_of(metric))
    ax.set_title(title, fontsize=10, loc="left")
    return _svg(fig)


def results_table(summary: SweepSummary) -> str:
    """Per arm and metric, the primary metrics first (a header row before
    each group), a VOID arm marked."""
    head = ["arm", "metric", "unit", "n", "median", "MAD", "CV", "95 % CI of median", "min", "max", "vs baseline"]
    rows = []
    for title, metrics in metric_groups(summary):
        rows.append(f'<tr class="group"><th colspan="{len(head)}">{html.escape(title)}</th></tr>')
        rows += [_result_row(summary, arm, metric) for arm in summary.arms for metric in metrics]
    return (
        '<table id="results"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _result_row(summary: SweepSummary, arm: str, metric: str) -> str:
    cell = summary.cells[(arm, metric)]
    verdict = "baseline" if arm == summary.baseline else verdict_text(summary.judged[(arm, metric)])
    if untrusted(summary, arm, metric) and arm not in (summary.baseline, summary.control, *summary.void):
        verdict += " (untrustworthy)"
    verdict += bimodal_note(summary, arm, metric)
    cv = f"{cell.cv:.1%}" if cell.cv is not None else "-"
    link = f'<a href="#metric-{html.escape(metric)}">{html.escape(metric)}</a>'
    cells = [
        html.escape(arm_label(summary, arm)),
        link,
        html.escape(COLUMNS_BY_NAME[metric].unit or ""),
        str(cell.n),
        format_number(cell.median),
        format_number(cell.mad),
        cv,
        html.escape(median_interval(cell)),
        format_number(cell.min),
        format_number(cell.max),
        html.escape(verdict),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def states_list(summary: SweepSummary) -> str:
    """The arms whose runs fell into two states on a primary metric, and what separates them."""
    if not summary.states:
        return ""
    items = "".join(
        f"<li><code>{html.escape(arm)}</code> {html.escape(metric)}: {html.escape(states_text(summary, arm, metric))}</li>"
        for arm, metric in summary.states
    )
    return f'<p>Two states (an arm\'s runs in two clusters; its verdict pools them):</p><ul id="states">{items}</ul>'


def provenance_table(summary: SweepSummary) -> str:
    def show(value) -> str:
        return html.escape(", ".join(map(str, value)) if isinstance(value, list) else str(value))

    facts = summary.provenance or {}
    rows = [
        f"<tr><th>{html.escape(k)}</th><td colspan=2>{show(v)}</td></tr>"
        for k, v in facts.get("sweep", {}).items()
        if v is not None
    ]
    for arm, arm_facts in facts.get("arms", {}).items():
        rows += [
            f"<tr><th>{html.escape(arm)}</th><td>{html.escape(k)}</td><td>{show(v)}</td></tr>"
            for k, v in arm_facts.items()
            if v is not None
        ]
    rows += [
        f"<tr><th>calibration</th><td>{html.escape(arm)}</td><td>{html.escape(src)}</td></tr>"
        for arm, src in summary.calibrations.items()
    ]
    return '<table id="provenance-table">' + "".join(rows) + "</table>"


FIGURE_NAMES = {"ttft": "TTFT", "tpot": "TPOT"}


def curve_svg(serving) -> str:
    """The serving curve (:mod:`omni.report.serving_curve`): a row per figure
    (TTFT and TPOT at each arm's SLO percentile, output tok/s), a column per
    kind of level with its load on the x axis; per arm, each level's median
    over its judged runs, joined in load order, the runs' range as bars, the
    median 95 % upper bound as a tick and a band, the SLO's limit dashed."""
    series = curve_series(serving)
    if not series:
        return ""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    kinds = [k for k in KINDS.values() if any(s.kind == k for s in series)]
    figures = [f for f in FIGURES if any(s.figure == f for s in series)]
    fig, axes = plt.subplots(
        len(figures), len(kinds), figsize=(WIDTH_IN, 2.2 * len(figures) + 0.6), squeeze=False, layout="constrained"
    )
    colors = {arm: f"C{i}" for i, arm in enumerate(serving.arms)}
    for s in series:
        _draw_series(axes[figures.index(s.figure)][kinds.index(s.kind)], s, colors[s.arm])
    for row, figure in enumerate(figures):
        for col, kind in enumerate(kinds):
            panel = [s for s in series if s.figure == figure and s.kind == kind]
            _label_panel(axes[row][col], panel, figure, kind, last_row=row == len(figures) - 1)
    shown = {s.arm: s.percentile for s in series if s.percentile is not None}
    handles = [Line2D([], [], color=colors[a], marker="o", ms=4, label=f"{a} (SLO at p{q})") for a, q in shown.items()]
    if handles:
        fig.legend(handles=handles, loc="outside upper center", ncols=min(3, len(handles)), fontsize=8)
    return _svg(fig)


def _draw_series(ax, s, color: str) -> None:
    """One arm's levels: medians joined, the runs' range as bars, a hollow
    marker where some runs were flagged, the 95 % upper bound as a tick and a band."""
    xs = [p.load for p in s.points]
    ys = [p.median for p in s.points]
    spread = [[p.median - p.low for p in s.points], [p.high - p.median for p in s.points]]
    gid = f"curve-{s.arm}-{s.kind}-{s.figure}"
    ax.errorbar(xs, ys, yerr=spread, color=color, lw=1.2, capsize=2, gid=gid)
    for p in s.points:
        ax.plot([p.load], [p.median], "o", ms=4, color=color, mfc="white" if p.partial else color)
    bounded = [p for p in s.points if p.upper95 is not None]
    if bounded:
        ax.plot([p.load for p in bounded], [p.upper95 for p in bounded], "_", ms=9, color=color, gid=f"{gid}-upper95")
        uppers = [p.upper95 if p.upper95 is not None else float("nan") for p in s.points]
        ax.fill_between(xs, ys, uppers, color=color, alpha=0.15, lw=0)


def _label_panel(ax, panel: list, figure: str, kind: str, last_row: bool) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullLocator

    for limit in sorted({s.limit for s in panel if s.limit is not None}):
        ax.axhline(limit, color="#cf222e", lw=0.8, ls="--", gid=f"slo-{figure}-{kind}")
        ax.annotate(
            f"SLO {limit:g} ms",
            (1, limit),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            fontsize=7,
            color="#cf222e",
        )
    loads = sorted({p.load for s in panel for p in s.points})
    if loads:
        ax.set_xscale("log", base=2)  # concurrencies and rates are tried in doublings
        ax.xaxis.set_major_locator(FixedLocator(loads))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if last_row:
        ax.set_xlabel(LOAD_AXIS[kind])
    if figure == "output_tok_s":
        ax.set_ylabel("output (tok/s)")
        ax.set_ylim(bottom=0)
        return
    ax.set_yscale("log")
    # 60, not 6 x 10^1; minor ticks labelled only where the axis spans little (matplotlib's thresholds)
    ax.yaxis.set_major_formatter(LogFormatter())
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
    at = "/".join(f"p{q}" for q in sorted({s.percentile for s in panel}))  # arms at two: the legend says whose
    ax.set_ylabel(f"{at} {FIGURE_NAMES[figure]} (ms)")


def serving_section(summary: SweepSummary) -> list[str]:
    if summary.serving is None:
        return []
    text = "\n".join(serving_markdown(summary.serving))
    return [
        '<section id="serving"><h2>Serving</h2><p>Per arm and load level: TTFT and TPOT at the percentile '
        "of the arm's SLO, and output tok/s, against the load: closed-loop levels (requests in flight) and "
        "open-loop levels (requests/s offered) apart. Point: the median over the level's judged runs; bars: the "
        "runs' range; tick and band: up to the median of the runs' 95 % upper bounds of the percentile, which "
        "the SLO is met on (none where a run's requests are too few to bound it); dashed red: the SLO's "
        "limit.</p>",
        f'<div id="curve">{curve_svg(summary.serving)}</div>',
        f'<p id="curve-note">{html.escape(note)}</p>' if (note := curve_note(summary.serving)) else "",
        f'<pre style="white-space:pre-wrap">{html.escape(text)}</pre>',
        "</section>",
    ]


def roofline_svg(summary: SweepSummary) -> str:
    """Arithmetic intensity against achieved FLOP/s, one point per arm and
    phase (medians over runs), the slot's measured roofs drawn (log-log)."""
    arms = {arm: r for arm, r in summary.roofs.items() if r.points}
    if not arms:
        return ""
    plt = _pyplot()
    import numpy as np

    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
    xs = [x for r in arms.values() for x, _ in r.points.values()]
    grid = np.logspace(np.log10(min(xs) / 4), np.log10(max(xs) * 4), 64)
    drawn = set()
    for r in arms.values():
        compute = r.roofs.get("compute", math.inf)
        for name, style in (("dram", "-"), ("cache", "--")):
            if name in r.roofs and (name, r.roofs[name], compute) not in drawn:
                drawn.add((name, r.roofs[name], compute))
                ax.plot(grid, np.minimum(grid * r.roofs[name], compute), style, color="#57606a", lw=1,
                        label=f"{name} {r.roofs[name] / 1e9:.0f} GB/s, peak {compute / 1e9:.0f} GFLOP/s")  # fmt: skip
    for i, (arm, r) in enumerate(arms.items()):
        for phase, (x, y) in r.points.items():
            marker = "o" if phase == "decode" else "^"
            ax.plot([x], [y], marker, color=f"C{i}", ms=7, gid=f"roofline-{arm}-{phase}", label=f"{arm} {phase}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("achieved FLOP/s")
    ax.legend(fontsize=7, loc="lower right")
    return _svg(fig)


def roofs_section(summary: SweepSummary) -> list[str]:
    if not summary.roofs:
        return []
    rows = "".join(
        f"<tr><td>{html.escape(arm)}</td>"
        + (
            f"<td colspan='4'>no roof: {html.escape(r.note)}</td>"
            if r.note
            else "".join(f"<td>{html.escape(share_text(r.phases[p]) if p in r.phases else '-')}</td>" for p in PHASES)
            + f"<td>{r.decode_bytes_per_token / 2**20:.2f} MiB</td><td>{html.escape(memory_text(r))}</td>"
        )
        + "</tr>"
        for arm, r in summary.roofs.items()
    )
    findings = "".join(
        f"<li>{html.escape(arm)}: {html.escape(f)}</li>" for arm, r in summary.roofs.items() for f in r.findings
    )
    return [
        '<section id="roofs"><h2>Roofs</h2><p>The roof that binds each phase and the runs\' geometric-mean share of '
        "it with its 95 % interval; roofs measured on the slot (omni host limits).</p>",
        "<table><tr><th>arm</th><th>decode</th><th>prefill</th><th>bytes per decoded token</th>"
        f"<th>decode step's working set</th></tr>{rows}</table>",
        f'<ul class="warn">{findings}</ul>' if findings else "",
        f'<div id="roofline">{roofline_svg(summary)}</div>',
        "</section>",
    ]


def html_report(summary: SweepSummary, history: dict | None = None) -> str:
    """``history``: {"points": {(arm, metric): [(sweep, median, floor)]}, "changes": [Change]}."""
    sections = [
        ("verdicts", "Against the baseline"),
        ("results-table", "Results per arm"),
        ("distributions", "Per metric"),
        ("provenance", "Provenance"),
    ]
    trends = history and history.get("points")
    if trends:
        sections.insert(3, ("trends", "Nightly trend"))
    if summary.serving is not None:
        sections.insert(1, ("serving", "Serving"))
    if summary.roofs:
        sections.insert(len(sections) - 1, ("roofs", "Roofs"))
    body = [
        f"<h1>sweep {html.escape(summary.sweep_id)}</h1>",
        f"<p>spec <code>{html.escape(summary.sweep_name)}</code>, baseline arm "
        f"<code>{html.escape(str(summary.baseline))}</code>"
        + (f", live A/A control <code>{html.escape(summary.control)}</code>" if summary.control else "")
        + f"; {summary.excluded} retracted run(s) left out.</p>",
        '<nav id="contents"><ul>' + "".join(f'<li><a href="#{i}">{t}</a></li>' for i, t in sections) + "</ul></nav>",
    ]
    if summary.void:
        body.append(
            '<ul class="void" id="void">'
            + "".join(
                f"<li><b>VOID {html.escape(arm)}</b>: every number of it, its timed runs included, is kept out of "
                f"every verdict: {html.escape(why)}</li>"
                for arm, why in summary.void.items()
            )
            + "</ul>"
        )
    if summary.warnings:
        body.append(
            '<ul class="warn" id="warnings">'
            + "".join(f"<li>{html.escape(w)}</li>" for w in collapse_warnings(summary.warnings))
            + "</ul>"
        )
    legend = " ".join(f'<span style="color:{c}">&#9632; {v}</span>' for v, c in VERDICT_COLORS.items())
    others = [m for m in summary.metrics if m not in summary.primary]
    other_forest = forest_svg(summary, others) if summary.primary and others else ""
    body += [
        '<section id="verdicts"><h2>Against the baseline</h2>',
        f"<p>{html.escape(verdict_method(summary))} Each run is the median of its iterations. {legend}</p>",
        f'<div id="forest">{forest_svg(summary, summary.primary or None)}</div>',
        f'<details id="forest-others"><summary>Other metrics</summary>{other_forest}</details>' if other_forest else "",
        states_list(summary),
        "</section>",
        *serving_section(summary),
        '<section id="results-table"><h2>Results per arm</h2>',
        results_table(summary),
        "</section>",
        '<section id="distributions"><h2>Per metric</h2><p>Dots: runs; bar: median; thick line: the median\'s '
        f"exact 95 % interval (order statistics), from {MIN_INTERVAL_RUNS} runs on (below, even [min, max] "
        "holds the median less than 95 % of the time).</p>",
    ]
    for metric in summary.metrics:
        effect, source = summary.min_effects[metric]
        body += [
            f'<div class="metric" id="metric-{html.escape(metric)}"><h3>{html.escape(unit_of(metric))} '
            f"<small>min_effect {effect:.1%} ({html.escape(source)}) · "
            f'<a href="#results-table">table</a></small></h3>',
            distribution_svg(summary, metric),
            "</div>",
        ]
    body.append("</section>")
    if trends:
        flagged: dict = {}
        for c in history["changes"]:
            flagged.setdefault((c.arm, c.metric), set()).add(c.sweep_id)
        body.append(
            '<section id="trends"><h2>Nightly trend</h2><p>Per-sweep medians of this spec; band: ±noise; '
            "red: a flagged change.</p>"
        )
        for (arm, metric), points in sorted(history["points"].items()):
            body.append(trend_svg(points, flagged.get((arm, metric), set()), f"{arm} · {metric}", metric))
        body.append("</section>")
    body += roofs_section(summary)
    body += [
        '<section id="provenance"><h2>Provenance</h2>',
        provenance_table(summary),
        "</section>",
        f'<script type="application/json" id="summary">{html.escape(json.dumps(as_json(summary), default=str, allow_nan=False))}</script>',
    ]
    style = (
        "body{font-family:system-ui,sans-serif;margin:24px;color:#24292f;background:#fff;max-width:900px}"
        "table{border-collapse:collapse;font-size:12px}td,th{border-bottom:1px solid #d0d7de;padding:2px 6px;"
        "text-align:left}.warn{color:#9a6700}.void{color:#cf222e}tr.group th{background:#f6f8fa}svg{max-width:100%;height:auto}nav ul{display:flex;gap:16px;"
        "list-style:none;padding:0}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>omni {html.escape(summary.sweep_id)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )
