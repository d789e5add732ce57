"""iris.heap: the symmetric heap that every rank shares, and the device context that exposes it.

>>> import iris.heap
>>> heap = iris.heap.init(size=1 << 24)
>>> x = heap.zeros(1024)
>>> heap.offset(x), heap.peer(x, 0).shape
(0, torch.Size([1024]))
"""

from __future__ import annotations

import importlib as _importlib

from . import context, errors, log, tracing
from .allocator import ALIGNMENT
from .context import CONTEXT_ABI_VERSION
from .device_errors import DeviceError, Watchdog
from .errors import *  # noqa: F403 (every error class is public: errors.__all__)
from .factories import DTYPES
from .heap import HeapStats, HookHandle, Reservation, SymmetricHeap, default_heap, find_heap, init, register_init_hook

__version__ = "0.2.0"

__all__ = [
    "ALIGNMENT",
    "CONTEXT_ABI_VERSION",
    "DTYPES",
    "DeviceError",
    "HeapStats",
    "HookHandle",
    "Reservation",
    "SymmetricHeap",
    "Watchdog",
    "context",
    "default_heap",
    "find_heap",
    "init",
    "log",
    "register_init_hook",
    "tracing",
]
__all__ += errors.__all__


def __getattr__(name: str):
    # ``iris.heap.testing`` (deprecated, see that module) without importing it with the package.
    if name == "testing":
        return _importlib.import_module(".testing", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
