"""A sweep's conclusions and how they read: per-arm summaries and verdicts
against the baseline (``summary``; one verdict ``verdicts``, VOID arms
``void``, two states and swings ``states``, provenance ``provenance``, the
spec copy's baseline and margins ``spec_copy``, stored ops ``ops``),
Markdown and JSON (``markdown``), across sweeps in
Markdown (``across``) and the self-contained HTML report (``html``).
Numbers for people (``units``) is the facts layer; the rest is the sweep
layer: it reads the store and the statistics.
"""
