"""Atomics on any rank's copy: ``atomic_add``, ``sub``, ``xchg``, ``cas``, ``and``, ``or``, ``xor``,
``min``, ``max`` (the conventions are ``iris.mem.triton.ops``'); each returns the old value."""

from __future__ import annotations

import triton
import triton.language as tl
from iris.heap import context as _abi

from ._internals import check_atomic
from .accesses import translate

__all__ = [
    "atomic_add",
    "atomic_sub",
    "atomic_xchg",
    "atomic_cas",
    "atomic_and",
    "atomic_or",
    "atomic_xor",
    "atomic_min",
    "atomic_max",
]


@triton.constexpr_function
def _bits_of(dtype):
    """The integer type of ``dtype``'s width for floats (CAS and exchange act on bits), else ``dtype``."""
    if not dtype.is_floating():
        return dtype
    return {16: tl.int16, 32: tl.int32, 64: tl.int64}[dtype.primitive_bitwidth]


@triton.constexpr_function
def _sem(sem):
    return _abi.SEM_DEFAULT if sem is None else sem


@triton.constexpr_function
def _scope(scope):
    return _abi.SCOPE_DEFAULT if scope is None else scope


@triton.constexpr_function
def _unsigned_of(dtype):
    return {32: tl.uint32, 64: tl.uint64}[dtype.primitive_bitwidth]


@triton.constexpr_function
def _is_wide_float(dtype):
    return dtype.is_floating() and dtype.primitive_bitwidth in (32, 64)


@triton.jit
def _float_extremum(dst, val, mask, sem: tl.constexpr, scope: tl.constexpr, IS_MIN: tl.constexpr):
    """fp32/fp64 min/max on the bits: signed integer order for non-negative values, reversed
    unsigned order for negative ones. (Triton 3.6's own float min/max returns wrong old values
    under the interpreter.)"""
    elem: tl.constexpr = dst.dtype.element_ty
    ity: tl.constexpr = _bits_of(elem)
    uty: tl.constexpr = _unsigned_of(elem)
    v, dst = tl.broadcast(tl.cast(val, elem), dst)
    iv = v.to(ity, bitcast=True)
    uv = v.to(uty, bitcast=True)
    pos = iv >= 0
    neg = iv < 0
    if mask is not None:
        pos = pos & mask
        neg = neg & mask
    i_dst = dst.to(tl.pointer_type(ity), bitcast=True)
    u_dst = dst.to(tl.pointer_type(uty), bitcast=True)
    if IS_MIN:
        pos_old = tl.atomic_min(i_dst, iv, mask=pos, sem=sem, scope=scope)
        neg_old = tl.atomic_max(u_dst, uv, mask=neg, sem=sem, scope=scope)
    else:
        pos_old = tl.atomic_max(i_dst, iv, mask=pos, sem=sem, scope=scope)
        neg_old = tl.atomic_min(u_dst, uv, mask=neg, sem=sem, scope=scope)
    old = tl.where(iv >= 0, pos_old, neg_old.to(ity, bitcast=True))
    return old.to(elem, bitcast=True)


@triton.jit
def _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem: tl.constexpr, scope: tl.constexpr, OP: tl.constexpr):
    """The read-modify-write atomic ``OP`` (``"atomic_add"``, ``"atomic_and"``, ``"atomic_or"``,
    ``"atomic_xor"``, ``"atomic_min"`` or ``"atomic_max"``) on ``to_rank``'s copy of ``ptr``; the old value."""
    check_atomic(ptr.dtype.element_ty, OP)
    dst = translate(ptr, cur_rank, to_rank, heap_bases)
    if OP == "atomic_add":
        old = tl.atomic_add(dst, val, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif OP == "atomic_and":
        old = tl.atomic_and(dst, val, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif OP == "atomic_or":
        old = tl.atomic_or(dst, val, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif OP == "atomic_xor":
        old = tl.atomic_xor(dst, val, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif _is_wide_float(ptr.dtype.element_ty):  # min or max of fp32/fp64
        old = _float_extremum(dst, val, mask, _sem(sem), _scope(scope), OP == "atomic_min")
    elif OP == "atomic_min":
        old = tl.atomic_min(dst, val, mask=mask, sem=_sem(sem), scope=_scope(scope))
    else:
        old = tl.atomic_max(dst, val, mask=mask, sem=_sem(sem), scope=_scope(scope))
    return old


@triton.jit
def atomic_add(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None
):
    """Atomically add ``val`` to ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_add")


@triton.jit
def atomic_sub(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None
):
    """Atomically subtract ``val`` from ``to_rank``'s copy of ``ptr`` (wrapping for unsigned); returns the old value."""
    check_atomic(ptr.dtype.element_ty, "atomic_sub")
    dst = translate(ptr, cur_rank, to_rank, heap_bases)
    negated = 0 - tl.cast(val, ptr.dtype.element_ty)
    return tl.atomic_add(dst, negated, mask=mask, sem=_sem(sem), scope=_scope(scope))


@triton.jit
def atomic_xchg(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None
):
    """Atomically replace ``to_rank``'s copy of ``ptr`` with ``val``; returns the old value.

    32- and 64-bit elements (floats exchange their bits); Triton has no 16-bit exchange."""
    check_atomic(ptr.dtype.element_ty, "atomic_xchg")
    dst = translate(ptr, cur_rank, to_rank, heap_bases)
    elem: tl.constexpr = ptr.dtype.element_ty
    bits: tl.constexpr = _bits_of(elem)
    if bits == elem:
        old = tl.atomic_xchg(dst, val, mask=mask, sem=_sem(sem), scope=_scope(scope))
    else:
        new = tl.cast(tl.cast(val, elem), bits, bitcast=True)
        old = tl.atomic_xchg(
            dst.to(tl.pointer_type(bits), bitcast=True), new, mask=mask, sem=_sem(sem), scope=_scope(scope)
        )
        old = old.to(elem, bitcast=True)
    return old


@triton.jit
def atomic_cas(ptr, cmp, val, cur_rank, to_rank, heap_bases, sem: tl.constexpr = None, scope: tl.constexpr = None):
    """Atomically set ``to_rank``'s copy of ``ptr`` to ``val`` where it equals ``cmp``; returns the old value.

    Floats compare bitwise (as hardware CAS does: -0.0 != 0.0, a NaN matches its own bits)."""
    check_atomic(ptr.dtype.element_ty, "atomic_cas")
    dst = translate(ptr, cur_rank, to_rank, heap_bases)
    elem: tl.constexpr = ptr.dtype.element_ty
    bits: tl.constexpr = _bits_of(elem)
    expected = tl.cast(tl.cast(cmp, elem), bits, bitcast=True)
    new = tl.cast(tl.cast(val, elem), bits, bitcast=True)
    old = tl.atomic_cas(dst.to(tl.pointer_type(bits), bitcast=True), expected, new, sem=_sem(sem), scope=_scope(scope))
    return old.to(elem, bitcast=True)


@triton.jit
def atomic_and(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None
):
    """Atomic bitwise and into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_and")


@triton.jit
def atomic_or(ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None):
    """Atomic bitwise or into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_or")


@triton.jit
def atomic_xor(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None
):
    """Atomic bitwise xor into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_xor")


@triton.jit
def atomic_min(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None
):
    """Atomic minimum into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_min")


@triton.jit
def atomic_max(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None, scope: tl.constexpr = None
):
    """Atomic maximum into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_max")
