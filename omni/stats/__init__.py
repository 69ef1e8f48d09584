"""Statistics: floats in, frozen dataclasses out; no I/O, no pandas, no Prefect.

Verdicts between arms (``verdicts``), their intervals (``intervals``),
percentile bounds (``quantiles``), medians over runs some of which are
only bounds (``censored``), passes that stop when the answer is known
(``sequential``), two states and runs that differ beyond their iterations
(``modes``, ``swing``) and level shifts (``changepoints``) are the facts
layer. The checks a sweep runs on itself (``controls``) and the simulation of
every stated error rate through omni's own decision code (``simulation``) sit
in the sweep layer.
"""
