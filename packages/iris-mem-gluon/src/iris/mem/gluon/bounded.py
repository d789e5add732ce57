"""What a bounded loop is written with: the device clock and the bound of a wait (``clock_ns``,
``wait_timeout_ns``, ``elapsed_ns``, ``polls_per_clock``), the error record a loop writes when it
gives up (``record_error``), and the answer every thread of a program agrees on (``healthy``), all
read through the context's extensions."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.heap import context as _abi
from iris.mem import common as _common
from iris.mem.common.target import target_builtin

from ._internals import clock_ns_asm as _clock_ns
from ._internals import on_cpu as _on_cpu

__all__ = ["record_error", "healthy", "clock_ns", "wait_timeout_ns", "elapsed_ns", "polls_per_clock"]


@gluon.jit
def _extensions(context_ptr):
    """Where the context's extensions start: right after the W heap bases."""
    return context_ptr + _abi.BASES_INDEX + gl.load(context_ptr + _abi.WORLD_SIZE_INDEX)


@target_builtin
def _every_thread(target):
    """Lanes of the reduction that gives every thread of a program the same value. Compiled: at
    least one per thread (1024 threads: 32 warps of 32, 16 of 64), in a layout that spreads them
    over every thread (``_every_thread_layout``), so the reduction crosses the warps through
    shared memory, which every thread then reads. CPU ranks, where a program is one thread: one,
    since the interpreter reduces lane by lane in Python."""
    return 1 if _on_cpu(target) else 1024


@target_builtin
def _every_thread_layout(target):
    """A 1-D layout over every thread of the program: the compile target's warp size and the
    launch's warps, from the code generator's options (``iris.mem.common.target``). CPU ranks run
    the kernel as Python and drop layouts: any serves there."""
    if _on_cpu(target):
        return gl.BlockedLayout([1], [32], [1], [0])
    return gl.BlockedLayout([1], [target.warp_size], [target.num_warps], [0])


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
    return gl.load(extensions + _abi.EXT_ERROR_CODE, volatile=True) == 0


@gluon.jit
def healthy(context_ptr):
    """Whether no device error is recorded in the context, the same answer on every thread of the
    program (each reads ``EXT_ERROR_CODE`` volatile; one that sees an error decides for all)."""
    return _program_max((_no_error(_extensions(context_ptr)) == 0).to(gl.int32)) == 0


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
    won = gl.atomic_cas(ext + _abi.EXT_ERROR_CODE, gl.cast(0, gl.int64), code64, sem="acq_rel", scope="sys") == 0
    if won:
        record = gl.load(ext + _abi.EXT_ERROR_RECORD).to(gl.pointer_type(gl.int64), bitcast=True)
        # Scalar stores and atomics run on the same (first) thread: program order, then release.
        gl.store(record + _abi.RECORD_DETAIL, gl.cast(detail, gl.int64))
        gl.store(record + _abi.RECORD_VALUE, gl.cast(value, gl.int64))
        gl.store(record + _abi.RECORD_PEER, gl.cast(peer, gl.int64))
        gl.store(record + _abi.RECORD_AUX, gl.cast(aux, gl.int64))
        gl.atomic_xchg(record + _abi.RECORD_CODE, code64, sem="release", scope="sys")
    return won


@gluon.jit
def _record_if_closed(context_ptr, world_size):
    """Record ERROR_HEAP_CLOSED when the context is a closed heap's (one scalar load otherwise)."""
    if gl.load(context_ptr + _abi.BASES_INDEX + world_size + _abi.EXT_STATUS) == _abi.STATUS_CLOSED:
        record_error(context_ptr, _abi.ERROR_HEAP_CLOSED, 0, 0, -1, 0)


# -- the clock and the bound of a wait --------------------------------------------------------------


@gluon.jit
def clock_ns():
    """Nanoseconds of the device clock, an int64 scalar: for durations, not for dates.

    NVIDIA: ``%globaltimer``; AMD: ``s_memrealtime`` (100 MHz, scaled to nanoseconds); CPU ranks:
    the host's ``time.monotonic_ns()``. The clock a bounded ``wait`` measures its bound with.
    """
    return _clock_ns()


@gluon.jit
def wait_timeout_ns(context_ptr):
    """The bound of a device-side wait (``heap.wait_timeout``), int64 nanoseconds of ``clock_ns``.

    For layers that write their own bounded loops (polling more than flags), so that they give up
    no sooner than ``wait`` does and without reading the context's layout themselves.
    """
    return gl.load(_extensions(context_ptr) + _abi.EXT_WAIT_TIMEOUT_NS)


@target_builtin
def polls_per_clock(target):
    """Polls of a bounded wait between two readings of ``elapsed_ns`` (a constexpr): compiled,
    ``iris.mem.common.POLLS_PER_CLOCK``; on CPU ranks, 1. For layers' own bounded loops:
    ``if polls % polls_per_clock() == 0:`` keeps every warp on the same branch (the poll count is
    the same on every thread)."""
    return 1 if _on_cpu(target) else _common.POLLS_PER_CLOCK


#: What a thread that saw an error contributes to ``elapsed_ns``'s reduction (no wait is this long).
_ERRORED = gl.constexpr(2**62)


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
