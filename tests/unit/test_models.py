"""The model factory's pure parts: draws that do not depend on how they are
sliced, KV bytes per token, and which GGUFs a preset is made with."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

from omni.envs import resources
from omni.models import factory as models
from omni.models.factory import PRESETS


def test_a_matrix_drawn_in_slices_holds_the_values_of_one_draw(monkeypatch):
    whole = models.hf_tensors(PRESETS["tiny-llama"])
    monkeypatch.setattr(models, "DRAW_VALUES", 1000)  # 3 rows of 256 at a time
    sliced = models.hf_tensors(PRESETS["tiny-llama"])
    assert list(whole) == list(sliced)
    assert all(np.array_equal(whole[name], sliced[name]) for name in whole)


def test_kv_bytes_per_token_are_k_and_v_of_every_layer_in_bf16():
    assert PRESETS["tiny-llama"].kv_bytes_per_token == 2 * 4 * 2 * 64 * 2
    assert PRESETS["llama-3.2-1b-shape"].kv_bytes_per_token == 32 * 1024
    assert PRESETS["llama-3.1-8b-shape"].kv_bytes_per_token == 128 * 1024


def test_realistic_shapes_make_the_ggufs_asked_for_and_tiny_llama_all_at_once(tmp_path, monkeypatch):
    calls = []

    def run(argv, **_):
        calls.append(argv[3:])
        out = Path(argv[4])  # python -m omni.models.factory PRESET OUT [TYPE ...]
        out.mkdir(parents=True, exist_ok=True)
        made = {kind: {"file": f"{argv[3]}-{kind}.gguf", "sha256": kind} for kind in argv[5:]}
        (out / "manifest.json").write_text(json.dumps({"gguf": made, "hf_sha256": "h"}))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(resources, "ensure_env", lambda *_: type("Env", (), {"python": "py"}))
    monkeypatch.setattr(resources.subprocess, "run", run)
    for preset in ("tiny-llama", "llama-3.2-1b-shape"):
        resources.make_model(tmp_path, preset, tmp_path / preset, gguf=("q4_0",))
    resources.make_model(tmp_path, "llama-3.2-1b-shape", tmp_path / "llama-3.2-1b-shape", gguf=("q4_0",))
    # tiny-llama's one call makes every type; the 1B shape's the one asked, once
    assert calls == [
        ["tiny-llama", str(tmp_path / "tiny-llama")],
        ["llama-3.2-1b-shape", str(tmp_path / "llama-3.2-1b-shape"), "q4_0"],
    ]
