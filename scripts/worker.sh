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
if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
  "${PYTHON:-.venv/bin/python}" -c 'import os; from omni import stack; stack.create_bucket(stack.s3_settings(dict(os.environ)))'
fi
"$PREFECT" work-pool inspect "$POOL" >/dev/null 2>&1 || "$PREFECT" work-pool create "$POOL" --type process
"$PREFECT" --no-prompt deploy --all
exec "$PREFECT" worker start --pool "$POOL" --work-queue default
