"""omni's folder in the user's cache: ``$XDG_CACHE_HOME/omni`` (default
``~/.cache/omni``), where what belongs to this machine and user is kept
(engine files of s3:// runs, a slot's limits, host tune's saved values)."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache(name: str, override_var: str | None = None) -> Path:
    """``<cache>/omni/<name>``, or the path ``$override_var`` names when set."""
    if override_var and os.environ.get(override_var):
        return Path(os.environ[override_var])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "omni" / name
