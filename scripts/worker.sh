#!/usr/bin/env bash
# The coordinator host: make sure the process pool exists, register
# prefect.yaml's deployments (their working directory is this repository),
# serve the pool's default queue (sweep/manual, sweep/nightly). Fleet hosts run
# `omni worker --host NAME` instead, each on its own queue host-NAME: a worker
# polling every queue would take other hosts' runs.
# Needs PREFECT_API_URL. Used by the docker-compose worker and by hand. With
# AWS_ENDPOINT_URL (compose sets it), first makes the results bucket.
set -euo pipefail
cd "$(dirname "$0")/.."
POOL=${OMNI_POOL:-omni}
PREFECT=${PREFECT:-.venv/bin/prefect}
PYTHON=${PYTHON:-.venv/bin/python}
if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
  "$PYTHON" -c 'import os; from omni.fleet import stack; stack.create_bucket(stack.s3_settings(dict(os.environ)))'
fi
# waits for the API (a stack just started may refuse a request or two), then
# creates the pool unless it exists; says why and exits 1 when it cannot
"$PYTHON" -m flows.worker ensure-pool "$POOL"
"$PREFECT" --no-prompt deploy --all
exec "$PREFECT" worker start --pool "$POOL" --work-queue default
