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
"""

from __future__ import annotations

import time

import triton.language as tl
from triton import constexpr_function
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.heap import context as _abi
from iris.mem import common as _common

from . import _cpu

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

#: Every heap base is a multiple of this many bytes (page- or allocation-aligned in practice).
BASE_ALIGNMENT = gl.constexpr(_abi.BASE_ALIGNMENT)

# The device context (iris.heap.context), as constexprs: device code reads it through these only.
_RANK = gl.constexpr(_abi.RANK_INDEX)
_WORLD_SIZE = gl.constexpr(_abi.WORLD_SIZE_INDEX)
_BASES = gl.constexpr(_abi.BASES_INDEX)
_WAIT_TIMEOUT_NS = gl.constexpr(_abi.EXT_WAIT_TIMEOUT_NS)  # extensions: offsets after the W bases
_ERROR_CODE = gl.constexpr(_abi.EXT_ERROR_CODE)
_ERROR_RECORD = gl.constexpr(_abi.EXT_ERROR_RECORD)
_STATUS = gl.constexpr(_abi.EXT_STATUS)
_STATUS_CLOSED = gl.constexpr(_abi.STATUS_CLOSED)
_RECORD_CODE = gl.constexpr(_abi.RECORD_CODE)  # words of the error record
_RECORD_DETAIL = gl.constexpr(_abi.RECORD_DETAIL)
_RECORD_VALUE = gl.constexpr(_abi.RECORD_VALUE)
_RECORD_PEER = gl.constexpr(_abi.RECORD_PEER)
_RECORD_AUX = gl.constexpr(_abi.RECORD_AUX)
_ERROR_WAIT_TIMEOUT = gl.constexpr(_abi.ERROR_WAIT_TIMEOUT)
_ERROR_HEAP_CLOSED = gl.constexpr(_abi.ERROR_HEAP_CLOSED)

#: Element types whose atomics are real (cross-process) atomics on CPU ranks (Triton's interpreter).
_CROSS_PROCESS = ("int32", "uint32", "int64", "uint64", "fp32", "fp64")
_CROSS_PROCESS_INT = ("int32", "uint32", "int64", "uint64")
_INTEGER_ONLY = ("atomic_xchg", "atomic_and", "atomic_or", "atomic_xor")


class InterpreterAtomicError(TypeError):
    """An atomic that CPU ranks (Triton's interpreter) cannot perform atomically across processes."""


@constexpr_function
def _check_atomic(dtype, op):
    """Raise InterpreterAtomicError for ``op`` on ``dtype`` on CPU ranks; nothing when compiled."""
    if not _cpu._state.launches:
        return True
    name = getattr(dtype, "name", str(dtype))
    allowed = _CROSS_PROCESS_INT if op in _INTEGER_ONLY else _CROSS_PROCESS
    if name not in allowed:
        raise InterpreterAtomicError(
            f"iris.mem.gluon.{op} on {name} elements is not atomic across processes on CPU ranks "
            f"(Triton's interpreter); it works compiled on a GPU. On CPU ranks use "
            f"{'/'.join(allowed)} elements for {op}."
        )
    return True


@constexpr_function
def _align_elements(dtype):
    """BASE_ALIGNMENT in elements of ``dtype`` (a byte delta between bases divides by it exactly)."""
    size = max(1, dtype.primitive_bitwidth // 8)
    return max(1, BASE_ALIGNMENT.value // size)


@constexpr_function
def _sem(sem):
    return _abi.SEM_DEFAULT if sem is None else sem


@constexpr_function
def _scope(scope):
    return _abi.SCOPE_DEFAULT if scope is None else scope


@constexpr_function
def _comparison(cmp):
    cmp = _abi.WAIT_COMPARISONS[0] if cmp is None else cmp  # None: the first, "=="
    if cmp not in _abi.WAIT_COMPARISONS:
        raise ValueError(f"iris.mem.gluon.wait: cmp must be one of {', '.join(_abi.WAIT_COMPARISONS)}, got {cmp!r}")
    return cmp


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


# -- translation and plain accesses ------------------------------------------------------------


@gluon.jit
def translate(ptr, cur_rank, to_rank, heap_bases, hint: gl.constexpr = None):
    """``ptr`` (cur_rank's heap) -> the same place in ``to_rank``'s heap, as mapped in this process.

    Adds the distance between the two bases in whole elements, so the result keeps the layout,
    contiguity and alignment the compiler knows of ``ptr`` (vector accesses stay vector accesses).
    ``hint`` (constexpr int or tuple) additionally asserts ``multiple_of``/``max_contiguous``.
    """
    delta = gl.load(heap_bases + to_rank) - gl.load(heap_bases + cur_rank)
    # delta is a multiple of BASE_ALIGNMENT bytes: writing it so tells the compiler too.
    delta = (delta // BASE_ALIGNMENT) * _align_elements(ptr.dtype.element_ty)
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


# -- atomics -------------------------------------------------------------------------------------


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

    CPU ranks: CPU execution runs this as Python in the middle of a launch, so it reads the host's
    clock anew at each call (a constexpr function could too, but Triton's dependency scan rejects
    ``time.monotonic_ns`` in one when it compiles). Compiled: the target comes from the code
    generator's options (``backend_name``), which name the target being generated for even in a
    process whose active driver is another or none (compile-only checks).
    """
    if _cpu._state.launches:
        return gl.cast(time.monotonic_ns(), gl.int64)
    backend = _semantic.builder.options.backend_name
    if backend not in _CLOCK_ASM:
        raise NotImplementedError(
            f"iris.mem.gluon.clock_ns (which bounded waits read) was compiled for the {backend!r} backend, "
            f"which has no device clock here; it reads one on {', '.join(_CLOCK_ASM)} GPUs and on CPU ranks"
        )
    asm, constraint, ns_per_tick = _CLOCK_ASM[backend]
    ticks = gl.inline_asm_elementwise(asm, constraint, [], dtype=gl.int64, is_pure=False, pack=1, _semantic=_semantic)
    if ns_per_tick == 1:
        return ticks
    return ticks.__mul__(ns_per_tick, _semantic=_semantic)


_clock_ns.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


@gluon.jit
def clock_ns():
    """Nanoseconds of the device clock, an int64 scalar: for durations, not for dates.

    NVIDIA: ``%globaltimer``; AMD: ``s_memrealtime`` (100 MHz, scaled to nanoseconds); CPU ranks:
    the host's ``time.monotonic_ns()``. The clock a bounded ``wait`` measures its bound with.
    """
    return _clock_ns()


@gluon.jit
def _extensions(context_ptr):
    """Where the context's extensions start: right after the W heap bases."""
    return context_ptr + _BASES + gl.load(context_ptr + _WORLD_SIZE)


@gluon.jit
def wait_timeout_ns(context_ptr):
    """The bound of a device-side wait (``heap.wait_timeout``), int64 nanoseconds of ``clock_ns``.

    For layers that write their own bounded loops (polling more than flags), so that they give up
    no sooner than ``wait`` does and without reading the context's layout themselves.
    """
    return gl.load(_extensions(context_ptr) + _WAIT_TIMEOUT_NS)


def _on_cpu(semantic) -> bool:
    """Whether a builtin runs inside a CPU launch (no code generator), not in a compilation."""
    return semantic is None or bool(_cpu._state.launches)


def polls_per_clock(_semantic=None):
    """Polls of a bounded wait between two readings of ``elapsed_ns`` (a constexpr): compiled,
    ``iris.mem.common.POLLS_PER_CLOCK``; on CPU ranks, 1. For layers' own bounded loops:
    ``if polls % polls_per_clock() == 0:`` keeps every warp on the same branch (the poll count is
    the same on every thread)."""
    return gl.constexpr(1 if _on_cpu(_semantic) else _common.POLLS_PER_CLOCK)


polls_per_clock.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


def _every_thread(_semantic=None):
    """Lanes of the reduction that gives every thread of a program the same value. Compiled: at
    least one per thread (1024 threads: 32 warps of 32, 16 of 64), in a layout that spreads them
    over every thread (``_every_thread_layout``), so the reduction crosses the warps through
    shared memory, which every thread then reads. CPU ranks, where a program is one thread: one,
    since the interpreter reduces lane by lane in Python."""
    return gl.constexpr(1 if _on_cpu(_semantic) else 1024)


_every_thread.__triton_builtin__ = True  # compiled: called with the code generator's _semantic
#: What a thread that saw an error contributes to ``elapsed_ns``'s reduction (no wait is this long).
_ERRORED = gl.constexpr(2**62)


def _every_thread_layout(_semantic=None):
    """A 1-D layout over every thread of the program: the compile target's warp size and the
    launch's warps, from the code generator's options (as ``_clock_ns`` reads its backend). CPU
    ranks run the kernel as Python and drop layouts: any serves there."""
    if _on_cpu(_semantic):
        return gl.constexpr(gl.BlockedLayout([1], [32], [1], [0]))
    options = _semantic.builder.options
    return gl.constexpr(gl.BlockedLayout([1], [options.warp_size], [options.num_warps], [0]))


_every_thread_layout.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


@gluon.jit
def _program_max(x):
    """The largest ``x`` (a scalar) any thread of the program holds, the same on every thread.

    A per-thread read (the clock, a volatile load) may differ between warps; a branch on it would
    send them different ways, and warps that part meet each other's barriers (every reduction and
    every polled atomic has them). Atomics need none of this: their result reaches every thread
    through shared memory already (protocol notes in iris.ccl.protocol).
    """
    LANES: gl.constexpr = _every_thread()
    L: gl.constexpr = _every_thread_layout()
    return gl.max(gl.zeros([LANES], x.dtype, layout=L) + x, axis=0)


@gluon.jit
def _no_error(extensions):
    return gl.load(extensions + _ERROR_CODE, volatile=True) == 0


@gluon.jit
def healthy(context_ptr):
    """Whether no device error is recorded in the context, the same answer on every thread of the
    program (each reads ``EXT_ERROR_CODE`` volatile; one that sees an error decides for all)."""
    return _program_max((_no_error(_extensions(context_ptr)) == 0).to(gl.int32)) == 0


@gluon.jit
def elapsed_ns(context_ptr, start):
    """Nanoseconds of ``clock_ns`` since ``start`` (a ``clock_ns()`` of this program), or -1 once
    the context holds an error: the same answer on every thread of the program.

    For bounded loops (``wait``'s, and layers' own that poll more than flags): a condition on it
    keeps every warp on the same branch. Each thread reads the clock and the error word; one
    reduction gives every thread the longest time any read (so a bound is never met sooner than
    by a thread's own clock), or -1 when any saw an error.
    """
    waited = gl.where(_no_error(_extensions(context_ptr)), clock_ns() - start, _ERRORED)
    agreed = _program_max(waited)
    return gl.where(agreed >= _ERRORED, -1, agreed)


@gluon.jit
def record_error(context_ptr, code, detail, value, peer, aux):
    """Record device error ``code`` (an ``ERROR_*`` of ``iris.heap.context``) unless one is recorded.

    The first error wins: a CAS of the context's ``EXT_ERROR_CODE`` word from 0 (acq_rel, sys
    scope), which every bounded wait reads to stop at once. The winner fills the host-visible
    error record: ``detail``, ``value``, ``peer`` and ``aux`` (int64; their meaning is the code's),
    then ``code`` last with a release exchange, so a host that sees the code sees the rest
    (``heap.check_device_errors()`` raises it without a device sync). Returns whether this call
    won. Scalars only (scalar pointers and values: what Gluon's atomics accept without a layout);
    one thread of the program does the work.
    """
    code64 = gl.cast(code, gl.int64)
    ext = _extensions(context_ptr)
    won = gl.atomic_cas(ext + _ERROR_CODE, gl.cast(0, gl.int64), code64, sem="acq_rel", scope="sys") == 0
    if won:
        record = gl.load(ext + _ERROR_RECORD).to(gl.pointer_type(gl.int64), bitcast=True)
        # Scalar stores and atomics run on the same (first) thread: program order, then release.
        gl.store(record + _RECORD_DETAIL, gl.cast(detail, gl.int64))
        gl.store(record + _RECORD_VALUE, gl.cast(value, gl.int64))
        gl.store(record + _RECORD_PEER, gl.cast(peer, gl.int64))
        gl.store(record + _RECORD_AUX, gl.cast(aux, gl.int64))
        gl.atomic_xchg(record + _RECORD_CODE, code64, sem="release", scope="sys")
    return won


@gluon.jit
def _record_if_closed(context_ptr, world_size):
    """Record ERROR_HEAP_CLOSED when the context is a closed heap's (one scalar load otherwise)."""
    if gl.load(context_ptr + _BASES + world_size + _STATUS) == _STATUS_CLOSED:
        record_error(context_ptr, _ERROR_HEAP_CLOSED, 0, 0, -1, 0)


# -- bounded wait ----------------------------------------------------------------------------------


@gluon.jit
def _holds(seen, value, cmp: gl.constexpr):
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


@gluon.jit
def _poll(flag_ptr):
    return gl.atomic_add(flag_ptr, _value_like(0, flag_ptr), sem="acquire", scope="sys")


@gluon.jit
def _every(holds):
    """Whether every lane of a 1-D block of conditions holds (a scalar condition as it is)."""
    if holds.type.is_block():
        out = gl.min(holds.to(gl.int32), axis=0) != 0
    else:
        out = holds
    return out


@gluon.jit
def _first_missed(flag_ptr, seen, holds, base):
    """(heap offset, value) of the lowest-addressed flag that does not hold (a scalar flag: itself)."""
    offset = flag_ptr.to(gl.int64, bitcast=True) - base
    value = seen.to(gl.int64)
    if holds.type.is_block():
        missed = gl.where(holds, 2**62, offset)
        first = gl.min(missed, axis=0)
        value = gl.max(gl.where(missed == first, value, -(2**62)), axis=0)
        offset = first
    return offset, value


@gluon.jit
def wait(flag_ptr, value, context_ptr, cmp: gl.constexpr = None):
    """Spin (acquire, sys scope) until the LOCAL flag at ``flag_ptr`` satisfies ``flag cmp value``.

    ``flag_ptr`` is a scalar pointer or a 1-D block of pointers; a block waits until every flag in
    it holds, polling them all at once (the same flag may appear in several lanes). Returns True
    when they do. Returns False at once while the context holds an error (recorded before the wait
    or during it), and once the context's bound (``EXT_WAIT_TIMEOUT_NS``, ``heap.wait_timeout``)
    has passed on the device clock (``clock_ns``) with the flags last seen not holding: never
    sooner, and later by at most ``polls_per_clock()`` polls (the clock and the error word are read
    every that many polls: microseconds). A timeout records ERROR_WAIT_TIMEOUT (``record_error``:
    the first error wins) with the heap offset and last value of the (lowest-addressed) flag that
    did not hold and the nanoseconds waited, which ``heap.check_device_errors()`` raises as
    ``WaitTimeoutError``. ``cmp``: "==" (None), "!=", ">=", ">", "<=", "<".
    """
    op: gl.constexpr = _comparison(cmp)
    bound = wait_timeout_ns(context_ptr)
    start = clock_ns()
    waited = elapsed_ns(context_ptr, start)  # -1: the context holds an error
    seen = _poll(flag_ptr)
    done = _every(_holds(seen, value, op))
    EVERY: gl.constexpr = polls_per_clock()
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
        base = gl.load(context_ptr + _BASES + gl.load(context_ptr + _RANK))
        offset, last = _first_missed(flag_ptr, seen, _holds(seen, value, op), base)
        record_error(context_ptr, _ERROR_WAIT_TIMEOUT, offset, last, -1, waited)
    return ok & done


_HAS_BARRIER = gl.constexpr(_common.gluon_has_barrier())


@gluon.jit
def barrier():
    """Synchronize the threads of the program (CTA); a no-op on CPU ranks."""
    if _HAS_BARRIER:
        gl.barrier()
    else:
        gl.thread_barrier()
