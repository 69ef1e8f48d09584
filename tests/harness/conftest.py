"""The whole harness on the synthetic engine: subprocesses, the reaper, the sampler, the CLI as a user runs
it, and Prefect's ephemeral server. No engine env, no stack."""

from tests.conftest import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
