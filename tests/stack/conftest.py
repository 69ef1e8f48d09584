"""Against the stack: PostgreSQL and a Prefect server (``omni stack up``, which .ci/run starts) and its S3."""

from tests.conftest import mark_layer
from tests.server import prefect_api, running_stack, worker  # noqa: F401 - the stack's fixtures, for every test here


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
