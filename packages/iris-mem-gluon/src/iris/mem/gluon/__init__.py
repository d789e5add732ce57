"""iris.mem.gluon: remote memory access on the Iris symmetric heap from ``@gluon.jit`` kernels.

>>> from triton.experimental import gluon
>>> from triton.experimental.gluon import language as gl
>>> from iris.mem.gluon import Context
>>> @gluon.jit
... def ring_put(x_ptr, context_ptr, N: gl.constexpr, layout: gl.constexpr):
...     ctx = Context.initialize(context_ptr)
...     offs = gl.arange(0, N, layout=layout)
...     ctx.put(x_ptr + offs, x_ptr + offs, (ctx.rank + 1) % ctx.world_size)

The device API of the Triton layer (iris-mem-triton: the same names and semantics), for Gluon. Layouts are
explicit; :func:`blocked_layout` gives one with the target's warp size. Runs compiled on NVIDIA and
AMD GPUs, and on CPU ranks under ``TRITON_INTERPRET=1`` inside :class:`interpret`, which a launch
enters explicitly (``with interpret(): kernel[grid](...)``, or ``@interpret()`` on the kernel).
Importing this package changes nothing in Triton or Gluon: a Gluon kernel launched outside
``interpret`` runs as it would without Iris.
"""

from __future__ import annotations

import iris.heap as _heap
from iris.mem import common as _common

__version__ = "0.2.0"

#: The ``heap.context`` layout (``iris.heap.CONTEXT_ABI_VERSION``) this code reads.
CONTEXT_ABI_VERSION = 2

# Before the submodules: they read the layout's names, which an older iris-heap lacks.
_heap.context.check_version("iris-mem-gluon", __version__, CONTEXT_ABI_VERSION)

from . import ops  # noqa: E402
from ._cpu import UnsupportedOnCPUError, interpret  # noqa: E402
from .context import Context  # noqa: E402
from .layouts import blocked_layout, current_target, warp_size  # noqa: E402
from .ops import *  # noqa: E402, F403 - the device API's free functions (ops.__all__)
from .tracing import Tracing, device_clock  # noqa: E402

#: The source of compile-only Gluon builds (``triton.compile(GluonASTSource(fn, signature, constexprs), target=...)``).
GluonASTSource = _common.gluon_ast_source()
#: ``@aggregate`` on a class of annotated fields, a plain ``__init__`` and ``@gluon.jit`` methods.
aggregate = _common.aggregate

__all__ = [
    "CONTEXT_ABI_VERSION",
    "Context",
    "GluonASTSource",
    "Tracing",
    "UnsupportedOnCPUError",
    "aggregate",
    "blocked_layout",
    "current_target",
    "device_clock",
    "interpret",
    "ops",
    "tracing",
    "warp_size",
    *ops.__all__,
]
