"""Deprecated: moved to ``iris.examples.harness.validation``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.validation import *  # noqa: F403
from .harness.validation import __all__  # noqa: F401

warn_moved(__name__)
