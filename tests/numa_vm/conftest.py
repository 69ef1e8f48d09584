"""A two-node QEMU guest (``make numa-vm``): placement and memory binding on a real second node."""

from tests.conftest import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
