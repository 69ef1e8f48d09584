"""``omni host check``, ``omni host tune`` and ``omni host reset``: the host
conditions that move CPU inference numbers (omni.host.conditions), shown, fixed as root
and undone (omni.host.tuning); ``omni.cli.main`` adds the group to the ``omni`` command."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from omni.cli.console import show
from omni.cli.options import sysfs_option
from omni.errors import OmniError

host_app = typer.Typer(
    no_args_is_help=True, help="Host conditions that move CPU inference numbers: check, tune (root), reset."
)

CPUS_HELP = "the slot CPUs to check (or tune) IRQ affinity and isolation for, e.g. 0-3,8"
STATE_HELP = "where tune records the original values (default ~/.cache/omni/host-tune.json)"


def _slot_cpus(cpus: str | None, spec: Path | None, root: Path) -> list[int] | None:
    """--cpus, or every CPU the spec's slots own on this host (--spec)."""
    from omni.cpulist import parse_cpulist

    if cpus and spec:
        raise OmniError("give --cpus or --spec, not both")
    if cpus:
        return parse_cpulist(cpus)
    if spec is None:
        return None
    from omni.run.plan import sweep_slots
    from omni.spec import load_spec

    return sorted({cpu for slot in sweep_slots(load_spec(spec), root) for cpu in slot.owned})


@host_app.command("check")
def host_check(
    cpus: str | None = typer.Option(None, "--cpus", help=CPUS_HELP),
    spec: Path | None = typer.Option(
        None, "--spec", exists=True, dir_okay=False, help="take the CPUs of this spec's slots"
    ),
    as_json: bool = typer.Option(False, "--json", help="the conditions as one JSON list"),
    sample: float = typer.Option(
        0.0, "--sample", min=0, max=60, help="seconds to sample steal time over (0: since boot)"
    ),
    sysfs_root: Path = sysfs_option("read sys/ and proc/ under this root (a fixture of another host)"),
) -> None:
    """Every condition: what omni saw, ok / warn / info / unknown, and for a
    warning why it matters and the command that fixes it. Exits 0 with warnings."""
    from omni.host.conditions import check, describe

    conditions = check(sysfs_root, _slot_cpus(cpus, spec, sysfs_root), sample)
    if as_json:
        print(json.dumps([asdict(c) for c in conditions], indent=1))
        return
    show("\n".join(describe(c) for c in conditions))


@host_app.command("tune")
def host_tune(
    cpus: str | None = typer.Option(None, "--cpus", help=CPUS_HELP + "; IRQs are moved off them"),
    spec: Path | None = typer.Option(
        None, "--spec", exists=True, dir_okay=False, help="take the CPUs of this spec's slots"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would be written; write nothing"),
    state: Path | None = typer.Option(None, "--state", help=STATE_HELP),
    sysfs_root: Path = sysfs_option("tune the files under this root (a fixture of another host)"),
) -> None:
    """As root: governor performance and minimum frequency at maximum, boost
    off, NUMA balancing off, KSM off, THP defrag 'defer', perf sampling rate 1,
    full ASLR, and IRQs off --cpus. Records the old values first; undo with
    omni host reset."""
    from omni.host.tuning import default_state_path, describe_changes, tune

    changes = tune(sysfs_root, _slot_cpus(cpus, spec, sysfs_root), state, dry_run)
    lines = describe_changes(changes)
    if dry_run:
        show("\n".join(["would write:", *lines]) if lines else "nothing to change")
        return
    show("\n".join(lines) if lines else "nothing to change: already tuned")
    if any(not c.error for c in changes):
        show(f"original values kept in {state or default_state_path()}: omni host reset restores them")


@host_app.command("reset")
def host_reset(
    state: Path | None = typer.Option(None, "--state", help=STATE_HELP),
    sysfs_root: Path = sysfs_option("reset the files under this root (a fixture of another host)"),
) -> None:
    """Write back every value omni host tune changed, and remove its state file."""
    from omni.host.tuning import default_state_path, describe_changes, reset

    changes = reset(sysfs_root, state)
    where = state or default_state_path()
    show(
        "\n".join(describe_changes(changes))
        or f"nothing to reset: no values recorded in {where} (omni host tune writes them)"
    )
    failed = [c for c in changes if c.error]
    if failed:
        raise OmniError(f"{len(failed)} value(s) not restored; they stay recorded: run omni host reset again as root")


@host_app.command("limits")
def host_limits(
    cpus: str | None = typer.Option(None, "--cpus", help="the slot's CPUs (default: every CPU of --node)"),
    node: int | None = typer.Option(None, "--node", min=0, help="the memory node (default: the node of the CPUs)"),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="threads, as the engine runs (default: one per CPU)"
    ),
    python: Path | None = typer.Option(
        None, "--python", exists=True, dir_okay=False, help="an engine env's python with torch, for the matmul peaks"
    ),
    refresh: bool = typer.Option(False, "--refresh", help="measure again even when a fresh record is stored"),
    busy_wait: float = typer.Option(
        30.0, "--busy-wait", min=0, help="seconds to wait for busy slot CPUs to calm down, then refuse"
    ),
    as_json: bool = typer.Option(False, "--json", help="the record as JSON"),
) -> None:
    """The slot's limits, measured inside its binding: read bandwidth from its
    node (and every other node with memory), its last-level cache's, and peak
    matmul per dtype through torch. Stored per host; sweeps judge runs against them."""
    from omni import REPO_ROOT
    from omni.host.limits import ensure_limits, measure_limits, store_limits, torch_python
    from omni.report.limits import describe_limits

    binding = _binding(cpus, node, threads)
    python = python or torch_python(REPO_ROOT)
    if refresh:
        record = measure_limits(binding, python, busy_wait_s=busy_wait)
        store_limits(record)
    else:
        record, _ = ensure_limits(binding, python, busy_wait_s=busy_wait)
    show(json.dumps(record, indent=1, sort_keys=True) if as_json else describe_limits(record))


def _binding(cpus: str | None, node: int | None, threads: int | None):
    from omni.cpulist import parse_cpulist
    from omni.host.limits import Binding, memory_nodes, require_memory
    from omni.host.topology import read_topology

    topology = read_topology()
    if node is not None:
        require_memory(node, memory_nodes())
    if cpus:
        chosen = tuple(parse_cpulist(cpus))
        unknown = sorted(set(chosen) - set(topology.online))
        if unknown:
            raise OmniError(
                f"--cpus {cpus}: CPU(s) {unknown} are not online on this host (online: {list(topology.online)})"
            )
    else:
        home = node if node is not None else next((n.id for n in topology.nodes.values() if n.cpus), 0)
        chosen = topology.nodes[home].cpus if home in topology.nodes else ()
        if not chosen:
            raise OmniError(
                f"node {home} has no CPUs: give the slot's CPUs with --cpus (they read its memory remotely)"
            )
    nodes = {topology.node_of(c) for c in chosen}
    if node is None:
        if len(nodes) != 1:
            raise OmniError(f"--cpus {cpus} spans nodes {sorted(nodes)}: give --node for the memory to bind")
        node = nodes.pop()
    if threads is not None and threads > len(chosen):
        raise OmniError(f"--threads {threads} is more than the {len(chosen)} CPU(s) of the slot")
    return Binding(chosen, node, threads or len(chosen))
