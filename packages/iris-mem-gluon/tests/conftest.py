import os

import pytest
import torch

# Without a GPU the kernels run on CPU ranks: iris.mem.gluon forwards Gluon onto Triton's
# interpreter. The mode is fixed when triton is imported, so this must happen before any kernel
# module is imported (spawned ranks inherit it).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from iris.heap.testing import World, WorldPool  # noqa: E402

WORLD_SIZES = [1, 2, 3, 4]


@pytest.fixture(scope="session")
def world():
    """Spawned ranks, kept per world size for the whole session: ``world.run(fn, n, *args)``."""
    pool = WorldPool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def compiler():
    """One spawned process with TRITON_INTERPRET=0, for compile-only checks (no GPU needed)."""
    with World(1, env={"TRITON_INTERPRET": "0"}) as w:
        yield w


def pytest_collection_modifyitems(config, items):
    gpu = torch.cuda.is_available()
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        if "cpu_ranks" in item.keywords and gpu:
            item.add_marker(pytest.mark.skip(reason="checks CPU execution (CPU ranks only)"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
    config.addinivalue_line("markers", "cpu_ranks: checks CPU execution of Gluon kernels (skipped with a GPU)")
