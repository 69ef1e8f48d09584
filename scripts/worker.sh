#!/usr/bin/env bash
# A worker host: make sure the process pool exists, register prefect.yaml's
# deployments (their working directory is this repository), serve the pool.
# Needs PREFECT_API_URL. Used by the docker-compose worker and by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
POOL=${OMNI_POOL:-omni}
PREFECT=${PREFECT:-.venv/bin/prefect}
"$PREFECT" work-pool inspect "$POOL" >/dev/null 2>&1 || "$PREFECT" work-pool create "$POOL" --type process
"$PREFECT" --no-prompt deploy --all
exec "$PREFECT" worker start --pool "$POOL"
