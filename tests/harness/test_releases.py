"""The nightly's check of the newest release against the pinned one, in one
sweep: an arm whose env follows the newest release and is slower than the
baseline beyond min_effect is a regression naming the release it ran.

Chance of failing: decode comes from 20 ms sleeps (0.02-0.1 % between runs
here) and the planted change is 30 % against a 5 % margin; a "worse" verdict
missed, or one called on the unchanged metric, is far below 1 in 10,000."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from omni.history import compare
from omni.spec import envs as env_decls
from omni.sweep.execute import run_sweep_items
from omni.sweep.prepare import prepare_sweep
from omni.sweep.request import SweepRequest


@pytest.mark.slow
def test_a_slower_newest_release_is_a_regression_naming_its_release(tmp_path, monkeypatch):
    params = {"step_sleep_ms": 20, "work_per_token": 0, "prefill_work_per_token": 0, "iterations": 3}
    arm = {"engine": "synthetic", "max_tokens": 12, "params": params}
    spec = {
        "name": "releases",
        "passes": 3,
        "primary_metrics": ["decode_tok_s"],
        "envs": {
            "syn-pinned": {"engine": "synthetic"},
            "syn-newest": {"engine": "synthetic", "vars": {"OMNI_SYNTHETIC_SLOWDOWN": "1.3"}},
        },
        "arms": [
            {**arm, "name": "pinned", "engine_env": "syn-pinned"},
            {**arm, "name": "newest", "engine_env": "syn-newest"},
        ],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(spec))))  # no shared objects: no YAML anchors
    prepared = prepare_sweep(SweepRequest(spec=path, results=tmp_path / "results", force=True))
    run_sweep_items(prepared)
    # a synthetic env has no package to follow: the newest: mark is set on the declaration read back
    real = env_decls.declared_envs

    def marked(repo_root, spec_envs=None):
        declared = real(repo_root, spec_envs)
        newest = dataclasses.replace(declared.envs["syn-newest"], newest="omni-synthetic")
        return dataclasses.replace(declared, envs={**declared.envs, "syn-newest": newest})

    monkeypatch.setattr(env_decls, "declared_envs", marked)
    (change,) = compare.release_regressions(tmp_path / "results", prepared.sweep_id)
    assert (change.arm, change.metric, change.baseline) == ("newest", "decode_tok_s", "pinned")
    assert change.ci_high < 0.95 and "x0.7" in change.describe()
