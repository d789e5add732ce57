"""iris.heap: the symmetric heap that every rank shares, and the device context that exposes it.

>>> import iris.heap
>>> heap = iris.heap.init(size=1 << 24)
>>> x = heap.zeros(1024)
>>> heap.offset(x), heap.peer(x, 0).shape
(0, torch.Size([1024]))
"""

from __future__ import annotations

from . import context, errors, log, testing, tracing
from .allocator import ALIGNMENT
from .context import CONTEXT_ABI_VERSION
from .device_errors import DeviceError, Watchdog
from .errors import *  # noqa: F403 (every error class is public: errors.__all__)
from .factories import DTYPES
from .heap import HeapStats, Reservation, SymmetricHeap, default_heap, find_heap, init

__version__ = "0.2.0"

__all__ = [
    "ALIGNMENT",
    "CONTEXT_ABI_VERSION",
    "DTYPES",
    "DeviceError",
    "HeapStats",
    "Reservation",
    "SymmetricHeap",
    "Watchdog",
    "context",
    "default_heap",
    "find_heap",
    "init",
    "log",
    "testing",
    "tracing",
]
__all__ += errors.__all__
