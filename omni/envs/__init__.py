"""Engine environments and what an arm needs before it runs: one venv per
engine build, built on demand (``build``), what the machine holds and what
nothing needs (``inventory``), releases and commits to follow or walk
(``releases``), and an arm's env and model resolved or made
(``resources``). What each env is, is declared as data (omni.spec.envs).
Layer: system.
"""
