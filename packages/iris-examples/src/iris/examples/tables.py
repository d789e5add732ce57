"""Deprecated: moved to ``iris.examples.harness.tables``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.tables import *  # noqa: F403
from .harness.tables import __all__  # noqa: F401

warn_moved(__name__)
