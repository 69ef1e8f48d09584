"""``passes: auto`` on the real harness: where each rule stops on the same rows.

arms/auto-synthetic.yaml (synthetic engine; ``slow`` waits 5 ms a decode
step where ``fast`` waits 4: about 20 % slower) is run once per seed at a
fixed number of passes (``passes: N``, the spec's seed replaced, without
max_passes and budget), as ``omni sweep`` runs it but without Prefect. Then both rules look at the
prefixes of the stored rows, passes 3, 4, ..., as a ``passes: auto`` sweep
of the spec's max_passes would: every primary metric of ``slow`` against
``fast`` judged by omni.report.verdicts.judge (the summary's own: the slot as a
block, the within-run floor) at each look's levels, and
omni.stats.sequential.decide on them. Each rule's stop is the first look where
decide stops; a rule that has not stopped by the stored passes is reported
as ``>N``. The rules (benchmarks/sequential_rules.py): ``boundaries``,
omni's group-sequential boundaries, and ``bonferroni``, the same spending
with each look at 1 - its own slice. The A/A variant makes ``slow`` wait
4 ms too. At the boundaries' stop the verdicts are checked against
omni.report.summary's own summary of those rows with ``passes: auto``.

    .venv/bin/python benchmarks/auto_passes.py [--seeds 20] [--passes 8] [--force]
        [--results DIR] [--evaluate-only]

--force runs on busy cores, as omni sweep --force (a shared host; the rows
record it). --evaluate-only judges the sweeps a previous run stored in
DIR (its sweeps.json) without running any.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sequential_rules import RULES, Levels  # noqa: E402

from omni.report.spec_copy import baseline_of, min_effects, primary_metrics, sweep_spec  # noqa: E402
from omni.report.summary import summarize_rows  # noqa: E402
from omni.report.verdicts import BLOCK, judge  # noqa: E402
from omni.stats.sequential import FIRST_LOOK, Decision, decide  # noqa: E402
from omni.stats.verdicts import adjust_for_multiplicity  # noqa: E402
from omni.store.columns import metric_columns  # noqa: E402
from omni.store.retract import SweepRows, ok_rows  # noqa: E402
from omni.sweep.execute import run_sweep_items  # noqa: E402
from omni.sweep.prepare import prepare_sweep  # noqa: E402
from omni.sweep.request import SweepRequest  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "arms" / "auto-synthetic.yaml"
PRIMARY = ("decode_tok_s", "ttft_ms", "rss_anon_steady_mb")  # the spec's (omni's default); also decode_tok_s alone


def spec_copy(work: Path, seed: int, passes: int, aa: bool) -> Path:
    """auto-synthetic.yaml at ``passes`` fixed passes and ``seed``; ``aa``: both arms wait 4 ms."""
    data = yaml.safe_load(SPEC.read_text())
    for key in ("max_passes", "budget"):
        data.pop(key, None)
    data.update(name=f"auto-passes-{'aa' if aa else 'ab'}-{seed}", passes=passes, seed=seed)
    if aa:
        data["arms"][1]["params"]["step_sleep_ms"] = data["arms"][0]["params"]["step_sleep_ms"]
    path = work / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_sweep(spec: Path, results: Path, force: bool) -> str:
    """The sweep of ``spec`` into ``results``, in this process as ``omni sweep``
    prepares and runs it but without Prefect (omni.sweep.execute.run_sweep_items:
    Prefect's temporary server would cost more than the 16 runs); its id.
    Every run must be ok."""
    prepared = prepare_sweep(SweepRequest(spec=spec, results=results, force=force))
    bad = [row for row in run_sweep_items(prepared) if row["status"] != "ok"]
    if bad:
        raise SystemExit(f"{spec.name}: {len(bad)} run(s) not ok, e.g. {bad[0]['status']}: {bad[0].get('error')}")
    return prepared.sweep_id


def look(rows: SweepRows, spec, passes: int, max_passes: int, levels: Levels) -> Decision:
    """The rule's decision on the first ``passes`` passes of the rows, as a
    ``passes: auto`` sweep's look after that pass (omni.sweep.execute.look) would judge them."""
    ok = rows.ok[rows.ok["pass_index"] < passes]
    arms = list(dict.fromkeys(rows.timed["arm"]))
    metrics = primary_metrics(spec, [m for m in metric_columns() if ok[m].notna().any()])
    adjustment = adjust_for_multiplicity(metrics, spec.primary_metrics)
    level = levels(adjustment, passes, max_passes)
    effects = min_effects(spec, metrics)
    baseline = baseline_of(spec, arms)
    judged = {
        (arm, m): judge(ok, ok, baseline, arm, m, effects[m][0], 0.0, level[m], BLOCK)
        for arm in arms
        if arm != baseline
        for m in adjustment.primary
    }
    refused = {k: j.refused or "no verdict" for k, j in judged.items() if j.comparison is None}
    return decide({k: j.comparison for k, j in judged.items()}, passes, max_passes, refused=refused)


@dataclass(frozen=True)
class Stop:
    """One rule on one sweep's rows."""

    decision: Decision | None  # at the look where it stops; None: not by the stored passes
    primary: tuple[str, ...]
    settled: dict[str, int]  # primary metric -> the first look at which its verdict was conclusive
    called: tuple[str, ...]  # better/worse verdicts at any look up to the stop: "pass 5: slow ttft_ms worse ..."


def stops(results: Path, sweep_id: str, max_passes: int, primary: tuple[str, ...]) -> dict[str, Stop]:
    """Per rule, where it stops on the sweep's rows with ``primary`` as the
    spec's primary metrics, where each of them settled, and what it called
    better or worse on the way."""
    rows = ok_rows(results, sweep_id)
    spec = sweep_spec(results, sweep_id).model_copy(update={"primary_metrics": list(primary)})
    stored = int(rows.timed["pass_index"].max()) + 1
    found: dict[str, Stop] = {}
    for name, levels in RULES.items():
        stop, settled, called = None, {}, []
        for passes in range(FIRST_LOOK, min(stored, max_passes) + 1):
            decision = look(rows, spec, passes, max_passes, levels)
            for line in decision.lines:
                arm, metric, verdict = line.split(" ")[:3]
                if f"{arm} {metric}" not in decision.pending:
                    settled.setdefault(metric, passes)
                if verdict in ("better", "worse"):
                    called.append(f"pass {passes}: {line}")
            if decision.stop:
                stop = decision
                break
        found[name] = Stop(stop, primary, settled, tuple(called))
    if found["boundaries"].decision is not None:
        check_against_summary(results, sweep_id, rows, spec, found["boundaries"].decision, max_passes)
    return found


def check_against_summary(results: Path, sweep_id: str, rows: SweepRows, spec, decision: Decision, most: int) -> None:
    """The boundaries' verdicts at their stop are the summary's of those rows under ``passes: auto``."""
    cut = SweepRows(*(part[part["pass_index"] < decision.passes] for part in rows[:2]), 0, rows.profiled)
    auto = spec.model_copy(update={"passes": "auto", "max_passes": most})
    summary = summarize_rows(results, sweep_id, cut, auto)
    mine = {line.split(" [")[0] for line in decision.lines}
    theirs = {
        f"{arm} {metric} {j.comparison.verdict} x{j.comparison.ratio:.3f}"
        for (arm, metric), j in summary.judged.items()
        if metric in summary.primary and j.comparison is not None and j.comparison.ci_low is not None
    }
    if not theirs <= mine:
        raise SystemExit(f"{sweep_id}: the summary judges otherwise: {sorted(theirs - mine)} against {sorted(mine)}")


def shown(stop: Stop, stored: int) -> str:
    return f">{stored}" if stop.decision is None else str(stop.decision.passes)


def settled(stop: Stop, stored: int) -> str:
    """Each primary's first conclusive look up to the stop, short: "decode_tok_s 4, ttft_ms >8"."""
    return ", ".join(f"{m} {stop.settled.get(m, f'>{stored}')}" for m in stop.primary)


def median_passes(values: list[int | None], stored: int) -> str:
    """Median and range, a look not reached by the stored passes counted as one past them."""
    passes = [stored + 1 if v is None else v for v in values]
    return f"median {statistics.median(passes):g}, range {min(passes)}-{max(passes)}"


def table(found: dict[int, dict[str, Stop]], stored: int, title: str, expected: tuple[str, ...]) -> None:
    """Per seed each rule's stop and first conclusive looks; then medians,
    and every better/worse call up to the stop but the ``expected`` ones (true effects)."""
    print(f"\n{title}")
    print("| seed | " + " | ".join(f"{r}: stop | {r}: first conclusive look" for r in RULES) + " |")
    print("|---|" + "---|---|" * len(RULES))
    for seed, by_rule in found.items():
        print(
            f"| {seed} | " + " | ".join(f"{shown(s, stored)} | {settled(s, stored)}" for s in by_rule.values()) + " |"
        )
    for rule in RULES:
        mine = [by[rule] for by in found.values()]
        called = [line for s in mine for line in s.called if not any(e in line for e in expected)]
        print(
            f"{rule}: stop {median_passes([s.decision.passes if s.decision else None for s in mine], stored)}; "
            + "; ".join(f"{m} {median_passes([s.settled.get(m) for s in mine], stored)}" for m in mine[0].primary)
            + f" (>{stored} counted as {stored + 1}); other better/worse calls at some look up to the stop: {len(called)}"
            + "".join(f"\n  {line}" for line in called)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--passes", type=int, default=8, help="passes each sweep runs (the prefixes' limit)")
    parser.add_argument("--max-passes", type=int, default=None, help="the rule's plan (default: the spec's)")
    parser.add_argument("--results", type=Path, default=None, help="where the sweeps go (default: a new temp dir)")
    parser.add_argument("--force", action="store_true", help="run on busy cores, as omni sweep --force (recorded)")
    parser.add_argument("--evaluate-only", action="store_true", help="judge the sweeps listed in RESULTS/sweeps.json")
    args = parser.parse_args()
    most = args.max_passes or yaml.safe_load(SPEC.read_text())["max_passes"]
    work = args.results or Path(tempfile.mkdtemp(prefix="omni-auto-passes-"))
    work.mkdir(parents=True, exist_ok=True)
    listing = work / "sweeps.json"
    sweeps: dict[str, str] = json.loads(listing.read_text()) if listing.exists() else {}
    if not args.evaluate_only:
        for seed in range(1, args.seeds + 1):
            for aa in (False, True):
                key = f"{'aa' if aa else 'ab'}-{seed}"
                if key in sweeps:
                    continue
                began = time.monotonic()
                sweeps[key] = run_sweep(spec_copy(work, seed, args.passes, aa), work / "results", args.force)
                listing.write_text(json.dumps(sweeps, indent=1))
                print(f"{key}: {sweeps[key]} in {time.monotonic() - began:.0f} s", flush=True)
    print(f"max_passes {most}, {args.passes} passes stored per sweep, results under {work}")
    # slow's first token waits one 5 ms step too: its TTFT is truly about 10 % longer
    variants = (
        ("ab", "slow 20 % slower (step 5 ms v 4 ms)", ("slow decode_tok_s worse", "slow ttft_ms worse")),
        ("aa", "A/A (both 4 ms)", ()),
    )
    for (variant, title, expected), primary in itertools.product(variants, (PRIMARY, ("decode_tok_s",))):
        found = {
            int(key.split("-")[1]): stops(work / "results", sweep_id, most, primary)
            for key, sweep_id in sweeps.items()
            if key.startswith(variant)
        }
        if found:
            table(dict(sorted(found.items())), args.passes, f"{title}; primary metrics: {', '.join(primary)}", expected)


if __name__ == "__main__":
    main()
