"""Deprecated: moved to ``iris.examples.harness.environment``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.environment import *  # noqa: F403
from .harness.environment import __all__  # noqa: F401

warn_moved(__name__)
