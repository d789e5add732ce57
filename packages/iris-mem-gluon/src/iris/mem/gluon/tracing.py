"""Device-side tracing from Gluon kernels: ``Tracing`` (a Gluon aggregate), the free functions it is
written on, and ``device_clock`` (the device clock read from the host, for ``heap.tracing.enable``).

The names, arguments and semantics are those of the Triton layer's ``Tracing`` (one API for both
device layers; the conformance suite's tracing checks run on both), and the buffer is
``iris.heap.context``'s ``TRACE_*``/``EVENT_*`` layout, which ``heap.tracing`` reads whichever layer
wrote it. Inside ``@gluon.jit``::

    tr = Tracing.initialize(context_ptr, TRACE)          # TRACE: gl.constexpr; False compiles every call away
    h = tr.record_start(EVENT, target_rank, nbytes)      # EVENT: an id from iris.heap.tracing (EVENTS or register)
    ...                                                  # the work being timed
    tr.record_end(h)
    tr.record_instant(EVENT, target_rank, nbytes)        # one moment

Every event claims its slot with one relaxed scalar ``gl.atomic_add`` (scope ``gpu``: only this
rank's device writes its buffer; the host reads it after synchronizing with the device) on the
buffer's claim counter. A claim at or past the capacity writes nothing and the host counts it as
dropped; ``record_end`` of such a handle (-1) writes nothing either. An event holds its start and
end on ``clock_ns`` (NVIDIA ``%globaltimer``, AMD ``s_memrealtime``, CPU ranks the host's monotonic
clock), the program (grid position flattened as ``x + nx * (y + ny * z)``), the multiprocessor
(NVIDIA ``%smid``; AMD gfx94x/gfx95x ``XCC_ID << 8 | HW_ID[15:8]``, other gfx9 ``HW_ID[15:8]``;
other targets and CPU ranks 0), the rank, and the target rank and bytes the caller gives.
``record_start`` reads the clock after its bookkeeping, ``record_end`` and ``record_instant``
before theirs, so an interval times only what lies between the calls.

``TRACE`` (``ENABLED``) False: ``Tracing.initialize`` reads nothing and every method is a constant,
so the kernel compiles to the untraced kernel. True with tracing off at run time (disabled, or the
heap closed: capacity 0): each call is one comparison and writes nothing.

Scalars only, layout-free, as ``ops.record_error`` writes the error record: Gluon runs a scalar
atomic or store once per program, so record from the program's scalar code, not per element.
"""

# no `from __future__ import annotations`: triton 3.6 checks fields with isinstance(value, annotation).

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.heap import context as _abi
from iris.mem.common import aggregate

from . import ops
from ._cpu import interpret
from ._internals import sm_id_asm as _sm_id
from .ops import clock_ns

__all__ = ["Tracing", "device_clock", "trace_state", "record_start", "record_end", "record_instant"]

# Device code reads the context and the buffer's layout as attributes of iris.heap.context (_abi.*):
# the code generator takes a module's int attributes as constants, on triton 3.6 and 3.9.


@gluon.jit
def sm_id():
    """The multiprocessor this program runs on (int64; per target as in the module's docstring)."""
    return _sm_id()


@gluon.jit
def program_id():
    """This program's position in the grid, flattened: ``x + nx * (y + ny * z)`` (int64)."""
    x = gl.program_id(0).to(gl.int64)
    y = gl.program_id(1).to(gl.int64)
    z = gl.program_id(2).to(gl.int64)
    return x + gl.num_programs(0).to(gl.int64) * (y + gl.num_programs(1).to(gl.int64) * z)


# -- the free functions ----------------------------------------------------------------------------


@gluon.jit
def trace_state(context_ptr):
    """``(buffer, capacity, rank)`` of this rank's tracing, from the context ``heap.context``.

    ``buffer`` points at the trace buffer's int64 words; ``capacity`` is 0 while tracing is off
    (disabled, or the heap closed: its buffer is gone), and the record functions then do nothing.
    """
    ext = ops._extensions(context_ptr)
    capacity = gl.load(ext + _abi.EXT_TRACE_CAPACITY)
    if gl.load(ext + _abi.EXT_STATUS) == _abi.STATUS_CLOSED:
        capacity = capacity * 0
    buffer = gl.load(ext + _abi.EXT_TRACE_BUFFER).to(gl.pointer_type(gl.int64), bitcast=True)
    return buffer, capacity, gl.load(context_ptr + _abi.RANK_INDEX)


@gluon.jit
def _claim(buffer, capacity):
    """A slot of the buffer for one event, or -1 (tracing off, or the buffer full: dropped)."""
    slot = capacity * 0 - 1
    if capacity > 0:
        claimed = gl.atomic_add(buffer + _abi.TRACE_CLAIMED, gl.cast(1, gl.int64), sem="relaxed", scope="gpu")
        if claimed < capacity:
            slot = claimed
    return slot


@gluon.jit
def _event_ptr(buffer, slot):
    return buffer + _abi.TRACE_HEADER_WORDS + slot * _abi.TRACE_EVENT_WORDS


@gluon.jit
def _describe(event, id_word, rank, target_rank, nbytes):
    """Every word of a claimed event but its times."""
    gl.store(event + _abi.EVENT_ID, id_word)
    gl.store(event + _abi.EVENT_PROGRAM, program_id())
    gl.store(event + _abi.EVENT_SM, sm_id())
    gl.store(event + _abi.EVENT_RANK, gl.cast(rank, gl.int64))
    gl.store(event + _abi.EVENT_TARGET_RANK, gl.cast(target_rank, gl.int64))
    gl.store(event + _abi.EVENT_BYTES, gl.cast(nbytes, gl.int64))


@gluon.jit
def record_start(buffer, capacity, rank, event_id, target_rank, nbytes):
    """Start event ``event_id``; returns its handle for ``record_end`` (-1: not recorded).

    The claim, then the event's words, then the clock, last. ``buffer, capacity, rank`` come from
    ``trace_state``.
    """
    slot = _claim(buffer, capacity)
    if slot >= 0:
        event = _event_ptr(buffer, slot)
        _describe(event, gl.cast(event_id, gl.int64), rank, target_rank, nbytes)
        gl.store(event + _abi.EVENT_START_NS, clock_ns())
    return slot


@gluon.jit
def record_end(buffer, capacity, handle):
    """End the event ``handle`` (from ``record_start``) at the clock now; a handle of -1 writes nothing."""
    if (handle >= 0) & (handle < capacity):
        now = clock_ns()
        gl.store(_event_ptr(buffer, handle) + _abi.EVENT_END_NS, now)


@gluon.jit
def record_instant(buffer, capacity, rank, event_id, target_rank, nbytes):
    """Record one moment (the clock read first): start and end both that moment, ``EVENT_INSTANT``
    added to the id word."""
    now = clock_ns()
    slot = _claim(buffer, capacity)
    if slot >= 0:
        event = _event_ptr(buffer, slot)
        _describe(event, gl.cast(event_id, gl.int64) + _abi.EVENT_INSTANT, rank, target_rank, nbytes)
        gl.store(event + _abi.EVENT_START_NS, now)
        gl.store(event + _abi.EVENT_END_NS, now)


# -- the aggregate ---------------------------------------------------------------------------------


@aggregate
class Tracing:
    """This rank's trace buffer inside a Gluon kernel: ``Tracing.initialize(heap.context, ENABLED)``.

    ``enabled`` is ``initialize``'s constexpr; ``buffer``, ``capacity`` and ``rank`` are what
    ``trace_state`` reads (constants when not enabled). The methods call the free functions with
    them and add nothing.
    """

    enabled: gl.constexpr
    buffer: gl.tensor
    capacity: gl.tensor
    rank: gl.tensor

    def __init__(self, enabled, buffer, capacity, rank):
        self.enabled = gl.constexpr(enabled)
        self.buffer = buffer
        self.capacity = capacity
        self.rank = rank

    @staticmethod
    @gluon.jit
    def initialize(context_ptr, ENABLED: gl.constexpr):
        """The trace buffer's address and capacity and the rank, from ``heap.context``.

        ``ENABLED`` False: nothing is read and every call on the result compiles to nothing.
        """
        if ENABLED:
            buffer, capacity, rank = trace_state(context_ptr)
        else:
            buffer = context_ptr.to(gl.pointer_type(gl.int64), bitcast=True)  # never dereferenced
            capacity = gl.cast(0, gl.int64)
            rank = gl.cast(0, gl.int64)
        return Tracing(ENABLED, buffer, capacity, rank)

    @gluon.jit
    def record_start(self, event_id, target_rank, nbytes):
        """Start event ``event_id`` acting on ``target_rank`` with ``nbytes``; the handle for ``record_end``."""
        if self.enabled:
            handle = record_start(self.buffer, self.capacity, self.rank, event_id, target_rank, nbytes)
        else:
            handle = gl.cast(-1, gl.int64)
        return handle

    @gluon.jit
    def record_end(self, handle):
        """End the event ``handle`` (-1, not recorded: nothing)."""
        if self.enabled:
            record_end(self.buffer, self.capacity, handle)

    @gluon.jit
    def record_instant(self, event_id, target_rank, nbytes):
        """Record one moment: event ``event_id`` acting on ``target_rank`` with ``nbytes``."""
        if self.enabled:
            record_instant(self.buffer, self.capacity, self.rank, event_id, target_rank, nbytes)


# -- the device clock, read from the host ----------------------------------------------------------


@gluon.jit
def _clock_kernel(out_ptr):
    gl.store(out_ptr, clock_ns())


def device_clock(device=None) -> int:
    """The device clock now, in the nanoseconds kernels record (``clock_ns``), read from the host.

    A one-program Gluon kernel stores ``clock_ns()`` and the call waits for it: the value was read
    between the call and its return. It is the ``clock`` ``heap.tracing.enable`` needs on CUDA heaps
    (``heap.tracing.enable(clock=iris.mem.gluon.device_clock)``), for programs that use this layer
    alone. ``device``: a CUDA device (default: the current one) or ``"cpu"`` (CPU
    ranks, under ``TRITON_INTERPRET=1``: the host's monotonic clock; the launch enters
    :class:`interpret` itself).
    """
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    out = torch.zeros(1, dtype=torch.int64, device=device)
    if device.type == "cuda":
        with torch.cuda.device(device):
            _clock_kernel[(1,)](out, num_warps=1)
    else:
        with interpret():
            _clock_kernel[(1,)](out, num_warps=1)
    return int(out.item())  # waits for the kernel
