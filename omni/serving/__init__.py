"""Serving arms: the engine as a server in its slot under load.

A load level's flags and figures (``levels``), the SLO's verdict and a
run's capacity (``slo``), the capacity search's next level (``search``), what the server reports (``server_metrics``),
the steady window a level's figures are over (``window``), all
facts layer; one serving run, its server, its pinned load generator and its
``/metrics`` (``run``, run layer); the per-level verdicts and capacity of a
sweep's serving arms (``summary``, sweep layer). What runs inside the engine
env (vLLM's server, ``vllm bench serve``) is in :mod:`omni.engines`.
"""
