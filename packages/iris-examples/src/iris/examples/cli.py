"""Deprecated: moved to ``iris.examples.harness.cli``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.cli import *  # noqa: F403
from .harness.cli import __all__  # noqa: F401

warn_moved(__name__)
