"""Summaries as text: Markdown (CLI, Prefect artifacts, results/summaries/)
and JSON, and the verdict wording and colours the HTML report
(:mod:`omni.report.html`) shares with them.
"""

from __future__ import annotations

import math

from omni.history.calibration import metric_kind
from omni.report import units
from omni.report.roofs import roofs_lines
from omni.report.summary import SweepSummary
from omni.report.units import ratio_interval
from omni.report.verdicts import Judged
from omni.serving.summary import LEVEL_METRICS, ServingSummary
from omni.stats.controls import untrusted
from omni.stats.verdicts import ESTIMATE_LEVEL, MIN_INTERVAL_RUNS, min_max_coverage
from omni.store.columns import COLUMNS_BY_NAME

VERDICT_COLORS = {"better": "#1a7f37", "worse": "#cf222e", "equivalent": "#57606a", "inconclusive": "#bf8700"}


def format_number(value: float | None) -> str:
    """Four significant digits, never in scientific notation (omni.report.units); ``-`` for a missing value."""
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
    level = f" at {100 * c.confidence:.4g} %" if c.confidence != 0.95 else ""
    if c.estimate:
        return (
            f"no verdict: x{c.ratio:.3f} {ratio_interval(*c.estimate)} at {100 * ESTIMATE_LEVEL:g} % (an estimate; "
            f"inconclusive at its verdict level, {100 * c.confidence:.4g} %)"
        )
    text = f"{c.verdict}: x{c.ratio:.3f} {ratio_interval(c.ci_low, c.ci_high)}{level}"
    if c.below_min_effect:
        text += f", below min_effect {c.min_effect:.0%}"
    if c.unreachable:
        text += (
            f", unreachable: drift between sweeps of ±{c.drift:.1%} is larger than min_effect {c.min_effect:.0%} "
            "allows: no number of passes settles it with 80 % power"
        )
    elif c.passes_needed and c.reach and c.passes_needed > c.reach:
        text += f", needs {c.passes_needed} passes: out of reach (this spec runs at most {c.reach})"
    elif c.passes_needed:
        text += f", needs {c.passes_needed} passes"
    if c.identical:
        text += f" (identical in {c.identical} runs: the interval is the resolution's, {c.floor:.2g} of the value)"
    return text


STATES_TITLE = (
    "States (an arm's runs in two clusters further apart than a continuum of run levels puts them 1 time in 20, "
    "each primary metric tested; docs/statistics.md "
    '"Two states: bimodal runs"): its interval and verdict pool two behaviours of the host or engine.'
)
SWINGS_TITLE = (
    "Runs that differ beyond their own iterations (each primary metric tested; docs/noise.md): the engine "
    "process, not the iterations within it, moved these numbers."
)


def bimodal_note(summary: SweepSummary, arm: str, metric: str) -> str:
    """What a verdict (or the baseline's row) says when its runs fell into two
    states: `` (bimodal arm: see states)``; empty otherwise."""
    if arm == summary.baseline:
        return " (bimodal: see states)" if (arm, metric) in summary.states else ""
    judged = summary.judged.get((arm, metric))
    return bimodal_sides(judged.bimodal if judged else ())


def bimodal_sides(sides) -> str:
    """`` (bimodal arm and baseline: see states)`` for the sides of a verdict in two states; empty for none."""
    return f" (bimodal {' and '.join(sides)}: see states)" if sides else ""


def states_text(summary: SweepSummary, arm: str, metric: str) -> str:
    """``2 states: 3 runs near 480, 2 near 1150 tok/s; the slow runs had …``
    (omni.stats.modes), the low state first."""
    return modes_text(summary.modes[(arm, metric)], summary.states[(arm, metric)], metric)


def modes_text(modes, explained, metric: str) -> str:
    """:func:`states_text` of one arm's :class:`omni.stats.modes.Modes` and what separates them."""
    unit = COLUMNS_BY_NAME[metric].unit
    low, high = modes.clusters
    return (
        f"2 states: {low.count} runs near {format_number(low.median)}, {high.count} near "
        f"{format_number(high.median)}{f' {unit}' if unit else ''}; {explained.text}"
    )


def titled_lines(title: str, found: dict, text, summary: SweepSummary, metrics=None) -> list[str]:
    """``title`` and one line per (arm, metric) key of ``found`` (of ``metrics``,
    if given), each ``text(summary, arm, metric)``; nothing when none is found."""
    keys = [(a, m) for (a, m) in found if metrics is None or m in metrics]
    if not keys:
        return []
    return ["", title, ""] + [f"- `{arm}` {metric}: {text(summary, arm, metric)}" for arm, metric in keys]


def states_lines(summary: SweepSummary, metrics=None) -> list[str]:
    """A title and one line per arm and metric whose runs fell into two states."""
    return titled_lines(STATES_TITLE, summary.states, states_text, summary, metrics)


def swing_text(summary: SweepSummary, arm: str, metric: str) -> str:
    """``runs differ beyond their iterations (sd 25 % between runs, 4 % implied
    within, p 0.001): slow 1 run near 396, fast 2 near 610 tok/s; …``"""
    return swing_of_text(*summary.swings[(arm, metric)], metric)


def swing_of_text(swing, explained, metric: str) -> str:
    """:func:`swing_text` of one arm's :class:`omni.stats.swing.Swing` and what sets its runs apart."""
    unit = COLUMNS_BY_NAME[metric].unit
    low, high = swing.clusters
    worse, better = (low, high) if COLUMNS_BY_NAME[metric].better == "higher" else (high, low)
    names = ("larger", "smaller") if metric_kind(metric) == "memory" else ("slow", "fast")
    return (
        f"runs differ beyond their iterations (sd {100 * swing.between_sd:.0f} % between runs, "
        f"{100 * swing.within_sd:.1f} % implied by their iterations, lag-1 correlation up to {swing.rho:.2f} "
        f"allowed for, p {swing.p:.2g}): {names[0]} "
        f"{worse.count} run(s) near {format_number(worse.median)}, {names[1]} {better.count} near "
        f"{format_number(better.median)}{f' {unit}' if unit else ''}; {explained.text}"
    )


def swing_lines(summary: SweepSummary, metrics=None) -> list[str]:
    """A title and one line per arm and metric whose runs differ beyond their iterations' noise."""
    return titled_lines(SWINGS_TITLE, summary.swings, swing_text, summary, metrics)


def median_interval(cell) -> str:
    """The exact (order-statistic) interval of the median, or why there is none
    (below omni.stats.verdicts.MIN_INTERVAL_RUNS runs even [min, max] holds it less than 95 % of the time)."""
    if cell.ci_low is not None:
        return f"[{format_number(cell.ci_low)}, {format_number(cell.ci_high)}]"
    return f"- (n<{MIN_INTERVAL_RUNS})" if cell.n >= 2 else "-"


def arm_label(summary: SweepSummary, arm: str) -> str:
    """An arm's name as every view shows it: ``VOID`` after a void arm's."""
    return f"{arm} (VOID)" if arm in summary.void else arm


def metric_groups(summary: SweepSummary, metrics=None) -> list[tuple[str, list[str]]]:
    """(title, metrics) of the primary metrics, then of the others; empty groups left out."""
    metrics = list(summary.metrics if metrics is None else metrics)
    first = [m for m in metrics if m in summary.primary]
    rest = [m for m in metrics if m not in summary.primary]
    adjusted = (
        " (verdicts at a stricter level than the primaries', for multiplicity; where that leaves one "
        f"inconclusive, its {100 * ESTIMATE_LEVEL:g} % interval as an estimate, no verdict)"
        if summary.adjustment and first
        else ""
    )
    groups = [("Primary metrics", first), (f"Other metrics{adjusted}", rest)]
    return [(title, names) for title, names in groups if names]


def collapse_warnings(warnings) -> list[str]:
    """Warnings of one rule (the text before the first colon) as one line
    with their count: ``void arm (2): a: …; b: …``; a rule seen once as it is."""
    by_rule: dict[str, list[str]] = {}
    for warning in dict.fromkeys(warnings):
        rule, sep, rest = warning.partition(": ")
        by_rule.setdefault(rule if sep else warning, []).append(rest if sep else "")
    return [
        f"{rule}: {parts[0]}"
        if len(parts) == 1 and parts[0]
        else rule
        if len(parts) == 1
        else f"{rule} ({len(parts)}): " + "; ".join(parts)
        for rule, parts in by_rule.items()
    ]


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
        lines.append(f"- `{arm_label(summary, arm)}`: {summary.ok[arm]} ok of {summary.runs[arm]} run(s)")
    lines += [
        f"- `{arm}` is VOID, every number of it, its timed runs included: {why}" for arm, why in summary.void.items()
    ]
    for title, metrics in metric_groups(summary):
        lines += [
            "",
            f"{title}:",
            "",
            "| arm | metric | n | median | MAD | CV | 95% CI of median | min | max | vs baseline |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_cell_line(summary, arm, metric) for arm in summary.arms for metric in metrics]
    if any(c.ci_low is None and c.n >= 2 for c in summary.cells.values()):
        lines += [
            "",
            f"`- (n<{MIN_INTERVAL_RUNS})`: no interval of the median below {MIN_INTERVAL_RUNS} runs: the "
            f"widest one, [min, max], holds the median {min_max_coverage(3):.0%} of the time at "
            f"3 runs, {min_max_coverage(4):.1%} at 4, {min_max_coverage(5):.2%} at 5; min and max are shown.",
        ]
    lines += states_lines(summary)
    lines += swing_lines(summary)
    lines += roofs_lines(summary.roofs)
    if summary.control and not summary.hosts:  # a replicated sweep's control is judged per host, below
        judged = [
            summary.judged[(summary.control, m)] for m in summary.metrics if (summary.control, m) in summary.judged
        ]
        counts = {v: sum(1 for j in judged if j.comparison and j.comparison.verdict == v) for v in VERDICT_COLORS}
        lines += [
            "",
            f"Live A/A control `{summary.control}` (a replica of `{summary.baseline}`, interleaved): "
            + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
            + (f"; differs on {', '.join(summary.untrusted)}" if summary.untrusted else "; " + control_reach(summary)),
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
    if summary.serving is not None:
        lines += ["", *serving_markdown(summary.serving)]
    lines += ["", "Provenance:"] + provenance_lines(summary.provenance)
    used = {}
    for arm, source in summary.calibrations.items():
        used.setdefault(source, []).append(arm)
    lines += ["", "Calibration (noise and between-sweep drift of each arm's workload, omni calibrate):"]
    lines += [f"- {', '.join(arms)}: {'none applies' if src == 'none' else src}" for src, arms in used.items()]
    lines += ["", "Smallest effect that matters (min_effect; equivalent = the interval inside +-min_effect):"]
    lines += [f"- {m}: {e:.1%} ({src})" for m, (e, src) in summary.min_effects.items()]
    lines += ["", verdict_method(summary)]
    extra = sorted({w for j in summary.judged.values() for w in j.warnings})
    if summary.warnings or extra:
        lines += ["", "Warnings:"] + [f"- {w}" for w in collapse_warnings([*summary.warnings, *extra])]
    return "\n".join(lines) + "\n"


BOUND_TEXT = {
    "above": "above the levels tried (every level met the SLO)",
    "below": "below the levels tried (none met the SLO)",
    "unknown": "unknown (a level it needed was not judged)",
    "not_established": "not established (too few requests a level to bound the SLO's percentile at 95 %)",
}
LEVEL_COLUMNS = (("output_tok_s", "output tok/s"), ("ttft_p99_ms", "TTFT p99 ms"), ("tpot_p99_ms", "TPOT p99 ms"))
# what a level's p99 is, and on what its SLO is judged (omni.serving.slo.slo_verdict)
P99_NOTE = (
    "p99: each run's interpolated 99th percentile of its level's requests, as `vllm bench serve` states it. "
    "SLO, per run: met only where the 95 % upper bound of the SLO's percentile (an order statistic of the "
    "requests: `*_upper95_ms` in results/levels) is within both limits; not met where a percentile is over "
    "one; not established otherwise, as where the requests are too few to bound it (p99 needs 299)."
)


def serving_markdown(serving: ServingSummary) -> list[str]:
    """Per level, each serving arm's medians over runs and its verdicts
    against the baseline; then each arm's capacity under its SLO."""
    lines = [
        "Serving levels (one value per run and level, medians over runs; the verdicts use the same rule as "
        f"above, runs as units, each interval at {100 * serving.level_confidence:.3g} % for the "
        f"{len(serving.levels) * len(LEVEL_METRICS)} level verdicts of an arm; a flagged level is not judged):",
        "",
        "| level | arm | n | " + " | ".join(title for _, title in LEVEL_COLUMNS) + " | SLO | vs baseline |",
        "|---|---|---|" + "---|" * len(LEVEL_COLUMNS) + "---|---|",
    ]
    for key in serving.levels:
        for arm in serving.arms:
            cells = [serving.cells[(arm, key, m)] for m, _ in LEVEL_COLUMNS]
            shown = [f"{format_number(c.median)} {_spread(c)}".strip() for c in cells]
            verdicts = [
                f"{title.split(' ')[0]} {serving.judged[(arm, key, m)].verdict} x{serving.judged[(arm, key, m)].ratio:.3f}"
                for m, title in LEVEL_COLUMNS
                if (arm, key, m) in serving.judged and serving.judged[(arm, key, m)].ratio is not None
            ]
            if arm == serving.baseline:
                verdicts = ["baseline"]
            flags = serving.flagged.get((arm, key))
            if flags:
                counts = {f: flags.count(f) for f in dict.fromkeys(flags)}
                verdicts.append("not judged: " + ", ".join(f"{n} run(s) {f}" for f, n in counts.items()))
            slo = serving.level_slo[(arm, key)].describe() if (arm, key) in serving.level_slo else "-"
            lines.append(
                f"| {key} | `{arm}` | {cells[0].n} | "
                + " | ".join(shown)
                + f" | {slo} | {'; '.join(verdicts) or '-'} |"
            )
    lines += ["", P99_NOTE]
    lines += ["", "Capacity under the SLO (the highest load within it, interpolated between levels, per run):"]
    for (arm, kind), cell in serving.capacity.items():
        slo = serving.slo.get(arm) or {}
        unit = "in flight" if kind == "concurrency" else "req/s"
        bounds = serving.bounds.get((arm, kind)) or []
        text = f"- `{arm}` {kind}: " + _capacity_text(cell, unit)
        if bounds:
            counts = {b: bounds.count(b) for b in dict.fromkeys(bounds)}
            text += "; " + ", ".join(f"{n} run(s) {BOUND_TEXT[b]}" for b, n in counts.items())
        if slo:
            text += f" (SLO: TTFT {slo['ttft_ms']:g} ms and TPOT {slo['tpot_ms']:g} ms at p{slo['percentile']})"
        if reach := serving.slo_reach(arm):
            text += f"; {reach}"
        if (arm, kind) in serving.capacity_judged:
            c = serving.capacity_judged[(arm, kind)]
            if c.ratio is not None and c.ci_low is not None:
                text += f"; vs baseline {c.verdict} x{c.ratio:.3f} {ratio_interval(c.ci_low, c.ci_high)}"
            elif c.ratio is not None:
                text += f"; vs baseline x{c.ratio:.3f}, inconclusive: fewer than 2 runs on a side"
            if note := serving.capacity_notes.get((arm, kind)):
                text += f" ({note})"
        lines.append(text)
    return lines


def _bounded(value: float | None, side: str | None) -> str:
    """A figure, or a bound: ``> 16`` (above), ``< 1`` (below)."""
    return {"above": "> ", "below": "< "}.get(side or "", "") + format_number(value)


def _capacity_text(cell, unit: str) -> str:
    """``12.3 in flight [8.1, > 16] over 5 run(s) (1 beyond the levels,
    kept as its bound)``: the median and its interval on ranks, a bound
    where it falls on a run beyond the levels."""
    if not cell.n:
        return "no figure"
    beyond = cell.above + cell.below
    kept = f" ({beyond} beyond the levels, kept as bounds)" if beyond else ""
    if not cell.ranked:
        return f"no median: {cell.n} run(s), their bounds not beyond their figures (levels differ between runs)"
    spread = (
        f"[{_bounded(cell.ci_low, cell.low_side)}, {_bounded(cell.ci_high, cell.high_side)}] "
        if cell.ci_low is not None
        else ""
    )
    return f"{_bounded(cell.median, cell.median_side)} {unit} {spread}over {cell.n} run(s){kept}"


def _spread(cell) -> str:
    """The median's interval, or the range below the runs an interval needs."""
    if cell.ci_low is not None:
        return f"[{format_number(cell.ci_low)}, {format_number(cell.ci_high)}]"
    if cell.n >= 2:
        return f"(range {format_number(cell.min)}-{format_number(cell.max)})"
    return ""


def _cell_line(summary: SweepSummary, arm: str, metric: str) -> str:
    cell = summary.cells[(arm, metric)]
    cv = f"{cell.cv:.1%}" if cell.cv is not None else "-"
    verdict = "baseline" if arm == summary.baseline else verdict_text(summary.judged[(arm, metric)])
    if arm not in (summary.baseline, summary.control) and arm not in summary.void and untrusted(summary, arm, metric):
        verdict += " (untrustworthy: see the control)"
    verdict += bimodal_note(summary, arm, metric)
    outliers = f" ({len(cell.outliers)} outlier(s))" if cell.outliers else ""
    return (
        f"| {arm_label(summary, arm)} | {metric} | {cell.n}{outliers} | {format_number(cell.median)} "
        f"| {format_number(cell.mad)} | {cv} | {median_interval(cell)} | {format_number(cell.min)} "
        f"| {format_number(cell.max)} | {verdict} |"
    )


def control_reach(summary: SweepSummary) -> str:
    """What a control that differs on nothing showed: no move beyond its
    primary intervals, not that the host behaved (an inconclusive control
    only failed to see a move)."""
    judged = [summary.judged.get((summary.control, m)) for m in summary.primary]
    bounds = [
        (j.comparison.ci_low, j.comparison.ci_high)
        for j in judged
        if j and j.comparison and j.comparison.ci_low is not None
    ]
    if not bounds:
        return "no verdict to read the host from"
    low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
    return f"no move of the host beyond x{ratio_interval(low, high)} seen"


def verdict_method(summary: SweepSummary) -> str:
    """How the verdicts were reached: the interval, the blocking, the
    multiplicity adjustment, and the chance of a false call over the sweep's arms."""
    read = [j.comparison for j in summary.judged.values() if j.comparison]
    block = (
        "arm + slot fitted in log space over every arm of the sweep (slot as a blocking factor: passes rotate arms "
        "over slots), the control's runs sharing the baseline's variance, each other arm its own"
        if any(c.blocked for c in read)
        else "the arms' means over every arm of the sweep (one slot), the control's runs sharing the baseline's "
        "variance, each other arm its own"
        if any(c.fitted for c in read)
        else "a two-sample interval, each arm's own variance"
    )
    if any(c.calibrated for c in read):
        block += "; where every arm has a calibration on this host, each arm's calibrated noise scaled by this sweep's"
    text = (
        f"Verdicts: {block}, half-width by the generalized pivotal quantity; the ratio of geometric means of the "
        "run values, noise from these runs (interleaved passes: drift cancels within the sweep)."
    )
    if summary.adjustment is not None:
        text += f" Multiplicity: {summary.adjustment.describe()}."
        judged = len({arm for arm, _ in summary.judged})
        if judged > 1:
            text += (
                f" This sweep judges {judged} arms against the baseline: the chance that some arm identical to it "
                f"is called different on some metric is at most {min(1.0, judged * summary.adjustment.alpha):.0%}."
            )
    return text


HEADLINE_METRICS = ("ttft_ms", "prefill_tok_s", "decode_tok_s", "tpot_ms", "itl_p99_ms", "rss_anon_steady_mb")


def verdicts_markdown(summary: SweepSummary, metrics: tuple[str, ...] = HEADLINE_METRICS) -> str:
    """What to read first after a sweep: each arm against the baseline on the
    primary metrics, then on the other headline metrics (every metric: omni
    summary), a VOID arm marked, and the live control."""
    shown = [m for m in summary.metrics if m in summary.primary or m in metrics] or list(summary.metrics)
    hosts = f" on {', '.join(summary.hosts)}, within each host" if summary.hosts else ""
    lines = [f"against the baseline `{summary.baseline}`{hosts} (every metric: omni summary {summary.sweep_id}):"]
    for title, names in metric_groups(summary, shown):
        lines += ["", f"{title}:", "", "| arm | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for arm in summary.arms:
            if arm == summary.baseline:
                continue
            cells = [_short_verdict(summary, arm, m) for m in names]
            lines.append(f"| {arm_label(summary, arm)} | " + " | ".join(cells) + " |")
    lines += states_lines(summary, shown)
    lines += swing_lines(summary, shown)
    lines += roofs_lines(summary.roofs)
    voided = {summary.baseline, *summary.arms} & set(summary.void)
    lines += (
        ["", *[f"VOID `{arm}`: {summary.void[arm]}; kept out of every verdict" for arm in voided]] if voided else []
    )
    if summary.untrusted:
        lines += ["", *[f"untrustworthy {m}: {why}" for m, why in summary.untrusted.items()]]
    return "\n".join(lines) + "\n"


def _short_verdict(summary: SweepSummary, arm: str, metric: str) -> str:
    judged = summary.judged[(arm, metric)]
    if judged.refused and judged.refused.startswith("VOID"):
        return judged.refused.split(":")[0]  # the reason once, below the table
    return (
        verdict_text(judged)
        + (" (untrustworthy)" if untrusted(summary, arm, metric) else "")
        + bimodal_note(summary, arm, metric)
    )


def provenance_lines(provenance: dict) -> list[str]:
    """One line for the sweep-wide facts, one per arm; lists are values that differed."""

    def show(facts: dict) -> str:
        return ", ".join(
            f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in facts.items() if v is not None
        )

    lines = [f"- sweep: {show(provenance.get('sweep', {}))}"]
    lines += [f"- `{arm}`: {show(facts)}" for arm, facts in provenance.get("arms", {}).items()]
    return lines
