"""Gluon spellings that differ between triton 3.6 and newer releases, in one place.

* ``aggregate``: ``gluon.aggregate`` (3.9) or ``triton.language.core._aggregate`` (3.6), with
  ``__init__`` marked as a builtin so the code generator may call it (3.6 needs that).
* ``barrier()``: ``gl.barrier()`` (3.9) or ``gl.thread_barrier()`` (3.6), as a ``@gluon.jit`` function.
* ``GluonASTSource``: ``triton.experimental.gluon`` (3.9) or ``triton.experimental.gluon._runtime`` (3.6).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate
from triton.runtime.jit import constexpr_function

try:
    from triton.experimental.gluon import GluonASTSource
except ImportError:  # triton 3.6
    from triton.experimental.gluon._runtime import GluonASTSource

__all__ = ["GluonASTSource", "aggregate", "barrier", "constexpr_function"]

_HAS_BARRIER = gl.constexpr(hasattr(gl, "barrier"))


def aggregate(cls):
    """Make ``cls`` (annotated fields, a plain ``__init__``, ``@gluon.jit`` methods) a Gluon aggregate."""
    init = cls.__dict__.get("__init__")
    if init is not None and not hasattr(init, "__triton_builtin__"):
        init.__triton_builtin__ = True
    return getattr(gluon, "aggregate", _aggregate)(cls)


@gluon.jit
def barrier():
    """Synchronize the threads of the program (CTA); a no-op on CPU ranks."""
    if _HAS_BARRIER:
        gl.barrier()
    else:
        gl.thread_barrier()
