"""The device context's layout (``iris.heap.context``, ABI version 2) as constexprs: the one place
the ``ops`` modules read it from, by name (``tools/check_abi.py``)."""

from __future__ import annotations

from triton.experimental.gluon import language as gl

from iris.heap import context as _abi

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
