"""Deprecated: moved to ``iris.examples.harness.units``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.units import *  # noqa: F403
from .harness.units import __all__  # noqa: F401

warn_moved(__name__)
