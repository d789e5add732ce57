"""Deprecated: moved to ``iris.examples.harness.trace``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.trace import *  # noqa: F403
from .harness.trace import __all__  # noqa: F401

warn_moved(__name__)
