"""Across sweeps in Markdown: ``omni compare`` (a sweep against another)
and ``omni regressions`` (each sweep of a spec against the ones before it),
from :mod:`omni.history.compare`'s results; one sweep's summary is :mod:`omni.report.markdown`'s."""

from __future__ import annotations

from omni.history.compare import Nightly, SweepComparison
from omni.history.hardware import comparison_lines, history_lines
from omni.report.markdown import (
    STATES_TITLE,
    SWINGS_TITLE,
    bimodal_sides,
    collapse_warnings,
    modes_text,
    swing_of_text,
    verdict_text,
)
from omni.report.units import ratio_interval
from omni.stats.changepoints import ALPHA as ALPHA_SHIFT
from omni.stats.changepoints import MIN_SWEEPS
from omni.stats.verdicts import ALPHA, PRIMARY_SHARE


def comparison_markdown(result: SweepComparison) -> str:
    lines = [f"# {result.after} against {result.before}", ""]
    lines += comparison_lines(result.hardware, result.across_hardware, result.before, result.after)
    lines += [f"{result.excluded} retracted run(s) left out.", ""]
    for arm, change in result.config_changes.items():
        lines.append(f"- `{arm}` changed: {change}")
    lines += [f"- `{arm}` is VOID, kept out of every verdict: {why}" for arm, why in result.void.items()]
    first = [m for m in result.metrics if m in result.primary]
    groups = [("Primary metrics", first), ("Other metrics", [m for m in result.metrics if m not in first])]
    for title, metrics in groups:
        if not metrics:
            continue
        lines += ["", f"{title}:", "", "| arm | metric | n before | n after | verdict |", "|---|---|---|---|---|"]
        for arm in result.arms:
            for metric in metrics:
                judged = result.judged[(arm, metric)]
                c = judged.comparison
                n_before, n_after = (c.n_base, c.n_other) if c else ("-", "-")
                label = f"{arm} (VOID)" if arm in result.void else arm
                note = bimodal_sides(judged.bimodal)
                lines.append(f"| {label} | {metric} | {n_before} | {n_after} | {verdict_text(judged)}{note} |")
    drifts = sorted(
        {
            (j.comparison.drift, result.drift_sources.get(key, "default"))
            for key, j in result.judged.items()
            if j.comparison
        }
    )
    if drifts:  # none when every verdict was refused
        lines += [
            "",
            "Two sweeps: each interval includes a between-sweep drift, which interleaving cannot cancel "
            "across sweeps: " + "; ".join(f"{d:.2%} ({src})" for d, src in drifts) + ".",
        ]
    if result.adjustment is not None:
        lines += ["", f"Multiplicity: {result.adjustment.describe()}."]
    sweeps = {"before": result.before, "after": result.after}
    for title, listed, text in (
        (STATES_TITLE, result.states, modes_text),
        (SWINGS_TITLE, result.swings, swing_of_text),
    ):
        if listed:
            lines += ["", title, ""]
            lines += [
                f"- `{arm}` {metric} ({side}, {sweeps[side]}): {text(*found, metric)}"
                for (side, arm, metric), found in listed.items()
            ]
    extra = sorted({w for j in result.judged.values() for w in j.warnings})
    if extra:
        lines += ["", "Warnings:"] + [f"- {w}" for w in collapse_warnings(extra)]
    return "\n".join(lines) + "\n"


def changes_markdown(sweep_name: str, nightly: Nightly, void: dict[tuple[str, str], str] | None = None) -> str:
    """The nightly changes, primary metrics first (as each sweep's spec
    names them: the changes come in that order), the earlier sweeps that
    were no history for a difference of hardware, and the VOID arms of the
    sweeps (``void``: (sweep, arm) -> why), whose runs were not judged."""
    changes, sweeps = nightly.changes, nightly.order
    lines = [f"# nightly changes of `{sweep_name}` over {len(sweeps)} sweep(s)", ""]
    lines += history_lines(nightly.differing, nightly.unknown, nightly.across_hardware)
    lines += [
        f"- VOID `{arm}` in {sweep}, its runs neither judged nor history: {why}"
        for (sweep, arm), why in (void or {}).items()
    ]
    lines += [""] if void else []
    if not changes:
        return "\n".join(lines + ["No regression or improvement beyond min_effect.", *shift_lines(nightly)]) + "\n"
    lines += [
        "| sweep | arm | metric | kind | ratio to history [95 % CI] | drift | runs | history runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in changes:
        lines.append(
            f"| {c.sweep_id} | {c.arm} | {c.metric} | {c.kind} | x{c.ratio:.3f} {ratio_interval(c.ci_low, c.ci_high)} "
            f"| {c.drift:.2%} ({c.drift_source}) | {', '.join(c.run_ids)} | {', '.join(c.history_run_ids)} |"
        )
    unsteady = [c for c in changes if c.unsteady]
    if unsteady:
        lines += [
            "",
            "Changes whose own sweep's runs were not steady (one disturbed run can make a change; docs/noise.md):",
            "",
        ]
        for c in unsteady:
            kind, found, explained = c.unsteady
            text = {"states": modes_text, "swing": swing_of_text}[kind](found, explained, c.metric)
            lines.append(f"- `{c.arm}` {c.metric} in {c.sweep_id}: {text}")
    lines += shift_lines(nightly)
    lines += [
        "",
        "Rule: each sweep's runs against the runs of the sweeps before it (a two-sample interval on log run "
        "values, each side's own variance, the between-sweep drift added with its degrees of freedom: "
        "docs/statistics.md); a change is better/worse with its interval reaching past min_effect. "
        f"Multiplicity: each interval at its sweep's level for the metric (Bonferroni, weighted: the primary "
        f"metrics share {ALPHA * PRIMARY_SHARE:.0%}, the others {ALPHA * (1 - PRIMARY_SHARE):.0%}).",
    ]
    return "\n".join(lines) + "\n"


# --- JSON ---


def shift_lines(nightly: Nightly) -> list[str]:
    """Where an arm's per-sweep level shifted and stayed (omni.stats.changepoints), per primary metric."""
    if not nightly.shifts:
        return []
    found = [(key, shift) for key, shifts in nightly.shifts.items() for shift in shifts]
    lines = [
        "",
        f"Level shifts over the history (change points of each arm's per-sweep geometric mean, primary metrics, "
        f"{len(nightly.shifts)} series of {MIN_SWEEPS} sweeps or more on the newest sweep's hardware; a series "
        f"without one reports one {ALPHA_SHIFT:.0%} of the time: docs/statistics.md):",
        "",
    ]
    if not found:
        return [*lines, "- none beyond min_effect"]
    return lines + [
        f"- `{arm}` {metric}: x{shift.ratio:.3f} from {shift.sweep_id} on "
        f"({shift.before} sweep(s) before, {shift.after} from it)"
        for (arm, metric), shift in found
    ]
