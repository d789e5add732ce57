"""``Context``: the device context as a Gluon aggregate, with every operation of :mod:`.ops` as a method.

The methods pass the context's own rank and heap bases to the free functions; they add nothing.
"""

# no `from __future__ import annotations`: triton 3.6 checks fields with isinstance(value, annotation).

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.heap import context as _abi
from iris.mem.common import aggregate

from . import ops

__all__ = ["Context"]


@aggregate
class Context:
    """This rank's view of the symmetric heap inside a kernel: ``Context.initialize(heap.context)``.

    ``rank`` and ``world_size`` are int64 scalars; ``heap_bases`` points at the W heap bases and
    ``context_ptr`` at the whole context (for bounded waits and device errors). Pointers passed to
    the methods are local heap addresses; the rank argument says whose copy is touched.
    """

    rank: gl.tensor
    world_size: gl.tensor
    heap_bases: gl.tensor
    context_ptr: gl.tensor

    def __init__(self, rank, world_size, heap_bases, context_ptr):
        self.rank = rank
        self.world_size = world_size
        self.heap_bases = heap_bases
        self.context_ptr = context_ptr

    @staticmethod
    @gluon.jit
    def initialize(context_ptr):
        """Read rank and world size from the int64 context tensor ``heap.context``.

        A closed heap's context records ERROR_HEAP_CLOSED (its bases are all 0 then, so the
        kernel reaches only the pointers it was given); that costs one scalar load when open.
        """
        world_size = gl.load(context_ptr + _abi.WORLD_SIZE_INDEX)
        ops._record_if_closed(context_ptr, world_size)
        return Context(gl.load(context_ptr + _abi.RANK_INDEX), world_size, context_ptr + _abi.BASES_INDEX, context_ptr)

    @gluon.jit
    def translate(self, ptr, to_rank, hint: gl.constexpr = None):
        """``ptr`` (local) -> the same place in ``to_rank``'s heap."""
        return ops.translate(ptr, self.rank, to_rank, self.heap_bases, hint)

    @gluon.jit
    def load(self, ptr, from_rank, mask=None, other=None, cache_modifier: gl.constexpr = None,
             volatile: gl.constexpr = False, hint: gl.constexpr = None):  # fmt: skip
        """Read ``from_rank``'s copy of ``ptr``."""
        return ops.load(ptr, self.rank, from_rank, self.heap_bases, mask, other, cache_modifier, volatile, hint)

    @gluon.jit
    def store(self, ptr, value, to_rank, mask=None, cache_modifier: gl.constexpr = None, hint: gl.constexpr = None):
        """Write ``value`` into ``to_rank``'s copy of ``ptr``."""
        ops.store(ptr, value, self.rank, to_rank, self.heap_bases, mask, cache_modifier, hint)

    @gluon.jit
    def get(self, src, dst, from_rank, mask=None, other=None, hint: gl.constexpr = None):
        """Copy ``from_rank``'s ``src`` into the local ``dst``."""
        ops.get(src, dst, self.rank, from_rank, self.heap_bases, mask, other, hint)

    @gluon.jit
    def put(self, src, dst, to_rank, mask=None, hint: gl.constexpr = None):
        """Copy the local ``src`` into ``to_rank``'s ``dst``."""
        ops.put(src, dst, self.rank, to_rank, self.heap_bases, mask, hint)

    @gluon.jit
    def copy(self, src, dst, from_rank, to_rank, mask=None, other=None, hint: gl.constexpr = None):
        """Copy ``from_rank``'s ``src`` into ``to_rank``'s ``dst``."""
        ops.copy(src, dst, self.rank, from_rank, to_rank, self.heap_bases, mask, other, hint)

    @gluon.jit
    def atomic_add(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic add on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_add(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def atomic_sub(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic subtract on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_sub(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def atomic_xchg(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic exchange on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_xchg(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def atomic_cas(self, ptr, cmp, val, to_rank, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic compare-and-swap on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_cas(ptr, cmp, val, self.rank, to_rank, self.heap_bases, sem, scope)

    @gluon.jit
    def atomic_and(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic bitwise and on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_and(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def atomic_or(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic bitwise or on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_or(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def atomic_xor(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic bitwise xor on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_xor(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def atomic_min(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic minimum on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_min(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def atomic_max(self, ptr, val, to_rank, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
        """Atomic maximum on ``to_rank``'s copy of ``ptr``; returns the old value."""
        return ops.atomic_max(ptr, val, self.rank, to_rank, self.heap_bases, mask, sem, scope)

    @gluon.jit
    def wait(self, flag_ptr, value, cmp: gl.constexpr = None):
        """Bounded acquire spin on the LOCAL flag until ``flag cmp value``; False on timeout (see ``ops.wait``)."""
        return ops.wait(flag_ptr, value, self.context_ptr, cmp)

    @gluon.jit
    def clock_ns(self):
        """Nanoseconds of the device clock (see ``ops.clock_ns``)."""
        return ops.clock_ns()

    @gluon.jit
    def wait_timeout_ns(self):
        """The bound of a device-side wait, in nanoseconds of ``clock_ns`` (see ``ops.wait_timeout_ns``)."""
        return ops.wait_timeout_ns(self.context_ptr)

    @gluon.jit
    def elapsed_ns(self, start):
        """Nanoseconds since ``start``, or -1 once an error is recorded, the same on every thread (see ``ops.elapsed_ns``)."""
        return ops.elapsed_ns(self.context_ptr, start)

    @gluon.jit
    def record_error(self, code, detail, value, peer, aux):
        """Record a device error unless one is recorded; whether this call won (see ``ops.record_error``)."""
        return ops.record_error(self.context_ptr, code, detail, value, peer, aux)

    @gluon.jit
    def healthy(self):
        """Whether no device error is recorded in the context (see ``ops.healthy``)."""
        return ops.healthy(self.context_ptr)
