"""A sweep as plain functions: prepare it, run one item, tabulate the result.

The Prefect flow in ``flows/sweep.py`` calls these; so do tests that need no
Prefect at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omni.plan import new_sweep_id, plan_sweep, sweep_slots
from omni.provenance import collect_host_provenance
from omni.resources import resolve_all
from omni.runner import PlanItem, RunContext, run_arm
from omni.spec import LoadedSpec, load_spec
from omni.stats import ArmTable, describe_arms
from omni.store import load_runs, write_run

REPO_ROOT = Path(__file__).resolve().parent.parent
TABLE_METRICS = ("decode_tok_s", "prefill_tok_s", "ttft_ms", "load_s", "rss_anon_tree_mb", "rss_anon_steady_mb")


@dataclass(frozen=True)
class PreparedSweep:
    loaded: LoadedSpec
    sweep_id: str
    context: RunContext
    items: list[PlanItem]


def prepare_sweep(
    spec: str | Path,
    *,
    passes: int | None = None,
    results: str | Path = "results",
    force: bool = False,
    sweep_id: str | None = None,
    sysfs_root: str | Path = "/",
    build: bool = True,
) -> PreparedSweep:
    """Load and validate everything a sweep needs before anything runs.

    ``build`` makes missing engine envs and models (minutes, once); a dry run
    passes False and shows where they would be.
    """
    loaded = load_spec(spec)
    sweep_id = sweep_id or new_sweep_id(loaded.sweep.name)
    items = plan_sweep(loaded, sweep_id, sweep_slots(loaded, sysfs_root), passes)
    provenance = collect_host_provenance(root=sysfs_root)
    provenance.update(spec_path=str(loaded.path), spec_sha256=loaded.sha256)
    context = RunContext(
        results_dir=Path(results).resolve(),
        timeout_s=loaded.sweep.timeout_s,
        busy_threshold_pct=loaded.sweep.busy_threshold_pct,
        force=force,
        provenance=provenance,
        repo_root=REPO_ROOT,
        resources=resolve_all(REPO_ROOT, list(loaded.sweep.arms), build=build),
    )
    return PreparedSweep(loaded, sweep_id, context, items)


def run_and_store(context: RunContext, item: PlanItem, extra: dict | None = None) -> dict:
    """Run one item and write its row the moment it ends (STYLE.md 5)."""
    row = run_arm(context, item)
    row.update(extra or {})
    write_run(context.results_dir, row)
    return row


def sweep_table(results: str | Path, sweep_id: str) -> ArmTable:
    frame = load_runs(Path(results))
    frame = frame[frame["sweep_id"] == sweep_id].sort_values("order_index")
    return describe_arms(frame.to_dict("records"), TABLE_METRICS)


def format_table(table: ArmTable) -> str:
    """A plain-text per-arm table: n, median, min, max per metric."""
    lines = [f"{'arm':<20} {'metric':<20} {'n':>3}/{'runs':<4} {'median':>12} {'min':>12} {'max':>12}"]
    for arm in table.arms:
        for metric in table.metrics:
            cell = table.cells[(arm, metric)]
            nums = [f"{v:12.3f}" if v is not None else f"{'-':>12}" for v in (cell.median, cell.min, cell.max)]
            lines.append(f"{arm:<20} {metric:<20} {cell.n:>3}/{table.runs[arm]:<4} {' '.join(nums)}")
    return "\n".join(lines)
