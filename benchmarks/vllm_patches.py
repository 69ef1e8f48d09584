"""The vLLM plugin's patches, measured side by side in one run.

Warm-start seconds (``load_s``: LLM() construction, compile or artifact load
included) for eager, compiled without the AOT patch and compiled with it,
after one compiled cold start has written the artifact; and the memory
patches' effect: RssAnon after load without and with
``release_memory_after_load``, and the KV bytes allocated under
``VLLM_CPU_KVCACHE_SPACE=1`` without and with ``explicit_kv_cache_memory``.
Target: patched warm start <= 1.1 x eager start.

    .venv/bin/python benchmarks/vllm_patches.py [--passes 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import yaml

from omni.sweep.execute import run_and_store
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest
from omni.vllm_plugin.patch import RETAINING_MALLOC

BASE = {
    "engine": "vllm",
    "model": "tiny-llama",
    "context_len": 192,
    "prompt_len": 64,
    "max_tokens": 8,
    "batch_size": 2,
    "kv_cache_bytes": 256 << 20,
    "patches": "none",
}  # stock unless an arm asks


def sweep(work: Path, name: str, arms: list[dict], passes: int) -> list[dict]:
    spec = work / f"{name}.yaml"
    data = {"name": name, "passes": passes, "seed": 11, "timeout_s": 900, "arms": arms}
    spec.write_text(yaml.safe_dump(json.loads(json.dumps(data))))  # no shared objects: no YAML anchors
    prepared = prepare_sweep(SweepRequest(spec=spec, results=work / "results", force=True))
    rows = []
    for item in prepared.items:
        row = run_and_store(prepared.context, item)
        if row["status"] != "ok":
            raise SystemExit(f"{item.arm.name}: {row['error']}")
        print(
            f"  {item.arm.name:<16} load {row['load_s']:6.1f} s  after-load RssAnon {row['rss_anon_after_load_mb']:7.1f} MB"
            f"  KV {row['kv_cache_bytes_effective'] / 2**20:6.0f} MiB",
            flush=True,
        )
        rows.append(row)
    return rows


def median_of(rows: list[dict], arm: str, metric: str) -> float:
    return statistics.median(r[metric] for r in rows if r["arm"] == arm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-patches-"))
    compiled = {**BASE, "compile_mode": "compiled", "env": {"VLLM_CACHE_ROOT": str(work / "vllm-cache")}}
    print("cold compiled start (writes the AOT artifact):")
    sweep(work, "cold", [{**compiled, "name": "cold"}], 1)
    kv_env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    # cpu_int4 frees its bf16 temporaries while loading; glibc pinned in its retaining state
    int4 = {
        **BASE,
        "compile_mode": "eager",
        "quantization": "cpu_int4",
        "params": {"int4_group_size": 32},
        "env": RETAINING_MALLOC,
    }
    arms = [
        {**BASE, "name": "eager", "compile_mode": "eager"},
        {**compiled, "name": "compiled-stock"},
        {**compiled, "name": "compiled-aot", "patches": ["aot_compile_cache_load"]},
        {**int4, "name": "int4-stock"},
        {**int4, "name": "int4-trim", "patches": ["release_memory_after_load"]},
        {**BASE, "name": "kv-stock", "compile_mode": "eager", "env": kv_env},
        {
            **BASE,
            "name": "kv-explicit",
            "compile_mode": "eager",
            "env": kv_env,
            "patches": ["explicit_kv_cache_memory"],
        },
    ]
    print(f"warm starts and memory levers, {args.passes} interleaved passes:")
    rows = sweep(work, "warm", arms, args.passes)
    eager = median_of(rows, "eager", "load_s")
    stock, aot = median_of(rows, "compiled-stock", "load_s"), median_of(rows, "compiled-aot", "load_s")
    print(f"warm start: eager {eager:.1f} s, compiled unpatched {stock:.1f} s, compiled patched {aot:.1f} s")
    print(
        f"patched warm start / eager start = {aot / eager:.2f} (target <= 1.1); unpatched / eager = {stock / eager:.2f}"
    )
    trim = median_of(rows, "int4-trim", "rss_anon_after_load_mb") - median_of(
        rows, "int4-stock", "rss_anon_after_load_mb"
    )
    print(f"release_memory_after_load (cpu_int4, retaining malloc): RssAnon after load {trim:+.1f} MB")
    kv_stock, kv_explicit = (
        median_of(rows, "kv-stock", "kv_cache_bytes_effective"),
        median_of(rows, "kv-explicit", "kv_cache_bytes_effective"),
    )
    steady = median_of(rows, "kv-explicit", "rss_anon_steady_mb") - median_of(rows, "kv-stock", "rss_anon_steady_mb")
    print(
        f"explicit_kv_cache_memory: KV {kv_stock / 2**20:.0f} MiB -> {kv_explicit / 2**20:.0f} MiB (arm asked 256), steady RssAnon {steady:+.1f} MB"
    )


if __name__ == "__main__":
    main()
