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

The **error record** is ``ERROR_RECORD_WORDS`` int64 words in memory that both the device and the
host reach: pinned host memory mapped into the device's address space on CUDA, ordinary memory on
CPU ranks. The device layer that wins the CAS on ``EXT_ERROR_CODE`` writes ``detail``, ``value``,
``peer`` and ``aux`` and then, last and with release ordering, ``code``: a host that sees a
non-zero code sees the rest. ``ERROR_*`` codes are named here for every layer, so that codes never
collide; what ``detail``/``value``/``peer``/``aux`` mean depends on the code (documented with it).

Device code of every layer reads the context through these names, never through literals, and
finds the extensions from ``world_size`` (entry ``WORLD_SIZE_INDEX``), never from the tensor's length.
"""

from __future__ import annotations

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
    "SEM_DEFAULT",
    "SCOPE_DEFAULT",
    "WAIT_COMPARISONS",
    "extension_index",
    "wait_timeout_index",
    "error_code_index",
    "error_record_index",
    "status_index",
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
#: How many extension words follow the bases.
EXTENSIONS = 4

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
#: A collective gave up waiting for a rank. detail: the heap offset of the flag; value: the
#: collective's epoch; peer: the rank that did not arrive (or leave); aux: the nanoseconds waited.
ERROR_COLLECTIVE_TIMEOUT = 3
#: Ranks called different collectives. detail: the index of the first descriptor field that
#: differs; value: the epoch; peer: the first rank whose field differs from this rank's; aux: 0.
ERROR_COLLECTIVE_MISMATCH = 4
#: A peer gave up on this collective before this rank arrived. detail: the flag's heap offset;
#: value: the epoch; peer: the rank that gave up; aux: 0.
ERROR_COLLECTIVE_ABANDONED = 5

ERROR_NAMES = {
    ERROR_NONE: "none",
    ERROR_WAIT_TIMEOUT: "wait timeout",
    ERROR_HEAP_CLOSED: "closed heap's context used",
    ERROR_COLLECTIVE_TIMEOUT: "collective timeout",
    ERROR_COLLECTIVE_MISMATCH: "collective mismatch",
    ERROR_COLLECTIVE_ABANDONED: "collective abandoned",
}

#: Memory-model defaults of the device layers: ``sem=None`` and ``scope=None`` mean these.
SEM_DEFAULT = "acq_rel"
SCOPE_DEFAULT = "sys"
#: The comparisons a bounded wait accepts (``cmp=None`` is ``"=="``).
WAIT_COMPARISONS = ("==", "!=", ">=", ">", "<=", "<")


def extension_index(world_size: int, ext: int) -> int:
    """Index in ``heap.context`` of extension ``ext`` (an ``EXT_*`` offset)."""
    return BASES_INDEX + world_size + ext


def wait_timeout_index(world_size: int) -> int:
    return extension_index(world_size, EXT_WAIT_TIMEOUT_NS)


def error_code_index(world_size: int) -> int:
    return extension_index(world_size, EXT_ERROR_CODE)


def error_record_index(world_size: int) -> int:
    return extension_index(world_size, EXT_ERROR_RECORD)


def status_index(world_size: int) -> int:
    return extension_index(world_size, EXT_STATUS)


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
