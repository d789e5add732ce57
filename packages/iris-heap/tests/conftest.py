# The shared fixtures and markers (world, gpu, CPU ranks) are iris.testing.plugin's.
from iris.testing import WORLD_SIZES  # noqa: F401 (test_factories imports it from here)
