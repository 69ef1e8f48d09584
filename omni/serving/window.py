"""A serving level's steady window: the requests its figures are over.

From the level's first completion to its last request's start: before it
the server fills from empty (a closed loop's first wave starts at once and
prefills together), after it the offered load has stopped and the last
requests drain beside ever fewer neighbours. How many requests the client
sends so that a level's count remains inside it is
:func:`omni.serving.levels.requests_to_send`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """A level's steady part, in seconds from its first request: from its
    first completion (``start_s``) to its last request's start (``end_s``).
    None where the level has no completion or no start."""

    start_s: float | None
    end_s: float | None

    @property
    def duration_s(self) -> float | None:
        """Its length; None when it is empty (no completion before the last start)."""
        if self.start_s is None or self.end_s is None or self.end_s <= self.start_s:
            return None
        return self.end_s - self.start_s

    def holds(self, request: Mapping) -> bool:
        """The request is one of the level's measured ones: a failure wherever
        it happened (a failed request is never left out), a success that
        started at or after the window's start and ended by its end."""
        if not request["ok"]:
            return True
        if self.duration_s is None or request["start_s"] is None:
            return False
        return request["start_s"] >= self.start_s and _end(request) <= self.end_s

    def arrived(self, request: Mapping) -> bool:
        """The request was sent inside the window: the arrivals its sent rate is over."""
        start = request["start_s"]
        return self.duration_s is not None and start is not None and self.start_s <= start <= self.end_s

    def completed(self, request: Mapping) -> bool:
        """A success that ended inside the window (after its first completion):
        an event of the level's steady completion rate."""
        return (
            self.duration_s is not None
            and request["ok"]
            and request["start_s"] is not None
            and self.start_s < _end(request) <= self.end_s
        )


def _end(request: Mapping) -> float:
    return request["start_s"] + request["e2e_ms"] / 1e3


def steady_window(requests: Sequence[Mapping]) -> Window:
    """The window between the level's first completion and its last start.

    Closed loop (c in flight): the first c requests start together, before
    any completion, and prefill side by side; at the last start c requests
    are in flight, the last of them beside ever fewer. Both are out: c
    each, 2c at most (no more than c are ever in flight). Open loop: the
    arrivals before the first completion met an empty server, and the
    requests in flight at the last arrival finished after the offered load
    stopped. A request still in flight at the last start is more often a
    long one (it is in flight longer), so with drawn lengths
    (``range_ratio`` > 0) the window leans to shorter requests by those few;
    with the arm's fixed lengths they are all of one length."""
    ends = [_end(r) for r in requests if r["ok"] and r["start_s"] is not None]
    starts = [r["start_s"] for r in requests if r["start_s"] is not None]
    return Window(min(ends, default=None), max(starts, default=None))
