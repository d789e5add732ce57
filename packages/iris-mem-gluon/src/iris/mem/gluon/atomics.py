"""Atomics on any rank's copy: ``atomic_add``, ``sub``, ``xchg``, ``cas``, ``and``, ``or``, ``xor``,
``min``, ``max`` (the conventions are ``iris.mem.gluon.ops``'); each returns the old value."""

from __future__ import annotations

import triton.language as tl
from triton import constexpr_function
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.heap import context as _abi

from . import _cpu
from ._internals import check_atomic as _check_atomic
from .accesses import _value_like, translate

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


@constexpr_function
def _sem(sem):
    return _abi.SEM_DEFAULT if sem is None else sem


@constexpr_function
def _scope(scope):
    return _abi.SCOPE_DEFAULT if scope is None else scope


@constexpr_function
def _bits_of(dtype):
    """The integer type of ``dtype``'s width for floats (CAS compares bit patterns), else ``dtype``."""
    if not dtype.is_floating():
        return dtype
    return {16: tl.int16, 32: tl.int32, 64: tl.int64}[dtype.primitive_bitwidth]


@constexpr_function
def _cpu_float(dtype):
    """Whether a float min/max must take the integer route below (only on CPU ranks)."""
    return bool(_cpu._state.launches) and dtype.is_floating()


@constexpr_function
def _unsigned_of(dtype):
    return {32: tl.uint32, 64: tl.uint64}[dtype.primitive_bitwidth]


@gluon.jit
def _and_mask(mask, cond):
    if mask is None:
        out = cond
    else:
        out = mask & cond
    return out


@gluon.jit
def _float_min_max(dst, value, mask, MAX: gl.constexpr, sem: gl.constexpr, scope: gl.constexpr):
    """Float atomic min/max as integer atomics (signed for values >= 0, unsigned for negatives).

    Triton lowers float min/max this way itself; on CPU ranks triton 3.6's interpreter then
    returns the old value converted instead of bit-cast (numpy promotes int64/uint64 to float64),
    so the CPU path does it here with consistent types.
    """
    elem: gl.constexpr = dst.dtype.element_ty
    signed: gl.constexpr = _bits_of(elem)
    unsigned: gl.constexpr = _unsigned_of(elem)
    as_signed = value.to(signed, bitcast=True)
    negative = as_signed < 0
    positive = as_signed >= 0
    s_ptr = dst.to(gl.pointer_type(signed), bitcast=True)
    u_ptr = dst.to(gl.pointer_type(unsigned), bitcast=True)
    if MAX:
        old_pos = gl.atomic_max(s_ptr, as_signed, mask=_and_mask(mask, positive), sem=sem, scope=scope)
        old_neg = gl.atomic_min(
            u_ptr, value.to(unsigned, bitcast=True), mask=_and_mask(mask, negative), sem=sem, scope=scope
        )
    else:
        old_pos = gl.atomic_min(s_ptr, as_signed, mask=_and_mask(mask, positive), sem=sem, scope=scope)
        old_neg = gl.atomic_max(
            u_ptr, value.to(unsigned, bitcast=True), mask=_and_mask(mask, negative), sem=sem, scope=scope
        )
    return gl.where(negative, old_neg.to(signed, bitcast=True), old_pos).to(elem, bitcast=True)


@gluon.jit
def _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem: gl.constexpr, scope: gl.constexpr, OP: gl.constexpr):
    """The read-modify-write atomic ``OP`` (``"atomic_add"``, ``"atomic_xchg"``, ``"atomic_and"``,
    ``"atomic_or"``, ``"atomic_xor"``, ``"atomic_min"`` or ``"atomic_max"``) on ``to_rank``'s copy of
    ``ptr``; the old value."""
    elem: gl.constexpr = ptr.dtype.element_ty
    _check_atomic(elem, OP)
    dst = translate(ptr, cur_rank, to_rank, heap_bases)
    value = _value_like(val, dst)
    if OP == "atomic_add":
        old = gl.atomic_add(dst, value, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif OP == "atomic_xchg":
        old = gl.atomic_xchg(dst, value, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif OP == "atomic_and":
        old = gl.atomic_and(dst, value, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif OP == "atomic_or":
        old = gl.atomic_or(dst, value, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif OP == "atomic_xor":
        old = gl.atomic_xor(dst, value, mask=mask, sem=_sem(sem), scope=_scope(scope))
    elif _cpu_float(elem):  # min or max of floats on CPU ranks
        old = _float_min_max(dst, gl.cast(value, elem), mask, OP == "atomic_max", _sem(sem), _scope(scope))
    elif OP == "atomic_min":
        old = gl.atomic_min(dst, gl.cast(value, elem), mask=mask, sem=_sem(sem), scope=_scope(scope))
    else:
        old = gl.atomic_max(dst, gl.cast(value, elem), mask=mask, sem=_sem(sem), scope=_scope(scope))
    return old


@gluon.jit
def atomic_add(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None
):
    """Atomically add ``val`` to ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_add")


@gluon.jit
def atomic_sub(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None
):
    """Atomically subtract ``val`` from ``to_rank``'s copy of ``ptr`` (wrapping for unsigned); returns the old value."""
    _check_atomic(ptr.dtype.element_ty, "atomic_sub")
    dst = translate(ptr, cur_rank, to_rank, heap_bases)
    negated = 0 - gl.cast(_value_like(val, dst), ptr.dtype.element_ty)
    return gl.atomic_add(dst, negated, mask=mask, sem=_sem(sem), scope=_scope(scope))


@gluon.jit
def atomic_xchg(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None
):
    """Atomically replace ``to_rank``'s copy of ``ptr`` with ``val``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_xchg")


@gluon.jit
def atomic_cas(ptr, cmp, val, cur_rank, to_rank, heap_bases, sem: gl.constexpr = None, scope: gl.constexpr = None):
    """Atomically set ``to_rank``'s copy of ``ptr`` to ``val`` where it equals ``cmp``; returns the old value.

    Floats are compared as bit patterns, as GPU CAS instructions do (-0.0 differs from 0.0, a NaN
    matches the same NaN); the CAS itself runs on same-width integers, which also sidesteps
    triton 3.6's AMD backend, where a float CAS fails to compile.
    """
    _check_atomic(ptr.dtype.element_ty, "atomic_cas")
    dst = translate(ptr, cur_rank, to_rank, heap_bases)
    elem: gl.constexpr = ptr.dtype.element_ty
    bits: gl.constexpr = _bits_of(elem)
    expected = gl.cast(_value_like(cmp, dst), elem)
    desired = gl.cast(_value_like(val, dst), elem)
    if bits == elem:
        old = gl.atomic_cas(dst, expected, desired, sem=_sem(sem), scope=_scope(scope))
    else:
        word = dst.to(gl.pointer_type(bits), bitcast=True)
        old = gl.atomic_cas(word, expected.to(bits, bitcast=True), desired.to(bits, bitcast=True),
                            sem=_sem(sem), scope=_scope(scope)).to(elem, bitcast=True)  # fmt: skip
    return old


@gluon.jit
def atomic_and(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None
):
    """Atomic bitwise and into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_and")


@gluon.jit
def atomic_or(ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None):
    """Atomic bitwise or into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_or")


@gluon.jit
def atomic_xor(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None
):
    """Atomic bitwise xor into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_xor")


@gluon.jit
def atomic_min(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None
):
    """Atomic minimum into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_min")


@gluon.jit
def atomic_max(
    ptr, val, cur_rank, to_rank, heap_bases, mask=None, sem: gl.constexpr = None, scope: gl.constexpr = None
):
    """Atomic maximum into ``to_rank``'s copy of ``ptr``; returns the old value."""
    return _rmw(ptr, val, cur_rank, to_rank, heap_bases, mask, sem, scope, "atomic_max")
