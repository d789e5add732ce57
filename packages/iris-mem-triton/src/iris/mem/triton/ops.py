"""Remote memory access on the symmetric heap, as ``@triton.jit`` free functions.

Every pointer argument is a **local** heap address (a scalar pointer or a tensor of pointers);
the rank arguments say whose copy is touched. ``heap_bases`` points at the context's base
entries (``Context.initialize`` gives it). Masked-off elements are neither read nor written;
``other`` only fills masked-off lanes of the loaded value. Atomics return the old value;
``sem=None`` is ``"acq_rel"`` and ``scope=None`` is ``"sys"`` (visible to other GPUs and
processes). ``wait``, ``record_error`` and ``healthy`` take the whole context (``heap.context``),
which they read only through the names of ``iris.heap.context`` (ABI version 2).

The same code runs compiled and under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import time

import triton
import triton.language as tl
from iris.heap import context as _abi
from iris.mem import common as _common

from ._interpreter import INTERPRETED, check_atomic

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
]

#: Every heap base is a multiple of this many bytes (page- or allocation-aligned in practice).
BASE_ALIGNMENT = tl.constexpr(_abi.BASE_ALIGNMENT)

# The device context (iris.heap.context), as constexprs: device code reads it through these only.
_RANK = tl.constexpr(_abi.RANK_INDEX)
_WORLD_SIZE = tl.constexpr(_abi.WORLD_SIZE_INDEX)
_BASES = tl.constexpr(_abi.BASES_INDEX)
_WAIT_TIMEOUT_NS = tl.constexpr(_abi.EXT_WAIT_TIMEOUT_NS)  # extensions: offsets after the W bases
_ERROR_CODE = tl.constexpr(_abi.EXT_ERROR_CODE)
_ERROR_RECORD = tl.constexpr(_abi.EXT_ERROR_RECORD)
_STATUS = tl.constexpr(_abi.EXT_STATUS)
_STATUS_CLOSED = tl.constexpr(_abi.STATUS_CLOSED)
_RECORD_CODE = tl.constexpr(_abi.RECORD_CODE)  # words of the error record
_RECORD_DETAIL = tl.constexpr(_abi.RECORD_DETAIL)
_RECORD_VALUE = tl.constexpr(_abi.RECORD_VALUE)
_RECORD_PEER = tl.constexpr(_abi.RECORD_PEER)
_RECORD_AUX = tl.constexpr(_abi.RECORD_AUX)
_ERROR_WAIT_TIMEOUT = tl.constexpr(_abi.ERROR_WAIT_TIMEOUT)
_ERROR_HEAP_CLOSED = tl.constexpr(_abi.ERROR_HEAP_CLOSED)


@triton.constexpr_function
def _align_elements(dtype):
    """BASE_ALIGNMENT in elements of ``dtype`` (a byte delta between bases divides by it exactly)."""
    size = max(1, dtype.primitive_bitwidth // 8)
    return max(1, BASE_ALIGNMENT.value // size)


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
def _comparison(cmp):
    cmp = _abi.WAIT_COMPARISONS[0] if cmp is None else cmp  # None: the first, "=="
    if cmp not in _abi.WAIT_COMPARISONS:
        raise ValueError(f"iris.mem.triton.wait: cmp must be one of {', '.join(_abi.WAIT_COMPARISONS)}, got {cmp!r}")
    return cmp


# -- translation and plain accesses ------------------------------------------------------------


@triton.jit
def translate(ptr, cur_rank, to_rank, heap_bases, hint: tl.constexpr = None):
    """``ptr`` (cur_rank's heap) -> the same place in ``to_rank``'s heap, as mapped in this process.

    Adds the distance between the two bases in whole elements, so the result keeps the
    contiguity and alignment the compiler knows of ``ptr`` (vector loads stay vector loads).
    ``hint`` (constexpr int or tuple) additionally asserts ``multiple_of``/``max_contiguous``.
    """
    delta = tl.load(heap_bases + to_rank) - tl.load(heap_bases + cur_rank)
    # delta is a multiple of BASE_ALIGNMENT bytes: writing it so tells the compiler too.
    delta = (delta // BASE_ALIGNMENT) * _align_elements(ptr.dtype.element_ty)
    out = ptr + delta
    if hint is not None:
        out = tl.max_contiguous(tl.multiple_of(out, hint), hint)
    return out


@triton.jit
def load(
    ptr,
    cur_rank,
    from_rank,
    heap_bases,
    mask=None,
    other=None,
    cache_modifier: tl.constexpr = None,
    volatile: tl.constexpr = False,
    hint: tl.constexpr = None,
):
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


# -- atomics -------------------------------------------------------------------------------------


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


# -- the device clock and device errors ------------------------------------------------------------

#: Inline assembly that reads a nanosecond clock, per code generator backend: (asm, constraint,
#: nanoseconds per tick). NVIDIA's global timer counts nanoseconds; AMD's s_memrealtime is a
#: 100 MHz counter, a scalar memory read that must be waited for before its register is used.
_CLOCK_ASM = {
    "cuda": ("mov.u64 $0, %globaltimer;", "=l", 1),
    "hip": ("s_memrealtime $0\ns_waitcnt lgkmcnt(0)", "=s", 10),
}


def _clock_ns(_semantic=None):
    """The clock of wherever the kernel runs, as an int64 scalar (the body of ``clock_ns``).

    CPU ranks: the interpreter runs this as Python in the middle of a launch, so it reads the
    host's clock anew at each call (a constexpr function could too, but Triton's dependency scan
    rejects ``time.monotonic_ns`` in one when it compiles). Compiled: the target comes from the
    code generator's options (``backend_name``), which name the target being generated for even
    in a process whose active driver is another or none (compile-only checks).
    """
    if INTERPRETED:
        return tl.cast(time.monotonic_ns(), tl.int64)
    backend = _semantic.builder.options.backend_name
    if backend not in _CLOCK_ASM:
        raise NotImplementedError(
            f"iris.mem.triton.clock_ns (which bounded waits read) was compiled for the {backend!r} backend, "
            f"which has no device clock here; it reads one on {', '.join(_CLOCK_ASM)} GPUs and on CPU ranks"
        )
    asm, constraint, ns_per_tick = _CLOCK_ASM[backend]
    ticks = tl.inline_asm_elementwise(asm, constraint, [], dtype=tl.int64, is_pure=False, pack=1, _semantic=_semantic)
    if ns_per_tick == 1:
        return ticks
    return ticks.__mul__(ns_per_tick, _semantic=_semantic)


_clock_ns.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


@triton.jit
def clock_ns():
    """Nanoseconds of the device clock, an int64 scalar: for durations, not for dates.

    NVIDIA: ``%globaltimer``; AMD: ``s_memrealtime`` (100 MHz, scaled to nanoseconds); CPU ranks:
    the host's ``time.monotonic_ns()``. The clock a bounded ``wait`` measures its bound with.
    """
    return _clock_ns()


@triton.jit
def _extensions(context_ptr):
    """Where the context's extensions start: right after the W heap bases."""
    return context_ptr + _BASES + tl.load(context_ptr + _WORLD_SIZE)


@triton.jit
def wait_timeout_ns(context_ptr):
    """The bound of a device-side wait (``heap.wait_timeout``), int64 nanoseconds of ``clock_ns``.

    For layers that write their own bounded loops (polling more than flags), so that they give up
    no sooner than ``wait`` does and without reading the context's layout themselves.
    """
    return tl.load(_extensions(context_ptr) + _WAIT_TIMEOUT_NS)


def _every_thread(_semantic=None):
    """Lanes of the reduction that gives every thread of a program the same value. Compiled: at
    least one per thread (1024 threads: 32 warps of 32, 16 of 64), so no warp holds a replica of
    another's lanes and the reduction crosses the warps through shared memory, which every thread
    then reads. CPU ranks, where a program is one thread (the interpreter calls this without the
    code generator's semantic): one, since the interpreter reduces lane by lane in Python."""
    return tl.constexpr(1 if _semantic is None else 1024)


_every_thread.__triton_builtin__ = True  # compiled: called with the code generator's _semantic
#: What a thread that saw an error contributes to ``elapsed_ns``'s reduction (no wait is this long).
_ERRORED = tl.constexpr(2**62)


@triton.jit
def _program_max(x):
    """The largest ``x`` any thread of the program holds, the same on every thread.

    A per-thread read (the clock, a volatile load) may differ between warps; a branch on it would
    send them different ways, and warps that part meet each other's barriers (every reduction and
    every polled atomic has them). Atomics need none of this: their result reaches every thread
    through shared memory already (protocol notes in iris.ccl.protocol).
    """
    LANES: tl.constexpr = _every_thread()
    return tl.max(tl.zeros([LANES], x.dtype) + x, axis=0)


def polls_per_clock(_semantic=None):
    """Polls of a bounded wait between two readings of ``elapsed_ns`` (a constexpr): compiled,
    ``iris.mem.common.POLLS_PER_CLOCK``; on CPU ranks (the interpreter calls it without the code
    generator's semantic), 1. For layers' own bounded loops: ``if polls % polls_per_clock() == 0:``
    keeps every warp on the same branch (the poll count is the same on every thread)."""
    return tl.constexpr(1 if _semantic is None else _common.POLLS_PER_CLOCK)


polls_per_clock.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


@triton.jit
def _no_error(extensions):
    return tl.load(extensions + _ERROR_CODE, volatile=True) == 0


@triton.jit
def healthy(context_ptr):
    """Whether no device error is recorded in the context, the same answer on every thread of the
    program (each reads ``EXT_ERROR_CODE`` volatile; one that sees an error decides for all)."""
    return _program_max((_no_error(_extensions(context_ptr)) == 0).to(tl.int32)) == 0


@triton.jit
def elapsed_ns(context_ptr, start):
    """Nanoseconds of ``clock_ns`` since ``start`` (a ``clock_ns()`` of this program), or -1 once
    the context holds an error: the same answer on every thread of the program.

    For bounded loops (``wait``'s, and layers' own that poll more than flags): a condition on it
    keeps every warp on the same branch. Each thread reads the clock and the error word; one
    reduction gives every thread the longest time any read (so a bound is never met sooner than
    by a thread's own clock), or -1 when any saw an error.
    """
    waited = tl.where(_no_error(_extensions(context_ptr)), clock_ns() - start, _ERRORED)
    agreed = _program_max(waited)
    return tl.where(agreed >= _ERRORED, -1, agreed)


@triton.jit
def record_error(context_ptr, code, detail, value, peer, aux):
    """Record device error ``code`` (an ``ERROR_*`` of ``iris.heap.context``) unless one is recorded.

    The first error wins: a CAS of the context's ``EXT_ERROR_CODE`` word from 0 (acq_rel, sys
    scope), which every bounded wait reads to stop at once. The winner fills the host-visible
    error record: ``detail``, ``value``, ``peer`` and ``aux`` (int64; their meaning is the code's),
    then ``code`` last with a release exchange, so a host that sees the code sees the rest
    (``heap.check_device_errors()`` raises it without a device sync). Returns whether this call
    won. Scalars only: one thread of the program does the work.
    """
    code64 = tl.cast(code, tl.int64)
    ext = _extensions(context_ptr)
    won = tl.atomic_cas(ext + _ERROR_CODE, tl.cast(0, tl.int64), code64, sem="acq_rel", scope="sys") == 0
    if won:
        record = tl.load(ext + _ERROR_RECORD).to(tl.pointer_type(tl.int64), bitcast=True)
        # Scalar stores and atomics run on the same (first) thread: program order, then release.
        tl.store(record + _RECORD_DETAIL, tl.cast(detail, tl.int64))
        tl.store(record + _RECORD_VALUE, tl.cast(value, tl.int64))
        tl.store(record + _RECORD_PEER, tl.cast(peer, tl.int64))
        tl.store(record + _RECORD_AUX, tl.cast(aux, tl.int64))
        tl.atomic_xchg(record + _RECORD_CODE, code64, sem="release", scope="sys")
    return won


@triton.jit
def _record_if_closed(context_ptr, world_size):
    """Record ERROR_HEAP_CLOSED when the context is a closed heap's (one scalar load otherwise)."""
    if tl.load(context_ptr + _BASES + world_size + _STATUS) == _STATUS_CLOSED:
        record_error(context_ptr, _ERROR_HEAP_CLOSED, 0, 0, -1, 0)


# -- bounded wait ----------------------------------------------------------------------------------


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
        base = tl.load(context_ptr + _BASES + tl.load(context_ptr + _RANK))
        offset, last = _first_missed(flag_ptr, seen, _holds(seen, value, op), base)
        record_error(context_ptr, _ERROR_WAIT_TIMEOUT, offset, last, -1, waited)
    return ok & done
