"""Releases on the package index and commits of a llama.cpp tree: what an
env following the newest release resolves to, and the ordered versions a
bisect walks.

The index is asked through pip (``pip index versions``), so it is the index
this machine's pip is configured with (a mirror, extra indexes), and
pre-releases are left out as pip leaves them out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

from packaging.version import InvalidVersion, Version

from omni.errors import OmniError
from omni.spec.envs import EnvSpec


@cache
def index_versions(package: str) -> tuple[str, ...]:
    """Every release of ``package`` on the index, oldest first (asked once per process:
    a sweep's envs resolve against one answer)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        raise OmniError(f"the package index did not answer for {package!r} within 180 s") from None
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not found:
        tail = [line for line in (done.stderr or done.stdout).strip().splitlines() if "is ignored" not in line]
        said = tail[-1] if tail else "no output"
        raise OmniError(
            f"pip could not list the releases of {package!r} on this machine's package index "
            f"(a name it does not know, or an index it cannot reach): {said}"
        )
    return tuple(sorted((v.strip() for v in found[1].split(",")), key=Version))


def newest_release(package: str) -> str:
    return index_versions(package)[-1]


def resolve(spec: EnvSpec) -> EnvSpec:
    """``spec`` with its ``newest`` package pinned at the index's newest release."""
    return spec.pinned(spec.newest, newest_release(spec.newest)) if spec.newest else spec


def releases_between(package: str, first: str, last: str) -> list[str]:
    """The index's releases from ``first`` to ``last``, both included, in order."""
    try:
        lo, hi = Version(first), Version(last)
    except InvalidVersion as err:
        raise OmniError(f"{err}: give releases as the index spells them, e.g. 0.28.0") from None
    if hi <= lo:
        raise OmniError(f"the range {first}..{last} is empty: give the older release first")
    known = index_versions(package)
    missing = [v for v in (first, last) if v not in known]
    if missing:
        raise OmniError(f"{package} {' and '.join(missing)} not on the index (its releases: {', '.join(known)})")
    return [v for v in known if lo <= Version(v) <= hi]


def commits_between(repo: Path | str, first: str, last: str) -> list[str]:
    """The commits of a git tree from ``first`` to ``last``, both included,
    oldest first, along the first-parent line (a merge is one step). The
    tree is a local checkout: a URL is cloned by the env's build, not here."""
    if "://" in str(repo) or str(repo).startswith("git@"):
        raise OmniError(
            f"--commits reads the commits from a local checkout; the env's source is {repo}: clone it and "
            "declare the checkout's path as source.repo"
        )

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise OmniError(f"git {' '.join(args)} in {repo}: {done.stderr.strip()}")
        return done.stdout.strip()

    lo, hi = git("rev-parse", f"{first}^{{commit}}"), git("rev-parse", f"{last}^{{commit}}")
    ancestor = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", lo, hi]).returncode == 0
    path = git("rev-list", "--first-parent", "--reverse", f"{lo}..{hi}").split()
    if lo == hi:
        raise OmniError(f"{first} and {last} are the same commit: give two, the older first")
    if not ancestor or not path:
        raise OmniError(f"{last} is not a descendant of {first} in {repo}: give the older commit first")
    return [lo, *path]
