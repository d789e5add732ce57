"""Deprecated: moved to ``iris.examples.harness.registry``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.registry import *  # noqa: F403
from .harness.registry import __all__  # noqa: F401

warn_moved(__name__)
