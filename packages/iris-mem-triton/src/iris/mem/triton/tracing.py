"""Device-side tracing: ``Tracing`` (a Triton aggregate), the free functions it is written on, and
``device_clock`` (the device clock read from the host, for ``heap.tracing.enable``).

Inside ``@triton.jit``::

    tr = Tracing.initialize(context_ptr, TRACE)          # TRACE: tl.constexpr; False compiles every call away
    h = tr.record_start(EVENT, target_rank, nbytes)      # EVENT: an id from iris.heap.tracing (EVENTS or register)
    ...                                                  # the work being timed
    tr.record_end(h)
    tr.record_instant(EVENT, target_rank, nbytes)        # one moment

An event is one slot of this rank's trace buffer (``iris.heap.context``: ``TRACE_*``, ``EVENT_*``),
claimed with **one** scalar atomic add on the buffer's claim counter; a claim at or past the
capacity writes nothing (the host counts it as dropped), and so does ``record_end`` of its handle.
The claim is relaxed: it only has to hand out distinct slots, and the host reads the events after
synchronizing with the device, which orders every write of the kernel before its reads; no other
device code reads the buffer. Scope ``gpu``: only this rank's device writes its buffer.

Each event holds: start and end on the device clock (``clock_ns``: NVIDIA ``%globaltimer``, AMD
``s_memrealtime``, CPU ranks the host's monotonic clock); the program, its grid position flattened
as ``x + nx * (y + ny * z)``; the multiprocessor (NVIDIA ``%smid``; AMD gfx94x/gfx95x
``XCC_ID << 8 | HW_ID[15:8]`` (compute unit, shader array and engine: unique per compute unit, not
dense), other gfx9 ``HW_ID[15:8]``, other targets and CPU ranks 0); the rank; the target rank and
payload bytes the caller gives. ``record_start`` reads the clock after claiming and writing the
rest, and ``record_end`` reads it first, so an interval excludes the tracing's own bookkeeping;
``record_instant`` reads it first.

With ``TRACE`` (``ENABLED``) False, ``Tracing.initialize`` reads nothing and every method is a
constant: the compiled kernel is the untraced kernel. With it True and tracing off at run time
(``heap.tracing`` disabled, or the heap closed: capacity 0 in the context), each call costs a
comparison and claims and writes nothing.

Scalars only: a program records its events from one thread (Triton runs scalar atomics and
stores once per program), so record from the program's scalar code, not per element.
"""

# no `from __future__ import annotations`: triton 3.6 checks fields with isinstance(value, annotation).

import torch

import triton
import triton.language as tl
from iris.heap import context as _abi

from . import ops
from ._internals import aggregate
from ._internals import sm_id_asm as _sm_id
from .ops import clock_ns

__all__ = ["Tracing", "device_clock", "trace_state", "record_start", "record_end", "record_instant"]

# Device code reads the context and the buffer's layout as attributes of iris.heap.context (_abi.*):
# the code generator takes a module's int attributes as constants, on triton 3.6 and 3.9.


@triton.jit
def sm_id():
    """The multiprocessor this program runs on (int64; see the module's docstring per target)."""
    return _sm_id()


@triton.jit
def program_id():
    """This program's position in the grid, flattened: ``x + nx * (y + ny * z)`` (int64)."""
    x = tl.program_id(0).to(tl.int64)
    y = tl.program_id(1).to(tl.int64)
    z = tl.program_id(2).to(tl.int64)
    return x + tl.num_programs(0).to(tl.int64) * (y + tl.num_programs(1).to(tl.int64) * z)


# -- the free functions ----------------------------------------------------------------------------


@triton.jit
def trace_state(context_ptr):
    """``(buffer, capacity, rank)`` of this rank's tracing, read from the context ``heap.context``.

    ``buffer`` points at the trace buffer's int64 words; ``capacity`` is 0 while tracing is off
    (disabled, or the heap closed), and the record functions then do nothing.
    """
    ext = ops._extensions(context_ptr)
    capacity = tl.load(ext + _abi.EXT_TRACE_CAPACITY)
    closed = tl.load(ext + _abi.EXT_STATUS) == _abi.STATUS_CLOSED
    capacity = tl.where(closed, 0, capacity)  # a closed heap's buffer is gone
    buffer = tl.load(ext + _abi.EXT_TRACE_BUFFER).to(tl.pointer_type(tl.int64), bitcast=True)
    return buffer, capacity, tl.load(context_ptr + _abi.RANK_INDEX)


@triton.jit
def _claim(buffer, capacity):
    """A slot of the buffer for one event, or -1 (tracing off, or the buffer full: dropped)."""
    slot = capacity * 0 - 1
    if capacity > 0:
        claimed = tl.atomic_add(buffer + _abi.TRACE_CLAIMED, 1, sem="relaxed", scope="gpu")
        if claimed < capacity:
            slot = claimed
    return slot


@triton.jit
def _event_ptr(buffer, slot):
    return buffer + _abi.TRACE_HEADER_WORDS + slot * _abi.TRACE_EVENT_WORDS


@triton.jit
def _describe(event, id_word, rank, target_rank, nbytes):
    """Every word of a claimed event but its times."""
    tl.store(event + _abi.EVENT_ID, id_word)
    tl.store(event + _abi.EVENT_PROGRAM, program_id())
    tl.store(event + _abi.EVENT_SM, sm_id())
    tl.store(event + _abi.EVENT_RANK, tl.cast(rank, tl.int64))
    tl.store(event + _abi.EVENT_TARGET_RANK, tl.cast(target_rank, tl.int64))
    tl.store(event + _abi.EVENT_BYTES, tl.cast(nbytes, tl.int64))


@triton.jit
def record_start(buffer, capacity, rank, event_id, target_rank, nbytes):
    """Start event ``event_id``; returns its handle for ``record_end`` (-1: not recorded).

    One atomic claim; then the event's words; then the clock, last, so the interval starts after
    the bookkeeping. ``buffer, capacity, rank`` come from ``trace_state``.
    """
    slot = _claim(buffer, capacity)
    if slot >= 0:
        event = _event_ptr(buffer, slot)
        _describe(event, tl.cast(event_id, tl.int64), rank, target_rank, nbytes)
        tl.store(event + _abi.EVENT_START_NS, clock_ns())
    return slot


@triton.jit
def record_end(buffer, capacity, handle):
    """End the event ``handle`` (from ``record_start``): its end time; nothing for a handle of -1."""
    if (handle >= 0) & (handle < capacity):
        now = clock_ns()
        tl.store(_event_ptr(buffer, handle) + _abi.EVENT_END_NS, now)


@triton.jit
def record_instant(buffer, capacity, rank, event_id, target_rank, nbytes):
    """Record one moment: an event whose start and end are the clock now (read first), flagged
    instant (``EVENT_INSTANT`` added to its id word)."""
    now = clock_ns()
    slot = _claim(buffer, capacity)
    if slot >= 0:
        event = _event_ptr(buffer, slot)
        _describe(event, tl.cast(event_id, tl.int64) + _abi.EVENT_INSTANT, rank, target_rank, nbytes)
        tl.store(event + _abi.EVENT_START_NS, now)
        tl.store(event + _abi.EVENT_END_NS, now)


# -- the aggregate ---------------------------------------------------------------------------------


@aggregate
class Tracing:
    """This rank's trace buffer inside a kernel: ``Tracing.initialize(heap.context, ENABLED)``.

    ``enabled`` is the constexpr given to ``initialize``; ``buffer``, ``capacity`` and ``rank``
    are what ``trace_state`` reads (constants when not enabled). The methods pass them to the
    free functions; they add nothing.
    """

    enabled: tl.constexpr
    buffer: tl.tensor
    capacity: tl.tensor
    rank: tl.tensor

    def __init__(self, enabled, buffer, capacity, rank):
        self.enabled = tl.constexpr(enabled)
        self.buffer = buffer
        self.capacity = capacity
        self.rank = rank

    @staticmethod
    @triton.jit
    def initialize(context_ptr, ENABLED: tl.constexpr):
        """Read the trace buffer's address and capacity and the rank from ``heap.context``.

        ``ENABLED`` False: nothing is read and every call on the result compiles to nothing.
        """
        if ENABLED:
            buffer, capacity, rank = trace_state(context_ptr)
        else:
            buffer = context_ptr.to(tl.pointer_type(tl.int64), bitcast=True)  # never dereferenced
            capacity = tl.cast(0, tl.int64)
            rank = tl.cast(0, tl.int64)
        return Tracing(ENABLED, buffer, capacity, rank)

    @triton.jit
    def record_start(self, event_id, target_rank, nbytes):
        """Start event ``event_id`` acting on ``target_rank`` with ``nbytes``; returns the handle for ``record_end``."""
        if self.enabled:
            handle = record_start(self.buffer, self.capacity, self.rank, event_id, target_rank, nbytes)
        else:
            handle = tl.cast(-1, tl.int64)
        return handle

    @triton.jit
    def record_end(self, handle):
        """End the event ``handle`` (a handle of -1, not recorded, does nothing)."""
        if self.enabled:
            record_end(self.buffer, self.capacity, handle)

    @triton.jit
    def record_instant(self, event_id, target_rank, nbytes):
        """Record one moment: event ``event_id`` acting on ``target_rank`` with ``nbytes``."""
        if self.enabled:
            record_instant(self.buffer, self.capacity, self.rank, event_id, target_rank, nbytes)


# -- the device clock, read from the host ------------------------------------------------------------


@triton.jit
def _clock_kernel(out_ptr):
    tl.store(out_ptr, clock_ns())


def device_clock(device=None) -> int:
    """The device clock now, in nanoseconds of ``clock_ns`` (what kernels record), read from the host.

    Launches a one-program kernel that stores ``clock_ns()`` and waits for it: the value was read
    somewhere between the call and the return. It is the ``clock`` that ``heap.tracing.enable``
    needs on CUDA heaps: ``heap.tracing.enable(clock=iris.mem.triton.device_clock)``. ``device``:
    a CUDA device (default: the current one) or ``"cpu"`` (CPU ranks: under ``TRITON_INTERPRET=1``,
    the host's monotonic clock).
    """
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    out = torch.zeros(1, dtype=torch.int64, device=device)
    if device.type == "cuda":
        with torch.cuda.device(device):
            _clock_kernel[(1,)](out)
    else:
        _clock_kernel[(1,)](out)
    return int(out.item())  # waits for the kernel
