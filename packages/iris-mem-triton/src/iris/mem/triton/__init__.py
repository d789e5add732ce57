"""iris.mem.triton: remote memory access on the Iris symmetric heap from ``@triton.jit`` kernels.

>>> import triton, triton.language as tl
>>> from iris.mem.triton import Context
>>> @triton.jit
... def ring_put(x_ptr, context_ptr, N: tl.constexpr):
...     ctx = Context.initialize(context_ptr)
...     offs = tl.arange(0, N)
...     ctx.put(x_ptr + offs, x_ptr + offs, (ctx.rank + 1) % ctx.world_size)

Runs compiled on GPUs and under ``TRITON_INTERPRET=1`` on CPU ranks. Importing it changes nothing
in Triton; on triton 3.6 with numpy >= 2.4 a kernel that takes a scalar as a ``range`` bound on
CPU ranks is launched inside :class:`interpret` (``with interpret(): ...`` or ``@interpret()``
on the kernel), which fixes the interpreter for the launches inside it only.
"""

from __future__ import annotations

import iris.heap as _heap

__version__ = "0.2.0"

#: The ``heap.context`` layout (``iris.heap.CONTEXT_ABI_VERSION``) this code reads.
CONTEXT_ABI_VERSION = 2

# Before the submodules: they read the layout's names, which an older iris-heap lacks.
_heap.context.check_version("iris-mem-triton", __version__, CONTEXT_ABI_VERSION)

from . import ops  # noqa: E402
from iris.mem.common.target import InterpreterAtomicError  # noqa: E402

from ._internals import INTERPRETED  # noqa: E402
from ._interpreter import interpret  # noqa: E402
from .context import Context  # noqa: E402
from .ops import *  # noqa: E402, F403 - the device API's free functions (ops.__all__)
from .tracing import Tracing, device_clock  # noqa: E402

__all__ = [
    "CONTEXT_ABI_VERSION",
    "Context",
    "INTERPRETED",
    "InterpreterAtomicError",
    "Tracing",
    "device_clock",
    "interpret",
    "ops",
    "tracing",
    *ops.__all__,
]
