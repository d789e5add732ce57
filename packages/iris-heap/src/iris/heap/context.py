"""The device context: the one tensor through which device layers see the heap (ABI version 2).

Layout of ``heap.context`` (int64, on the heap's device), for a world of ``W`` ranks::

    [RANK_INDEX]                 rank
    [WORLD_SIZE_INDEX]           world_size
    [BASES_INDEX + r], r < W     heap_base_r: where rank r's heap is mapped in this process
    after the bases (index = BASES_INDEX + W + EXT_*):
    [EXT_WAIT_TIMEOUT_NS]        how long a bounded device wait may last, in nanoseconds of the
                                 device clock (NVIDIA %globaltimer, AMD s_memrealtime, the host's
                                 monotonic clock on CPU ranks)
    [EXT_ERROR_CODE]             0, or the code of the first device error (CAS from 0: first wins).
                                 Device memory: every wait reads it, cheaply, to stop at once once
                                 something failed.
    [EXT_ERROR_RECORD]           address of the error record (below), which the host reads
                                 without a device synchronization
    [EXT_STATUS]                 STATUS_OPEN, or STATUS_CLOSED once the heap is closed (every
                                 base then equals 0, so translation is the identity and a kernel
                                 given a closed heap's context never reaches other memory)
    [EXT_TRACE_BUFFER]           address of this rank's trace buffer (below) on its device; 0 while
                                 tracing is off (``heap.tracing``)
    [EXT_TRACE_CAPACITY]         how many events the trace buffer holds; 0 while tracing is off, and
                                 device code then records nothing

The **error record** is ``ERROR_RECORD_WORDS`` int64 words in memory that both the device and the
host reach: pinned host memory mapped into the device's address space on CUDA, ordinary memory on
CPU ranks. The device layer that wins the CAS on ``EXT_ERROR_CODE`` writes ``detail``, ``value``,
``peer`` and ``aux`` and then, last and with release ordering, ``code``: a host that sees a
non-zero code sees the rest. ``ERROR_*`` codes are named here for every layer, so that codes never
collide; what ``detail``/``value``/``peer``/``aux`` mean depends on the code (documented with it).

The **trace buffer** is int64 words in this rank's heap (a reservation): ``TRACE_HEADER_WORDS``
of header, whose ``TRACE_CLAIMED`` word counts the slots claimed so far, then ``EXT_TRACE_CAPACITY``
events of ``TRACE_EVENT_WORDS`` words each (``EVENT_*`` name them). Device code claims a slot with
one atomic add on ``TRACE_CLAIMED`` per event and writes the event only when the slot it got is
below the capacity: a full buffer writes nothing anywhere, and the host counts
``max(0, claimed - capacity)`` dropped events. A slot whose ``EVENT_END_NS`` is 0 was started but
not ended. An instant event (one moment, not an interval) has ``EVENT_INSTANT`` added to its
``EVENT_ID`` word and ``EVENT_END_NS == EVENT_START_NS``; event ids are below ``EVENT_INSTANT``.
Timestamps are nanoseconds of the device clock (the clock of ``EXT_WAIT_TIMEOUT_NS``); the host
maps them onto ``CLOCK_REALTIME`` with the offset it measured when tracing was enabled.

Device code of every layer reads the context through these names, never through literals, and
finds the extensions from ``world_size`` (entry ``WORLD_SIZE_INDEX``), never from the tensor's length.
"""

from __future__ import annotations

from functools import partial

__all__ = [
    "CONTEXT_ABI_VERSION",
    "RANK_INDEX",
    "WORLD_SIZE_INDEX",
    "BASES_INDEX",
    "BASE_ALIGNMENT",
    "EXT_WAIT_TIMEOUT_NS",
    "EXT_ERROR_CODE",
    "EXT_ERROR_RECORD",
    "EXT_STATUS",
    "EXT_TRACE_BUFFER",
    "EXT_TRACE_CAPACITY",
    "EXTENSIONS",
    "STATUS_OPEN",
    "STATUS_CLOSED",
    "ERROR_RECORD_WORDS",
    "RECORD_CODE",
    "RECORD_DETAIL",
    "RECORD_VALUE",
    "RECORD_PEER",
    "RECORD_AUX",
    "ERROR_NONE",
    "ERROR_WAIT_TIMEOUT",
    "ERROR_HEAP_CLOSED",
    "ERROR_COLLECTIVE_TIMEOUT",
    "ERROR_COLLECTIVE_MISMATCH",
    "ERROR_COLLECTIVE_ABANDONED",
    "ERROR_NAMES",
    "TRACE_CLAIMED",
    "TRACE_HEADER_WORDS",
    "TRACE_EVENT_WORDS",
    "EVENT_START_NS",
    "EVENT_END_NS",
    "EVENT_ID",
    "EVENT_PROGRAM",
    "EVENT_SM",
    "EVENT_RANK",
    "EVENT_TARGET_RANK",
    "EVENT_BYTES",
    "EVENT_INSTANT",
    "SEM_DEFAULT",
    "SCOPE_DEFAULT",
    "WAIT_COMPARISONS",
    "extension_index",
    "wait_timeout_index",
    "error_code_index",
    "error_record_index",
    "status_index",
    "trace_buffer_index",
    "trace_capacity_index",
    "context_length",
    "check_version",
]

#: Version of the layout above. A device layer checks at import that it was written for it
#: (:func:`check_version`).
CONTEXT_ABI_VERSION = 2

RANK_INDEX = 0
WORLD_SIZE_INDEX = 1
BASES_INDEX = 2

#: Every heap base is a multiple of this many bytes (page-aligned in practice); device code may
#: rely on it to keep vector accesses vectorized after translation.
BASE_ALIGNMENT = 16

# Extensions: offsets after the W bases.
EXT_WAIT_TIMEOUT_NS = 0
EXT_ERROR_CODE = 1
EXT_ERROR_RECORD = 2
EXT_STATUS = 3
EXT_TRACE_BUFFER = 4
EXT_TRACE_CAPACITY = 5
#: How many extension words follow the bases.
EXTENSIONS = 6

STATUS_OPEN = 0
STATUS_CLOSED = 1

# The error record: int64 words, host-visible.
ERROR_RECORD_WORDS = 8
RECORD_CODE = 0  # written last (release): non-zero means the other words are complete
RECORD_DETAIL = 1
RECORD_VALUE = 2
RECORD_PEER = 3
RECORD_AUX = 4

#: Error codes (``EXT_ERROR_CODE`` and the record's ``RECORD_CODE``).
ERROR_NONE = 0
#: A bounded wait ran past ``EXT_WAIT_TIMEOUT_NS``. detail: the heap offset of the (lowest-addressed)
#: flag that did not hold; value: what it held; peer: -1; aux: the nanoseconds waited.
ERROR_WAIT_TIMEOUT = 1
#: A kernel was given the context of a closed heap. detail, value, peer, aux: 0, 0, -1, 0.
ERROR_HEAP_CLOSED = 2
# The collectives' codes (iris.ccl, and the fused operations on its protocol). Their words are
# documented beside their writers, iris.ccl.protocol_triton / protocol_gluon, and read by
# iris.ccl.protocol.translate_error; named here so that no two layers' codes collide.
#: A collective gave up waiting for a rank (at its entry, its exit, or a hand-off inside it).
ERROR_COLLECTIVE_TIMEOUT = 3
#: Ranks described different calls: nobody touched a peer.
ERROR_COLLECTIVE_MISMATCH = 4
#: A peer gave up on the collective this rank was in (or this rank's own earlier failure stands).
ERROR_COLLECTIVE_ABANDONED = 5

ERROR_NAMES = {
    ERROR_NONE: "none",
    ERROR_WAIT_TIMEOUT: "wait timeout",
    ERROR_HEAP_CLOSED: "closed heap's context used",
    ERROR_COLLECTIVE_TIMEOUT: "collective timeout",
    ERROR_COLLECTIVE_MISMATCH: "collective mismatch",
    ERROR_COLLECTIVE_ABANDONED: "collective abandoned",
}

# The trace buffer: int64 words, in the heap (see the module's docstring).
#: Header word: slots claimed so far, kept or dropped (one atomic add per event).
TRACE_CLAIMED = 0
#: Header words before the first event (room for later header words; events stay 64-byte aligned).
TRACE_HEADER_WORDS = 8
#: Words of one event (64 bytes).
TRACE_EVENT_WORDS = 8
# The words of one event.
EVENT_START_NS = 0  # device clock at the start (an instant: its moment)
EVENT_END_NS = 1  # device clock at the end; 0: not ended (an instant: its moment again)
EVENT_ID = 2  # the event id (iris.heap.tracing), plus EVENT_INSTANT for an instant event
EVENT_PROGRAM = 3  # the program that recorded it: its id in the grid, flattened (x + nx * (y + ny * z))
EVENT_SM = 4  # the multiprocessor it ran on (NVIDIA %smid; AMD a compute-unit id; CPU ranks 0)
EVENT_RANK = 5  # the rank that recorded it
EVENT_TARGET_RANK = 6  # the rank it acted on (a peer of a remote load or store; the caller's choice)
EVENT_BYTES = 7  # payload bytes (the caller's choice; 0 when none)
#: Added to the ``EVENT_ID`` word of an instant event; event ids are below it.
EVENT_INSTANT = 1 << 32

#: Memory-model defaults of the device layers: ``sem=None`` and ``scope=None`` mean these.
SEM_DEFAULT = "acq_rel"
SCOPE_DEFAULT = "sys"
#: The comparisons a bounded wait accepts (``cmp=None`` is ``"=="``).
WAIT_COMPARISONS = ("==", "!=", ">=", ">", "<=", "<")


def extension_index(world_size: int, ext: int) -> int:
    """Index in ``heap.context`` of extension ``ext`` (an ``EXT_*`` offset)."""
    return BASES_INDEX + world_size + ext


#: Where each extension sits for a world of ``world_size`` ranks: ``wait_timeout_index(world_size)``
#: is ``extension_index(world_size, EXT_WAIT_TIMEOUT_NS)``, and so on.
wait_timeout_index = partial(extension_index, ext=EXT_WAIT_TIMEOUT_NS)
error_code_index = partial(extension_index, ext=EXT_ERROR_CODE)
error_record_index = partial(extension_index, ext=EXT_ERROR_RECORD)
status_index = partial(extension_index, ext=EXT_STATUS)
trace_buffer_index = partial(extension_index, ext=EXT_TRACE_BUFFER)
trace_capacity_index = partial(extension_index, ext=EXT_TRACE_CAPACITY)


def context_length(world_size: int) -> int:
    return BASES_INDEX + world_size + EXTENSIONS


def check_version(layer: str, layer_version: str, written_for: int) -> None:
    """Raise ``ImportError`` unless ``written_for`` is this iris-heap's ``CONTEXT_ABI_VERSION``.

    A device layer calls it at import with the version it reads (``iris.mem.triton``,
    ``iris.mem.gluon``), so a mismatched install fails at once with what to do.
    """
    if written_for != CONTEXT_ABI_VERSION:
        raise ImportError(
            f"{layer} {layer_version} reads device-context ABI version {written_for}, but the installed "
            f"iris-heap provides version {CONTEXT_ABI_VERSION}; install an iris-heap release within "
            f"{layer}'s declared range"
        )
