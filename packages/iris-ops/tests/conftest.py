from iris.testing import WORLD_SIZES  # noqa: F401 (the tests import it from here)
