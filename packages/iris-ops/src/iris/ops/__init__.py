"""iris.ops: GEMMs fused with the communication around them, each one kernel on the symmetric heap.

>>> import iris.heap, iris.ops as ops
>>> heap = iris.heap.init(1 << 28)
>>> c = ops.matmul_reduce_scatter(a, b)     # rows `rank` of sum over ranks of a_r @ b_r
>>> c = ops.all_gather_matmul(x, w)         # cat over ranks of x_r, times w

The operations synchronize like the collectives of ``iris.ccl`` (the same protocol: descriptions
compared before anyone touches a peer, bounded waits, asynchronous errors, ``iris.ccl.reset()``
after one), and ``iris.ops.reference`` holds each one's unfused equivalent: what
``Config(variant="unfused")`` runs, and ``"auto"`` (the default) where ``iris.ops.config.AUTO_UNFUSED``
measured it faster on the device kind.
"""

from __future__ import annotations

import iris.ccl as _ccl
import iris.heap as _heap
from iris.ccl.errors import (  # the collectives' errors, which the operations raise too
    CollectiveAbandonedError,
    CollectiveError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
)

__version__ = "0.1.0"

#: The ``heap.context`` layout (``iris.heap.CONTEXT_ABI_VERSION``) this code reads: the collectives'
#: error codes and the protocol's, which are iris.ccl's. A literal, as every layer's is:
#: ``tools/check_abi.py`` reads it from the source and checks it against iris-heap's.
CONTEXT_ABI_VERSION = 2

# Before the submodules: they read the layout's names, which an older iris-heap lacks.
_heap.context.check_version("iris-ops", __version__, CONTEXT_ABI_VERSION)

from . import description  # noqa: E402 (registers the operations' kinds with the protocol)
from .config import BACKENDS, Config  # noqa: E402
from .operations import (  # noqa: E402
    all_gather_matmul,
    local_matmul,
    matmul_all_gather,
    matmul_all_reduce,
    matmul_reduce_scatter,
)

__all__ = [
    "BACKENDS",
    "CONTEXT_ABI_VERSION",
    "CollectiveAbandonedError",
    "CollectiveError",
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "Config",
    "all_gather_matmul",
    "description",
    "local_matmul",
    "matmul_all_gather",
    "matmul_all_reduce",
    "matmul_reduce_scatter",
]
