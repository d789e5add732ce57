"""Remote memory access on the symmetric heap, as ``@gluon.jit`` free functions.

Every pointer argument is a **local** heap address (a scalar pointer or a tensor of pointers in
some distributed layout); the rank arguments say whose copy is touched. ``heap_bases`` points at
the context's base entries (``Context.initialize`` gives it). Masked-off elements are neither read
nor written; ``other`` only fills masked-off lanes of the loaded value. Results keep the pointer's
layout. Atomics return the old value; ``sem=None`` is ``"acq_rel"`` and ``scope=None`` is
``"sys"`` (visible to other GPUs and processes). A scalar value given with a tensor of pointers
is broadcast into the pointers' layout first (Gluon on triton 3.6 rejects scalar atomic values).
``wait``, ``record_error`` and ``healthy`` take the whole context (``heap.context``), which they
read only through the names of ``iris.heap.context`` (ABI version 2).

The same code runs compiled (NVIDIA and AMD) and on CPU ranks (inside :class:`iris.mem.gluon.interpret`).

This module gathers them; each concept is a module of its own: ``accesses`` (translation and
plain accesses), ``atomics``, ``bounded`` (what a bounded loop is written with: the device
clock, the bound of a wait, the error record, ``healthy``), ``wait`` (the bounded wait and
``barrier``). Triton's and Gluon's internals are reached only through ``_internals`` (and the CPU execution it names)
and ``iris.mem.common.target``.
"""

from __future__ import annotations

from iris.mem.common.target import InterpreterAtomicError

from . import accesses as _accesses
from . import atomics as _atomics
from . import bounded as _bounded
from . import wait as _wait
from .accesses import *  # noqa: F403 - each section's public names (its __all__)
from .atomics import *  # noqa: F403
from .bounded import *  # noqa: F403
from .bounded import _extensions, _record_if_closed  # noqa: F401 - context.py, tracing.py
from .wait import *  # noqa: F403

__all__ = [*_accesses.__all__, *_atomics.__all__, *_wait.__all__, *_bounded.__all__]
__all__ += ["InterpreterAtomicError"]

