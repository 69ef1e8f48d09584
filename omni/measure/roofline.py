"""A run against its slot's roofs: which roof binds each phase and what share of it the run reached.

The roofline model (Williams, Waterman and Patterson, "Roofline", CACM
2009): a phase doing F FLOPs per byte moved (its arithmetic intensity) can
reach at most min(compute peak, F x bandwidth). The bandwidth is the
cache's when the phase's working set (:attr:`Traffic.decode_step_bytes`:
what one step of the whole batch reads) fits in the slot's last-level
cache, else DRAM's from the slot's node. The roofs are the slot's measured
limits (:mod:`omni.host.limits`), never a datasheet's; the compute peak is
the one of the dtype the model's matmuls run in
(:func:`omni.measure.traffic.compute_dtype`).

The share is the achieved rate over the attainable one: for a memory-bound
decode, (bytes per token x tokens/s) / bandwidth, the "model bandwidth
utilization" of practitioners. A share above 1 is not a number to trust: the
row is flagged and the note names the assumption that broke.

Facts layer: numbers in, a dict of row columns out.
"""

from __future__ import annotations

import math

from omni.measure.traffic import Traffic

# a share this far above 1 is a broken assumption, not measurement noise
EXCEEDED = 1.0
ROOF_EXCEEDED = "roof_exceeded"


def roof(limits: dict, figure: str) -> float | None:
    """A measured figure's roof: the best rate its repeats confirmed (:func:`omni.host.limits.confirmed_best`)."""
    entry = limits.get("figures", {}).get(figure) or {}
    value = entry.get("roof")
    return float(value) if value else None


# the matmuls that can do a dtype's work: an engine may always widen (ggml runs bf16 as fp32 FMAs
# on a CPU without AVX-512 BF16, where torch's bf16 matmul is slower than its fp32 one)
WIDER = {"int8": ("int8", "bf16", "fp32"), "bf16": ("bf16", "fp32"), "fp32": ("fp32",)}


def compute_roof(limits: dict, compute_dtype: str) -> float | None:
    """The best measured matmul rate among the dtypes that can do ``compute_dtype``'s work."""
    rates = [r for d in WIDER.get(compute_dtype, (compute_dtype,)) if (r := roof(limits, f"matmul_{d}"))]
    return max(rates) if rates else None


def phase_roof(
    intensity: float,
    working_set: float,
    dram: float | None,
    cache: float | None,
    llc: int | None,
    compute: float | None,
) -> tuple[str | None, float | None]:
    """(the roof that binds, the attainable FLOP/s) of a phase."""
    memory_name, memory = ("cache", cache) if cache and llc and working_set <= llc else ("dram", dram)
    attainable = {}
    if memory:
        attainable[memory_name] = intensity * memory
    if compute:
        attainable["compute"] = compute
    if not attainable:
        return None, None
    binds = min(attainable, key=attainable.__getitem__)
    return binds, attainable[binds]


def roof_columns(
    traffic: Traffic, limits: dict, compute_dtype: str, prefill_tok_s: float | None, decode_tok_s: float | None
) -> tuple[dict, list[str]]:
    """The row's roof columns and the findings to warn about (shares above 1)."""
    dram, cache = roof(limits, "dram_read"), roof(limits, "cache_read")
    compute = compute_roof(limits, compute_dtype)
    llc = (limits.get("figures", {}).get("cache_read") or {}).get("llc_bytes")
    cols = {
        "decode_bytes_per_token": traffic.decode_bytes_per_token,
        "decode_working_set_bytes": traffic.decode_step_bytes,
        "decode_flops_per_token": traffic.decode_flops_per_token,
        "prefill_bytes_per_token": traffic.prefill_bytes_per_token,
        "prefill_flops_per_token": traffic.prefill_flops_per_token,
        "roof_limits_key": limits.get("key"),
        "roof_dram_bytes_s": dram,
        "roof_cache_bytes_s": cache,
        "roof_llc_bytes": llc,
        "roof_compute_flop_s": compute,
        "roof_compute_dtype": compute_dtype,
    }
    findings = []
    phases = (
        ("decode", traffic.decode_intensity, traffic.decode_flops_per_token, decode_tok_s),
        ("prefill", traffic.prefill_intensity, traffic.prefill_flops_per_token, prefill_tok_s),
    )
    for phase, intensity, flops, rate in phases:
        binds, attainable = phase_roof(intensity, traffic.decode_step_bytes, dram, cache, llc, compute)
        cols[f"{phase}_roof"] = binds
        share = flops * rate / attainable if attainable and rate and math.isfinite(rate) else None
        cols[f"{phase}_roof_share"] = share
        if share is not None and share > EXCEEDED:
            findings.append(exceeded(phase, share, binds, traffic, llc))
    return cols, findings


def exceeded(phase: str, share: float, binds: str, traffic: Traffic, llc: int | None) -> str:
    """What a share above 1 says broke."""
    where = f"{phase} reached {share:.2f}x its {binds} roof"
    if binds == "dram" and llc and traffic.decode_step_bytes < 4 * llc:
        return (
            f"{where}: its working set ({traffic.decode_step_bytes / 2**20:.1f} MiB) is within 4x the "
            f"last-level cache ({llc / 2**20:.1f} MiB), so part of it is read from cache, not DRAM"
        )
    if binds == "compute":
        return (
            f"{where}: the engine's kernels beat the measured matmul peak (the probe's size or library is not theirs)"
        )
    return (
        f"{where}: the bytes model counts more than the engine reads (a weight it skips, a KV it does "
        "not reread), or the roof was measured under other conditions than the run"
    )
