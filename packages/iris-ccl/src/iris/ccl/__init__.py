"""iris.ccl: torch.distributed-style collectives run as Triton/Gluon kernels over the Iris heap.

>>> import iris.heap, iris.ccl as ccl
>>> heap = iris.heap.init(1 << 26)
>>> x = heap.ones(1024)
>>> ccl.all_reduce(x)            # in place, every rank gets the same bits
"""

from __future__ import annotations

from .collectives import AUTO_VARIANTS, all_gather, all_reduce, all_to_all, barrier, broadcast, reduce_scatter, reset
from .config import ALL_REDUCE_VARIANTS, BACKENDS, Config
from .errors import CollectiveAbandonedError, CollectiveError, CollectiveMismatchError, CollectiveTimeoutError

__version__ = "0.2.0"

__all__ = [
    "ALL_REDUCE_VARIANTS",
    "BACKENDS",
    "CollectiveAbandonedError",
    "CollectiveError",
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "Config",
    "AUTO_VARIANTS",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "reduce_scatter",
    "reset",
]
