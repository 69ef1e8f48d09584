"""Is a memory comparison like for like? The KV an arm needs against what it
allocated, and how two arms were provisioned.

Both engines allocate their whole KV pool at start and write it (vLLM CPU
zero-fills its cache tensors, llama.cpp clears its KV buffer), so every byte
of the pool is resident anonymous memory whether the workload uses it or not.
A memory figure then measures the pool as much as the arm: vLLM's default
4 GiB pool (``VLLM_CPU_KVCACHE_SPACE``) against llama.cpp's context of a few
MiB is a comparison of two settings, not of two engines. So a memory verdict
needs both arms' pools near their need, and both arms provisioned alike: the
same engine (their runtimes and weight layouts differ), the same mmap mode
(mapped weights are file pages, not RssAnon; vLLM's weights are always
anonymous), and the same pool-to-need ratio.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Pool over need above which an arm's memory counts KV its workload never uses.
# Rounding alone stays below it: vLLM allocates whole blocks (a sequence of
# context_len tokens rounds up by less than one block), llama.cpp pads its
# context to 256 cells; either at most doubles a need of one block or more.
OVER_FACTOR = 2.0
# Two arms whose pool-to-need ratios differ by more than this carry different
# amounts of unused KV relative to what they use. Arms of one workload round
# alike (equal ratios); across lengths rounding moves a ratio by less than
# this at the lengths of arms/ (llama.cpp pads 2176 cells to 2304: x1.06).
RATIO_TOLERANCE = 1.25
MIB = 1 << 20


@dataclass(frozen=True)
class Provisioning:
    """How one run was provisioned: what a memory comparison must hold equal."""

    engine: str | None
    mmap: bool | None  # None: the engine has no weights file (synthetic)
    kv_allocated: int | None  # B, kv_cache_bytes_effective
    kv_needed: int | None  # B, kv_cache_bytes_needed

    @property
    def ratio(self) -> float | None:
        if not self.kv_allocated or not self.kv_needed:
            return None
        return self.kv_allocated / self.kv_needed


def provisioning_of(row: dict) -> Provisioning:
    """A run row's provisioning. vLLM rows before v10 stored mmap null: its
    weights are anonymous memory, so they count as mmap False."""
    mmap = _known(row.get("mmap"))
    if mmap is None and row.get("engine") == "vllm":
        mmap = False
    return Provisioning(
        engine=_known(row.get("engine")),
        mmap=None if mmap is None else bool(mmap),
        kv_allocated=_known(row.get("kv_cache_bytes_effective")),
        kv_needed=_known(row.get("kv_cache_bytes_needed")),
    )


def _known(value):
    """None for a missing value, also pandas' NaN/NA (this module imports no pandas)."""
    if value is None:
        return None
    try:
        return None if value != value else value  # NaN is the one value unequal to itself
    except TypeError:  # pandas.NA refuses to be a bool
        return None


def kv_overprovisioned(needed: int | None, allocated: int | None, factor: float = OVER_FACTOR) -> str | None:
    """Why a run's KV pool is too big for its workload, naming the numbers, or None."""
    if not needed or not allocated or allocated <= factor * needed:
        return None
    return (
        f"KV pool {allocated / MIB:.1f} MiB for a need of {needed / MIB:.1f} MiB "
        f"(x{allocated / needed:.1f}, above x{factor:g}): its memory counts KV the workload never uses"
    )


def memory_refusal(base: Iterable[Provisioning], other: Iterable[Provisioning], base_arm: str, arm: str) -> str | None:
    """Why a memory verdict of ``arm`` against ``base_arm`` would not compare
    like with like (each given its runs' provisioning), or None when it would."""
    # pairs, not a dict: omni compare judges one arm against itself in another sweep
    runs = [(base_arm, list(base)), (arm, list(other))]
    for name, rows in runs:
        worst = max(rows, key=lambda p: p.ratio or 0.0, default=None)
        if worst is not None and (why := kv_overprovisioned(worst.kv_needed, worst.kv_allocated)):
            return f"{name}'s {why}; size kv_cache_bytes (vLLM) or context_len to the need"
    for fact, what in (("engine", "engines"), ("mmap", "mmap modes")):
        seen = [
            (name, sorted({str(getattr(p, fact)) for p in rows if getattr(p, fact) is not None})) for name, rows in runs
        ]
        if len({v for _, values in seen for v in values}) > 1:
            listed = "; ".join(f"{name}: {', '.join(values) or '?'}" for name, values in seen)
            return f"mixed {what} ({listed}): " + (
                "their memory holds different runtimes and weight layouts, not the arms' difference"
                if fact == "engine"
                else "mmap weights are file pages, not RssAnon"
            )
    ratios = [(name, [r for p in rows if (r := p.ratio) is not None]) for name, rows in runs]
    if all(r for _, r in ratios):
        low, high = min(min(r) for _, r in ratios), max(max(r) for _, r in ratios)
        if high > RATIO_TOLERANCE * low:
            listed = "; ".join(f"{name}: x{max(r):.2f}" for name, r in ratios)
            return (
                f"KV pools sized differently against their need ({listed}, apart by more than x{RATIO_TOLERANCE:g}): "
                "the difference in memory is partly unused KV; size both pools to their need"
            )
    return None
