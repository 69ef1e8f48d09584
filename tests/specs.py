"""Spec files for the synthetic engine, written where a test wants them."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_spec(tmp_path: Path, arms: list[dict], **sweep) -> Path:
    # other jobs on a shared CI host must not refuse runs here; test_busy_* sets its own
    spec = {"name": "t", "passes": 1, "seed": 3, "timeout_s": 60, "busy_threshold_pct": 100, **sweep, "arms": arms}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def synthetic(name: str, **params) -> dict:
    """An arm of the synthetic engine: 16 prompt tokens, 8 decoded, a little work per token."""
    return {
        "name": name,
        "engine": "synthetic",
        "prompt_len": 16,
        "max_tokens": 8,
        "params": {"work_per_token": 2000, **params},
    }


def failing_spec(tmp_path: Path) -> Path:
    """One pass of a good arm and one whose engine crashes: a sweep with a failed run."""
    path = tmp_path / "failing.yaml"
    arms = [
        {"name": "good", "engine": "synthetic", "params": {"mem_mb": 8}},
        {"name": "bad", "engine": "synthetic", "params": {"crash": True}},
    ]
    path.write_text(yaml.safe_dump({"name": "failing", "passes": 1, "timeout_s": 60, "arms": arms}))
    return path
