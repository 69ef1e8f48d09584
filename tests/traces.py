"""``vllm bench serve --save-detailed`` results built by hand, for the
serving tests that read them."""

from __future__ import annotations


def trace(starts, latencies, out=16, errors=()):
    """A --save-detailed result of requests started at ``starts`` (s) taking
    ``latencies`` (s): a first token after a tenth of it, then ``out - 1``
    tokens evenly; a failed one (``errors``) has no times."""
    n = len(starts)
    return {
        "duration": max(s + lat for s, lat in zip(starts, latencies)),
        "errors": ["boom" if i in errors else "" for i in range(n)],
        "ttfts": [0.0 if i in errors else lat / 10 for i, lat in enumerate(latencies)],
        "latencies": [0.0 if i in errors else lat for i, lat in enumerate(latencies)],
        "output_lens": [0 if i in errors else out for i in range(n)],
        "input_lens": [128] * n,
        "itls": [[] if i in errors else [lat * 0.9 / (out - 1)] * (out - 1) for i, lat in enumerate(latencies)],
        "start_times": [100.0 + s for s in starts],
        "queue_times": [0.0] * n,
        "max_concurrent_requests": None,
    }
