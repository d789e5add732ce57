import pytest
import torch

from iris.heap.testing import WorldPool

WORLD_SIZES = [1, 2, 3, 4]


@pytest.fixture(scope="session")
def world():
    """Spawned ranks, kept per world size for the whole session: ``world.run(fn, n, *args)``."""
    pool = WorldPool()
    yield pool
    pool.close()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
