"""Across sweeps: a sweep against another and nightly regressions
(``compare``), A/A noise and between-sweep drift stored per host
(``calibration``), and whether two sets of runs ran on the same hardware and
engine env (``hardware``, facts layer). The rest is the sweep layer: it reads
the store and the statistics.
"""
