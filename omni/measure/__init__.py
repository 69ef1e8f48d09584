"""Measurement from outside the engine: what a run's process tree used and
did, and what its own timings and traces say.

Sampling a whole process tree while it runs (``sampler``: the loop, the tree
walk and the ``Source`` interface; ``sources``: which, in order), one module
per thing sampled (``memory``, ``numa_pages``, ``binding``, ``interference``,
``switches``, ``rapl``; system layer), a serving level's load generator
(``client_cpus``, system: the same accounting on its CPUs), reading ``/proc`` (``procfs``, system), and the parsers and
rules over what was read (facts layer): memory policy and page locality
(``mempolicy``), per-iteration timings (``iterations``), per-op profiles
(``ops``), the output head (``heads``), a run's audits of itself (``audit``)
and the KV needed against allocated (``kv``).
"""
