"""The failure reason a row records, read from an engine's last words."""

from __future__ import annotations


def test_failure_reason_names_the_root_cause():
    from omni.run.engine_process import failure_reason

    tail = [
        "(EngineCore) ERROR [core.py] ValueError: No available memory for the cache blocks.",
        "Traceback (most recent call last):",
        "RuntimeError: Engine core initialization failed.",
        "UserWarning: resource_tracker: leaked",
    ]
    assert (
        failure_reason(tail)
        == "ValueError: No available memory for the cache blocks. ... RuntimeError: Engine core initialization failed."
    )
    assert failure_reason(["plain last words"]) == "plain last words"
