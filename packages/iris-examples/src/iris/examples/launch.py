"""Deprecated: moved to ``iris.examples.harness.launch``; this path goes in 0.3."""

from .harness._moved import warn_moved
from .harness.launch import *  # noqa: F403
from .harness.launch import __all__  # noqa: F401

warn_moved(__name__)
