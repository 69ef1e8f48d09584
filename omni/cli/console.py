"""Where the ``omni`` command prints: stdout for results, stderr for
warnings and the live progress of a sweep's runs."""

from __future__ import annotations

import threading

from rich.console import Console

out = Console()
err = Console(stderr=True)


def show(text: str, console: Console = out) -> None:
    """Print a renderer's text as it is: no markup, no highlighting, no
    wrapping by rich (the terminal wraps a long line; nothing is cut)."""
    if text:
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def watch_progress(planned: int, slots: int, done: threading.Event) -> None:
    """Per slot, the current run's arm, pass, phase and time; runs done of
    planned and an ETA, redrawn twice a second (omni.run.progress)."""
    from rich.live import Live
    from rich.text import Text

    from omni.run.progress import BOARD, describe

    with Live(console=err, transient=True, refresh_per_second=4) as live:
        while not done.wait(0.5):
            live.update(Text("\n".join(describe(*BOARD.snapshot(), planned, slots))))


def with_progress(prepared, show: bool, call) -> dict:
    """``call()`` (the flow) with the live progress of its runs drawn meanwhile."""
    from omni.run.progress import BOARD

    BOARD.reset()
    done = threading.Event()
    watcher = threading.Thread(
        target=watch_progress, args=(len(prepared.items), len(prepared.slots), done), daemon=True
    )
    if show:
        watcher.start()
    try:
        return call()
    finally:
        done.set()
        if show:
            watcher.join()
