# The two set-up-and-go commands (see README): both bootstrap what is missing.
.PHONY: sweep test bootstrap bench

# Prefect's ephemeral server sends no telemetry from CI or tests.
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false

bootstrap:
	@scripts/bootstrap.sh

sweep: bootstrap
	.venv/bin/omni sweep arms/smoke-synthetic.yaml

test: bootstrap
	.venv/bin/python -m pytest

bench: bootstrap
	.venv/bin/python benchmarks/sampler_overhead.py
