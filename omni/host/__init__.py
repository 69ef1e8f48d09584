"""The host: what it is and what runs on it may use.

Its NUMA topology and slots (``topology``), the settings that move inference
numbers, read with verdicts (``conditions``, its readers ``cpu_conditions`` and
``memory_conditions``, what they share ``readings``) and tuned or reset (``tuning``),
where a run executes and the proof of its binding (``placement``, ``pin``),
and the provenance collectors that describe the host, the Python and the
checkout (``provenance``). Layer: system; modules import the engine side,
the facts and each other.
"""
