"""iris.ccl: torch.distributed-style collectives run as Triton/Gluon kernels over the Iris heap.

>>> import iris.heap, iris.ccl as ccl
>>> heap = iris.heap.init(1 << 26)
>>> x = heap.ones(1024)
>>> ccl.all_reduce(x)            # in place, every rank gets the same bits
"""

from __future__ import annotations

import iris.heap as _heap

__version__ = "0.2.0"

#: The ``heap.context`` layout (``iris.heap.CONTEXT_ABI_VERSION``) this code reads: the collectives'
#: error codes and their record words.
CONTEXT_ABI_VERSION = 2

# Before the submodules: they read the layout's names, which an older iris-heap lacks.
_heap.context.check_version("iris-ccl", __version__, CONTEXT_ABI_VERSION)

from .collectives import (  # noqa: E402
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    reduce_scatter,
    reset,
)
from .config import ALL_REDUCE_VARIANTS, BACKENDS, Config  # noqa: E402
from .tuning import AUTO_ALL_REDUCE, AUTO_PUSH_BYTES  # noqa: E402
from .workspace import workspace_bytes  # noqa: E402
from .errors import (  # noqa: E402
    CollectiveAbandonedError,
    CollectiveError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
)

__all__ = [
    "ALL_REDUCE_VARIANTS",
    "BACKENDS",
    "CONTEXT_ABI_VERSION",
    "CollectiveAbandonedError",
    "CollectiveError",
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "Config",
    "AUTO_ALL_REDUCE",
    "AUTO_PUSH_BYTES",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "reduce_scatter",
    "reset",
    "workspace_bytes",
]


def __getattr__(name: str):
    # Deprecated names, kept for one release with a warning.
    if name == "AUTO_VARIANTS":
        import warnings

        warnings.warn(
            "iris.ccl.AUTO_VARIANTS (one row: two_shot everywhere) is gone; all_reduce's 'auto' is "
            "iris.ccl.AUTO_ALL_REDUCE. The name goes in iris-ccl 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return {None: ((None, AUTO_ALL_REDUCE),)}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
