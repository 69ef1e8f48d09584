"""Injected faults: kills, full disks, corrupt files, races, a lost Prefect API, hostile specs."""

from tests.conftest import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
