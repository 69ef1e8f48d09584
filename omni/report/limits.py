"""A slot's limits record (:mod:`omni.host.limits`) as text: one line per
figure, its roof (the best rate two repeats reached) with the median and
spread of its repeats and how it was measured."""

from __future__ import annotations

from omni.cpulist import format_cpulist

SCALES = {"B/s": (1e9, "GB/s"), "FLOP/s": (1e9, "GFLOP/s")}


def figure_line(name: str, figure: dict) -> str:
    if "error" in figure:
        return f"  {name:<18} not measured: {figure['error']}"
    scale, unit = SCALES.get(figure["unit"], (1.0, figure["unit"]))
    spread = f"median {figure['median'] / scale:.1f} [{figure['min'] / scale:.1f}-{figure['max'] / scale:.1f}]"
    sd = f", sd {100 * figure['rel_sd']:.1f} %" if figure.get("rel_sd") is not None else ""
    how = []
    if "memory_node" in figure:
        how.append(f"memory on node {figure['memory_node']}")
    if "buffer_bytes" in figure:
        how.append(f"{figure['buffer_bytes'] / 2**20:.0f} MiB buffer")
    if "llc_bytes" in figure:
        how.append(f"last-level cache {figure['llc_bytes'] / 2**20:.0f} MiB")
    how.append(figure.get("kernel") or f"{figure.get('library')} {figure.get('n')}^3")
    return (
        f"  {name:<18} {figure['roof'] / scale:9.1f} {unit:<8} {spread} over {len(figure['values'])} runs{sd}"
        f"  ({', '.join(how)})"
    )


def describe_limits(record: dict) -> str:
    binding = record["binding"]
    head = (
        f"limits of CPUs {format_cpulist(binding['cpus'])}, memory node {binding['node']}, "
        f"{binding['threads']} thread(s); measured {record['measured_at']} (record {record['key']})"
    )
    host = record["host"]
    lines = [head, f"  host: {host.get('cpu_model')}, kernel {host.get('kernel')}, tools {record['tools']}"]
    lines += [figure_line(name, figure) for name, figure in record["figures"].items()]
    if record.get("matmul") != "measured":
        lines.append(f"  matmul: {record.get('matmul')}")
    return "\n".join(lines)
