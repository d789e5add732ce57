"""Translation and plain accesses: ``translate``, ``load``, ``store``, ``get``, ``put``, ``copy``
(the conventions are ``iris.mem.gluon.ops``'), and ``_value_like``, a scalar spread into a block
of pointers' layout, which the atomics and the wait use too."""

from __future__ import annotations

import triton.language as tl
from triton import constexpr_function
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.heap import context as _abi


__all__ = ["translate", "load", "store", "get", "put", "copy"]


@constexpr_function
def _align_elements(dtype):
    """BASE_ALIGNMENT in elements of ``dtype`` (a byte delta between bases divides by it exactly)."""
    size = max(1, dtype.primitive_bitwidth // 8)
    return max(1, _abi.BASE_ALIGNMENT // size)


@constexpr_function
def _needs_broadcast(ptr, value):
    """Whether ``value`` (a Python number, constexpr or scalar tensor) must be spread over block ``ptr``."""
    block_ptr = isinstance(ptr, tl.tensor) and ptr.type.is_block()
    block_value = isinstance(value, tl.tensor) and value.type.is_block()
    return block_ptr and not block_value


@constexpr_function
def _layout_of(x):
    return getattr(x.type, "layout", None)


@gluon.jit
def _value_like(value, ptr):
    """``value`` as ``ptr``'s element type, broadcast into ``ptr``'s layout when ``ptr`` is a block."""
    if _needs_broadcast(ptr, value):
        out = gl.full(ptr.shape, value, ptr.dtype.element_ty, _layout_of(ptr))
    else:
        out = value
    return out


@gluon.jit
def translate(ptr, cur_rank, to_rank, heap_bases, hint: gl.constexpr = None):
    """``ptr`` (cur_rank's heap) -> the same place in ``to_rank``'s heap, as mapped in this process.

    Adds the distance between the two bases in whole elements, so the result keeps the layout,
    contiguity and alignment the compiler knows of ``ptr`` (vector accesses stay vector accesses).
    ``hint`` (constexpr int or tuple) additionally asserts ``multiple_of``/``max_contiguous``.
    """
    delta = gl.load(heap_bases + to_rank) - gl.load(heap_bases + cur_rank)
    # delta is a multiple of BASE_ALIGNMENT bytes: writing it so tells the compiler too.
    delta = (delta // _abi.BASE_ALIGNMENT) * _align_elements(ptr.dtype.element_ty)
    out = ptr + delta
    if hint is not None:
        out = gl.max_contiguous(gl.multiple_of(out, hint), hint)
    return out


@gluon.jit
def load(ptr, cur_rank, from_rank, heap_bases, mask=None, other=None, cache_modifier: gl.constexpr = None,
         volatile: gl.constexpr = False, hint: gl.constexpr = None):  # fmt: skip
    """Read ``from_rank``'s copy of ``ptr``: ``gl.load`` semantics for ``mask``/``other``/``cache_modifier``/``volatile``."""
    src = translate(ptr, cur_rank, from_rank, heap_bases, hint)
    return gl.load(src, mask=mask, other=other, cache_modifier=cache_modifier, volatile=volatile)


@gluon.jit
def store(ptr, value, cur_rank, to_rank, heap_bases, mask=None, cache_modifier: gl.constexpr = None,
          hint: gl.constexpr = None):  # fmt: skip
    """Write ``value`` into ``to_rank``'s copy of ``ptr`` (elements where ``mask`` holds)."""
    dst = translate(ptr, cur_rank, to_rank, heap_bases, hint)
    gl.store(dst, _value_like(value, dst), mask=mask, cache_modifier=cache_modifier)


@gluon.jit
def get(src, dst, cur_rank, from_rank, heap_bases, mask=None, other=None, hint: gl.constexpr = None):
    """Copy ``from_rank``'s ``src`` into the local ``dst``."""
    gl.store(dst, load(src, cur_rank, from_rank, heap_bases, mask, other, hint=hint), mask=mask)


@gluon.jit
def put(src, dst, cur_rank, to_rank, heap_bases, mask=None, hint: gl.constexpr = None):
    """Copy the local ``src`` into ``to_rank``'s ``dst``."""
    store(dst, gl.load(src, mask=mask), cur_rank, to_rank, heap_bases, mask, hint=hint)


@gluon.jit
def copy(src, dst, cur_rank, from_rank, to_rank, heap_bases, mask=None, other=None, hint: gl.constexpr = None):
    """Copy ``from_rank``'s ``src`` into ``to_rank``'s ``dst`` (neither rank need be ``cur_rank``)."""
    value = load(src, cur_rank, from_rank, heap_bases, mask, other, hint=hint)
    store(dst, value, cur_rank, to_rank, heap_bases, mask, hint=hint)
