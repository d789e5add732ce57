"""The bounded wait: ``wait`` spins on local flags until they hold, the context records an error,
or the context's bound passes (the conventions are ``iris.mem.triton.ops``')."""

from __future__ import annotations

import triton
import triton.language as tl
from iris.heap import context as _abi

from .bounded import clock_ns, elapsed_ns, polls_per_clock, record_error, wait_timeout_ns

__all__ = ["wait"]


@triton.constexpr_function
def _comparison(cmp):
    cmp = _abi.WAIT_COMPARISONS[0] if cmp is None else cmp  # None: the first, "=="
    if cmp not in _abi.WAIT_COMPARISONS:
        raise ValueError(f"iris.mem.triton.wait: cmp must be one of {', '.join(_abi.WAIT_COMPARISONS)}, got {cmp!r}")
    return cmp


@triton.jit
def _holds(seen, value, cmp: tl.constexpr):
    if cmp == "==":
        result = seen == value
    elif cmp == "!=":
        result = seen != value
    elif cmp == ">=":
        result = seen >= value
    elif cmp == ">":
        result = seen > value
    elif cmp == "<=":
        result = seen <= value
    else:
        result = seen < value
    return result


@triton.jit
def _poll(flag_ptr):
    return tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")


@triton.jit
def _every(holds):
    """Whether every lane of a block of conditions holds (a scalar condition as it is)."""
    if holds.type.is_block():
        out = tl.min(tl.ravel(holds.to(tl.int32)), axis=0) != 0
    else:
        out = holds
    return out


@triton.jit
def _first_missed(flag_ptr, seen, holds, base):
    """(heap offset, value) of the lowest-addressed flag that does not hold (a scalar flag: itself)."""
    offset = flag_ptr.to(tl.int64, bitcast=True) - base
    value = seen.to(tl.int64)
    if holds.type.is_block():
        missed = tl.where(holds, 2**62, offset)
        first = tl.min(tl.ravel(missed), axis=0)
        value = tl.max(tl.ravel(tl.where(missed == first, value, -(2**62))), axis=0)
        offset = first
    return offset, value


@triton.jit
def wait(flag_ptr, value, context_ptr, cmp: tl.constexpr = None):
    """Spin (acquire, sys scope) until the LOCAL flag at ``flag_ptr`` satisfies ``flag cmp value``.

    ``flag_ptr`` is a scalar pointer or a block of pointers; a block waits until every flag in it
    holds, polling them all at once (the same flag may appear in several lanes). Returns True when
    they do. Returns False at once while the context holds an error (recorded before the wait or
    during it), and once the context's bound (``EXT_WAIT_TIMEOUT_NS``, ``heap.wait_timeout``) has
    passed on the device clock (``clock_ns``) with the flags last seen not holding: never sooner,
    and later by at most ``polls_per_clock()`` polls (the clock and the error word are read every
    that many polls: microseconds). A timeout records ERROR_WAIT_TIMEOUT (``record_error``: the
    first error wins) with the heap offset and last value of the (lowest-addressed) flag that did
    not hold and the nanoseconds waited, which ``heap.check_device_errors()`` raises as
    ``WaitTimeoutError``. ``cmp``: "==" (None), "!=", ">=", ">", "<=", "<".
    """
    op: tl.constexpr = _comparison(cmp)
    bound = wait_timeout_ns(context_ptr)
    start = clock_ns()
    waited = elapsed_ns(context_ptr, start)  # -1: the context holds an error
    seen = _poll(flag_ptr)
    done = _every(_holds(seen, value, op))
    EVERY: tl.constexpr = polls_per_clock()
    polls = 0
    # Every value the loop branches on is the same on every thread (polls are atomics, see
    # elapsed_ns; the poll count is shared), so the program's warps leave it at the same poll.
    while (waited >= 0) & (done == 0) & (waited < bound):
        polls += 1
        if polls % EVERY == 0:  # the clock before the poll: a wait that gives up saw the flags miss after the bound
            waited = elapsed_ns(context_ptr, start)
        seen = _poll(flag_ptr)
        done = _every(_holds(seen, value, op))
    ok = waited >= 0
    if ok & (done == 0):
        base = tl.load(context_ptr + _abi.BASES_INDEX + tl.load(context_ptr + _abi.RANK_INDEX))
        offset, last = _first_missed(flag_ptr, seen, _holds(seen, value, op), base)
        record_error(context_ptr, _abi.ERROR_WAIT_TIMEOUT, offset, last, -1, waited)
    return ok & done
