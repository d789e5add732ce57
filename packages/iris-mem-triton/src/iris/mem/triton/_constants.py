"""The device context's layout (``iris.heap.context``, ABI version 2) as constexprs: the one place
the ``ops`` modules read it from, by name (``tools/check_abi.py``)."""

from __future__ import annotations

import triton.language as tl
from iris.heap import context as _abi

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
