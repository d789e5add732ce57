"""Translation and plain accesses: ``translate``, ``load``, ``store``, ``get``, ``put``, ``copy``
(the conventions are ``iris.mem.triton.ops``')."""

from __future__ import annotations

import triton
import triton.language as tl
from iris.heap import context as _abi


__all__ = ["translate", "load", "store", "get", "put", "copy"]


@triton.constexpr_function
def _align_elements(dtype):
    """BASE_ALIGNMENT in elements of ``dtype`` (a byte delta between bases divides by it exactly)."""
    size = max(1, dtype.primitive_bitwidth // 8)
    return max(1, _abi.BASE_ALIGNMENT // size)


@triton.jit
def translate(ptr, cur_rank, to_rank, heap_bases, hint: tl.constexpr = None):
    """``ptr`` (cur_rank's heap) -> the same place in ``to_rank``'s heap, as mapped in this process.

    Adds the distance between the two bases in whole elements, so the result keeps the
    contiguity and alignment the compiler knows of ``ptr`` (vector loads stay vector loads).
    ``hint`` (constexpr int or tuple) additionally asserts ``multiple_of``/``max_contiguous``.
    """
    delta = tl.load(heap_bases + to_rank) - tl.load(heap_bases + cur_rank)
    # delta is a multiple of BASE_ALIGNMENT bytes: writing it so tells the compiler too.
    delta = (delta // _abi.BASE_ALIGNMENT) * _align_elements(ptr.dtype.element_ty)
    out = ptr + delta
    if hint is not None:
        out = tl.max_contiguous(tl.multiple_of(out, hint), hint)
    return out


@triton.jit
def load(ptr, cur_rank, from_rank, heap_bases, mask=None, other=None, cache_modifier: tl.constexpr = None,
         volatile: tl.constexpr = False, hint: tl.constexpr = None):  # fmt: skip
    """Read ``from_rank``'s copy of ``ptr``: ``tl.load`` semantics for ``mask``/``other``/``cache_modifier``/``volatile``."""
    src = translate(ptr, cur_rank, from_rank, heap_bases, hint)
    return tl.load(src, mask=mask, other=other, cache_modifier=cache_modifier, volatile=volatile)


@triton.jit
def store(
    ptr, value, cur_rank, to_rank, heap_bases, mask=None, cache_modifier: tl.constexpr = None, hint: tl.constexpr = None
):
    """Write ``value`` into ``to_rank``'s copy of ``ptr`` (elements where ``mask`` holds)."""
    dst = translate(ptr, cur_rank, to_rank, heap_bases, hint)
    tl.store(dst, value, mask=mask, cache_modifier=cache_modifier)


@triton.jit
def get(src, dst, cur_rank, from_rank, heap_bases, mask=None, other=None, hint: tl.constexpr = None):
    """Copy ``from_rank``'s ``src`` into the local ``dst``."""
    tl.store(dst, load(src, cur_rank, from_rank, heap_bases, mask, other, hint=hint), mask=mask)


@triton.jit
def put(src, dst, cur_rank, to_rank, heap_bases, mask=None, hint: tl.constexpr = None):
    """Copy the local ``src`` into ``to_rank``'s ``dst``."""
    store(dst, tl.load(src, mask=mask), cur_rank, to_rank, heap_bases, mask, hint=hint)


@triton.jit
def copy(src, dst, cur_rank, from_rank, to_rank, heap_bases, mask=None, other=None, hint: tl.constexpr = None):
    """Copy ``from_rank``'s ``src`` into ``to_rank``'s ``dst`` (neither rank need be ``cur_rank``)."""
    value = load(src, cur_rank, from_rank, heap_bases, mask, other, hint=hint)
    store(dst, value, cur_rank, to_rank, heap_bases, mask, hint=hint)
