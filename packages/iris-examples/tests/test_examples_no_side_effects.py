"""Importing iris.examples changes nothing for code that does not use it."""

from iris.testing import side_effects


def test_importing_the_layer_changes_nothing_for_plain_kernels():
    """The same result, or the same error, for a Gluon and a Triton kernel that know nothing of
    Iris, interpreted and compiled; no attribute of Triton or Gluon patched by the import."""
    side_effects.expect_import_changes_nothing("iris.examples")
