"""``omni simulate``: the error rate of every rule omni states, simulated with
omni's own decision code (omni.stats.simulation), printed beside the stated rate;
``omni.cli.main`` adds it to the ``omni`` command."""

from __future__ import annotations

import typer

from omni.cli.console import show


def simulate(
    draws: int = typer.Option(
        4000, min=100, max=1_000_000, help="simulated sweeps per row (4000: a 1.33 % rate to +-0.18 %)"
    ),
    seed: int = typer.Option(20261204, min=0, max=2**63 - 1, help="the seed; each row draws from its own stream of it"),
    quick: bool = typer.Option(False, "--quick", help="only the rows make test-fast checks"),
) -> None:
    """Print each rule's stated and simulated error rate (docs/statistics.md holds the table);
    exit 1 when a rate is off its stated side by more than four Monte Carlo standard errors."""
    from omni.stats.simulation import rows_markdown
    from omni.stats.simulation import simulate as run

    rows = run(draws, seed, quick)
    show(rows_markdown(rows))
    if not all(row.holds for row in rows):
        raise typer.Exit(1)
