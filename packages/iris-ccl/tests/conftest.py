# The shared fixtures and markers (world, backend, gpu, CPU ranks) are iris.testing.plugin's.
from iris.testing import WORLD_SIZES  # noqa: F401 (test_ccl_collectives imports it from here)


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: the random-collective soak of the fault suite (minutes per backend)")
