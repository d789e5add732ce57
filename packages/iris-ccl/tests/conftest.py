import importlib.util
import os

import pytest
import torch

# Without a GPU the kernels run under Triton's interpreter (set before any kernel module loads;
# spawned ranks inherit it).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from iris.heap.testing import WorldPool  # noqa: E402


def _backends():
    chosen = os.environ.get("IRIS_TEST_BACKEND")
    if chosen:
        return [chosen]
    return ["triton"] + (["gluon"] if importlib.util.find_spec("iris.mem.gluon") else [])


BACKENDS = _backends()
WORLD_SIZES = [1, 2, 3, 4]


@pytest.fixture(scope="session")
def world():
    pool = WorldPool()
    yield pool
    pool.close()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def pytest_collection_modifyitems(config, items):
    gpu = torch.cuda.is_available()
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
    config.addinivalue_line("markers", "soak: the random-collective soak of the fault suite (minutes per backend)")
