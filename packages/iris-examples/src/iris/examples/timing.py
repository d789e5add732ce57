"""Deprecated: moved to ``iris.examples.harness.timing``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.timing import *  # noqa: F403
from .harness.timing import __all__  # noqa: F401

warn_moved(__name__)
