"""CPU and node lists in the kernel's cpulist format (``0-3,8,10-14:2``), as a
parse/format pair.

Engine-safe: the standard library and :mod:`omni.errors` only, because the
synthetic engine reads its nodes with it inside an engine env.
"""

from __future__ import annotations

import re

from omni.errors import OmniError

_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_cpulist(text: str) -> list[int]:
    """Parse the kernel's cpulist format into sorted unique ints.

    ``"0-3,8,10-14:2"`` -> ``[0, 1, 2, 3, 8, 10, 12, 14]``; ``""`` -> ``[]``.
    The ``a-b:stride`` form is what ``cpuset(7)`` documents.
    """
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for part in text.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise OmniError(f"bad CPU list {text!r}: {part.strip()!r} is not N, N-M or N-M:STEP (write e.g. '0-3,8')")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if last < first or step < 1:
            raise OmniError(f"bad CPU list {text!r}: range {part.strip()!r} is empty")
        cpus.update(range(first, last + 1, step))
    return sorted(cpus)


def format_cpulist(cpus: list[int] | set[int]) -> str:
    """Format ints as the kernel's cpulist: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = cpu
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)
