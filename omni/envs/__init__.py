"""Engine environments and what an arm needs before it runs: one venv per
engine build, built on demand (``build``), and an arm's env and model
resolved or made (``resources``). Layer: system.
"""
