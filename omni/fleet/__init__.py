"""Several hosts, one store: the stack that serves them (PostgreSQL, a Prefect
server, S3; ``stack``, system layer) and fleet sweeps' coordination: host
facts, liveness, choosing and checking hosts, reading the fleet through
Prefect's client (``hosts``, sweep layer). The Prefect worker a fleet host
runs is in :mod:`flows.worker`.
"""
