"""The real engines on omni's tiny model: vLLM and llama.cpp (``make engines`` builds their envs and the
model)."""

from tests.conftest import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
