"""The deprecation of the harness's old paths (``iris.examples.timing`` -> ``iris.examples.harness.timing``)."""

from __future__ import annotations

import warnings

__all__ = ["warn_moved"]


def warn_moved(old: str) -> None:
    """Warn, once per process (a module body runs once), that module ``old`` moved into the harness."""
    new = old.replace("iris.examples.", "iris.examples.harness.", 1)
    warnings.warn(
        f"{old} moved to {new} in iris-examples 0.2.0; import it from there ({old} goes in 0.3)",
        DeprecationWarning,
        stacklevel=3,  # the importing line (importlib's own frames are skipped)
    )
