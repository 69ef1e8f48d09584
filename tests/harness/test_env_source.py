"""An engine env whose llama.cpp programs come from a local git tree at a
commit (these machines reach no git host): cloned, checked out, built with
the env's cmake arguments, its commit recorded and listed; another commit is
another env. The tree here is a stand-in with llama.cpp's two targets, which
print their commit as llama.cpp's do."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from omni import REPO_ROOT
from omni.envs.build import ENV_CACHE_VAR, build_env, env_dir, read_stamp
from omni.envs.inventory import entry
from omni.spec.envs import SourceTree, spec_of

PROGRAM = r"""
#include <stdio.h>
int main(int argc, char **argv) {
    fprintf(stderr, "version: 1 (build 1, commit %s)\n", COMMIT);
    return 0;
}
"""
CMAKE = """
cmake_minimum_required(VERSION 3.14)
project(fake_llama C)
execute_process(COMMAND git rev-parse --short=7 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                OUTPUT_VARIABLE COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE)
foreach(tool llama-server llama-bench)
  add_executable(${tool} main.c)
  target_compile_definitions(${tool} PRIVATE COMMIT="${COMMIT}")
  set_target_properties(${tool} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endforeach()
"""


def git(tree, *args) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("cc"), reason="needs cmake and a C compiler")
def test_tools_build_from_a_local_tree_at_the_declared_commit(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE_VAR, "")
    tree = tmp_path / "llama.cpp"
    tree.mkdir()
    git(tree, "init", "-q")
    (tree / "main.c").write_text(PROGRAM)
    shas = []
    for i in range(2):
        (tree / "CMakeLists.txt").write_text(CMAKE + f"# revision {i}\n")
        git(tree, "add", ".")
        git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"r{i}")
        shas.append(git(tree, "rev-parse", "HEAD"))
    fields = {
        "engine": "llamacpp",
        "tools": ["llama-server", "llama-bench"],
        "tools_cmake": ["-DCMAKE_BUILD_TYPE=Release"],
    }
    spec = spec_of({**fields, "source": {"repo": str(tree), "commit": shas[0]}}, "test")
    assert spec.at_commit(shas[1]).key() != spec.key() and spec.at_commit(shas[0]) == spec
    name = f"test-source-{uuid.uuid4().hex[:8]}"
    try:
        info = build_env(REPO_ROOT, name, spec)
        assert info is not None and info.key == spec.key()
        stamp = read_stamp(REPO_ROOT, name)
        assert stamp["commit"] == shas[0]  # the first commit, not the tree's HEAD
        made = subprocess.run(
            [str(env_dir(REPO_ROOT, name) / "bin" / "llama-server"), "--version"], capture_output=True, text=True
        )
        assert f"commit {shas[0][:7]}" in made.stderr
        listed = entry(REPO_ROOT, name, spec)
        assert listed.state == "built" and listed.commit == shas[0] and listed.size_bytes > 0
        assert spec.source == SourceTree(str(tree), shas[0])
    finally:
        shutil.rmtree(env_dir(REPO_ROOT, name), ignore_errors=True)
        (REPO_ROOT / ".venvs" / f"{name}.build.log").unlink(missing_ok=True)
