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
plain accesses), ``atomics``, ``errors`` (the device error record and ``healthy``), ``clock``
(the device clock and the bound of a wait), ``wait`` (the bounded wait and ``barrier``). Triton's
and Gluon's internals are reached only through ``_internals`` (and the CPU execution it names)
and ``iris.mem.common.target``.
"""

from __future__ import annotations

from iris.mem.common.target import InterpreterAtomicError

from ._constants import (  # noqa: F401 - the layout's names, as the layer's other modules read them here
    _BASES,
    _RANK,
    _WORLD_SIZE,
    BASE_ALIGNMENT,
)
from .accesses import copy, get, load, put, store, translate
from .atomics import (
    atomic_add,
    atomic_and,
    atomic_cas,
    atomic_max,
    atomic_min,
    atomic_or,
    atomic_sub,
    atomic_xchg,
    atomic_xor,
)
from .clock import clock_ns, elapsed_ns, polls_per_clock, wait_timeout_ns
from .errors import _extensions, _record_if_closed, healthy, record_error  # noqa: F401 - context.py, tracing.py
from .wait import barrier, wait

__all__ = [
    "translate",
    "load",
    "store",
    "get",
    "put",
    "copy",
    "atomic_add",
    "atomic_sub",
    "atomic_xchg",
    "atomic_cas",
    "atomic_and",
    "atomic_or",
    "atomic_xor",
    "atomic_min",
    "atomic_max",
    "wait",
    "clock_ns",
    "wait_timeout_ns",
    "elapsed_ns",
    "polls_per_clock",
    "record_error",
    "healthy",
    "barrier",
    "InterpreterAtomicError",
]
