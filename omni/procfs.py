"""Reading one file of every process under /proc, the one loop omni needs twice
(the sampler's parent map, the reaper's environment scan) and tests once more."""

from __future__ import annotations

import os
from collections.abc import Iterator


def read_all(name: str) -> Iterator[tuple[int, bytes]]:
    """``(pid, contents of /proc/PID/<name>)`` for every process still readable.

    A process can exit between listing and reading: it is skipped, not an error.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{name}", "rb") as f:
                yield int(entry), f.read()
        except OSError:
            continue
