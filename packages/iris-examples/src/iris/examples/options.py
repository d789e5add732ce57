"""Deprecated: moved to ``iris.examples.harness.options``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.options import *  # noqa: F403
from .harness.options import __all__  # noqa: F401

warn_moved(__name__)
