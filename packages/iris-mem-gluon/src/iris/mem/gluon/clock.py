"""The device clock and the bound of a wait: ``clock_ns``, ``wait_timeout_ns``, ``elapsed_ns`` and
``polls_per_clock``, what bounded loops (``wait``'s, and layers' own) are written with."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.heap import context as _abi
from iris.mem import common as _common
from iris.mem.common.target import target_builtin

from ._internals import clock_ns_asm as _clock_ns
from ._internals import on_cpu as _on_cpu
from .errors import _extensions, _no_error, _program_max

__all__ = ["clock_ns", "wait_timeout_ns", "elapsed_ns", "polls_per_clock"]


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
