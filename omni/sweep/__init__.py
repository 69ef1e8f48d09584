"""A sweep as plain functions: the request, typed and checked once at each
boundary (``request``), preparing a sweep from it and previewing it
(``prepare``), running its items and tabulating the result (``execute``),
and bisecting a range of engine versions with sweeps as probes (``bisect``).
Layer: sweep; the Prefect flows are thin wrappers of these (:mod:`flows.sweep`).
"""
