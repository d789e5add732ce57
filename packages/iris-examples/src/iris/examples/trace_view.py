"""Deprecated: moved to ``iris.examples.harness.trace_view``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.trace_view import *  # noqa: F403
from .harness.trace_view import __all__  # noqa: F401

warn_moved(__name__)
