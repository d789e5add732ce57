"""Deprecated: the multi-rank test runner moved to iris-testing (``iris.testing.world``), and its
failure types to ``iris.heap.errors`` (also ``iris.heap.RankFailedError``). Each name here still
works for one release, with a ``DeprecationWarning``; ``World``, ``WorldPool``, ``run`` and
``RemoteTraceback`` need iris-testing installed. Importing this module loads nothing else.
"""

from __future__ import annotations

import importlib
import warnings

__all__ = ["run", "World", "WorldPool", "RankFailedError", "RankFailure", "RemoteTraceback"]

_WHERE = {
    "RankFailedError": "iris.heap.errors",
    "RankFailure": "iris.heap.errors",
    "run": "iris.testing.world",
    "World": "iris.testing.world",
    "WorldPool": "iris.testing.world",
    "RemoteTraceback": "iris.testing.world",
}


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"iris.heap.testing.{name} moved to {where}.{name}; iris.heap.testing goes in iris-heap 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    try:
        module = importlib.import_module(where)
    except ImportError as e:
        raise ImportError(
            f"iris.heap.testing.{name} is now {where}.{name}, in the iris-testing distribution, which is not "
            "installed: pip install iris-testing"
        ) from e
    return getattr(module, name)
