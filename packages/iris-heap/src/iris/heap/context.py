"""The device context: the one tensor through which device layers see the heap (ABI version 1).

Layout of ``heap.context`` (int64, on the heap's device), for a world of ``W`` ranks::

    [0]           rank
    [1]           world_size
    [2 .. 2+W)    heap_base_r: where rank r's heap is mapped in this process
    [2+W]         wait_limit: spin iterations after which a bounded device wait gives up
    [3+W]         error_code: 0, or the first device-side failure (ERROR_WAIT_TIMEOUT, ...)
    [4+W]         error_detail: for a wait timeout, the local heap offset of the awaited flag
    [5+W]         error_value: for a wait timeout, the value the flag held when the wait gave up

Entries after the bases are extensions. Device code finds them from ``world_size`` (entry 1),
never from the tensor's length; the helpers below give their indices.
"""

from __future__ import annotations

__all__ = [
    "CONTEXT_ABI_VERSION",
    "RANK_INDEX",
    "WORLD_SIZE_INDEX",
    "BASES_INDEX",
    "ERROR_NONE",
    "ERROR_WAIT_TIMEOUT",
    "wait_limit_index",
    "error_code_index",
    "error_detail_index",
    "error_value_index",
    "context_length",
]

#: Version of the layout above. A device layer checks it equals the version it was written for.
CONTEXT_ABI_VERSION = 1

RANK_INDEX = 0
WORLD_SIZE_INDEX = 1
BASES_INDEX = 2

#: ``error_code`` values written by device code.
ERROR_NONE = 0
ERROR_WAIT_TIMEOUT = 1


def wait_limit_index(world_size: int) -> int:
    return BASES_INDEX + world_size


def error_code_index(world_size: int) -> int:
    return BASES_INDEX + world_size + 1


def error_detail_index(world_size: int) -> int:
    return BASES_INDEX + world_size + 2


def error_value_index(world_size: int) -> int:
    return BASES_INDEX + world_size + 3


def context_length(world_size: int) -> int:
    return BASES_INDEX + world_size + 4
