"""omni's Prefect side: the sweep flows and their tasks, the fleet's shard flow
and worker, the temporary API server and the deployments served from one
process. Layer: flows, above omni's sweep layer; Prefect is imported here and
in the fleet's reads of its hosts (omni.PREFECT) only.
"""
