"""Pure functions on canned inputs: no engine, no server, no subprocess beyond a trivial one (git, sh)."""

from tests.conftest import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
