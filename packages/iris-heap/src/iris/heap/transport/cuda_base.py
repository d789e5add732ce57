"""What the CUDA transports share: loading cuda-bindings, reading its errors, the room check before
allocating, and torch tensors over a region mapped into this process.

A CUDA transport (:class:`CudaTransport`) keeps ``_maps``: for each rank, an object whose ``ptr``
is the address of that rank's region in this process and which releases the region when it is
collected. A tensor's storage keeps its mapping object alive, so memory goes exactly when the
heap has closed and the last tensor over it is gone.
"""

from __future__ import annotations

import importlib

import torch

from ..errors import HeapError, HeapExhaustedError
from .base import Transport

__all__ = ["MAPPING_GRANULE", "CudaTransport", "DeviceBytes", "bindings", "check", "check_room", "describe", "rounded"]

#: The allocation behind a heap is a whole number of these (2 MiB, the GPU's large page): peers
#: reach a mapping of any other size slower (on an H200, 1 GiB remote accesses into heaps of
#: 2,215,673,856 bytes ran at 0.84-0.87 of a local copy, at 0.996-1.000 once rounded: the iris-heap
#: CHANGELOG, 0.2.0); rounding up costs under 2 MiB per rank.
MAPPING_GRANULE = 2 << 20


def bindings(module: str, transport: str):
    """``cuda.bindings.<module>`` (``"runtime"`` or ``"driver"``), or a HeapError saying what to install."""
    try:
        return importlib.import_module(f"cuda.bindings.{module}")
    except ImportError:  # absent, or older than the extra's floor (12.6 moved it here from cuda.cudart)
        raise HeapError(
            f"the {transport} transport needs cuda-bindings>=12.6: pip install 'iris-heap[cuda]'"
        ) from None


def check(api, result, what: str):
    """What a cuda.bindings call returned after its status: one value, or a list of them (none: ``[]``).

    ``api`` is the module the call came from (``cuda.bindings.runtime`` or ``.driver``), which
    names its errors; a failed call raises ``HeapError`` naming ``what`` and the CUDA error.
    """
    err, *rest = result if isinstance(result, tuple) else (result,)
    runtime = hasattr(api, "cudaGetErrorName")
    if err != (api.cudaError_t.cudaSuccess if runtime else api.CUresult.CUDA_SUCCESS):
        raise HeapError(f"{what} failed: {describe(api, err)}")
    return rest[0] if len(rest) == 1 else rest


def describe(api, err) -> str:
    """A CUDA error's name and text (``CUDA_ERROR_NOT_SUPPORTED (operation not supported)``)."""
    runtime = hasattr(api, "cudaGetErrorName")
    _, name = (api.cudaGetErrorName if runtime else api.cuGetErrorName)(err)
    _, text = (api.cudaGetErrorString if runtime else api.cuGetErrorString)(err)
    return f"{name.decode() if name else int(err)} ({text.decode() if text else 'no description'})"


def rounded(size: int, granule: int) -> int:
    """``size`` rounded up to a whole number of ``granule``-byte pages."""
    return -(-size // granule) * granule


def check_room(device: torch.device, size: int, mapped: int, granule: int) -> None:
    """Raise HeapExhaustedError unless ``device`` has ``mapped`` bytes free for a ``size``-byte heap."""
    free, total = torch.cuda.mem_get_info(device)
    if mapped > free:
        raise HeapExhaustedError(
            f"cannot reserve a {size}-byte heap on {device} ({mapped} bytes, whole {granule >> 20} MiB pages): "
            f"it has {free} bytes free of "
            f"{total}. Ask for a smaller heap (iris.heap.init(size=...)).",
            requested=size,
            free=free,
            largest_free_block=free,
        )


#: ``__cuda_array_interface__`` type strings of the dtypes torch imports directly; other dtypes
#: (bfloat16, float8, ...) come in as bytes and are reinterpreted.
_TYPESTR = {
    torch.bool: "|b1", torch.uint8: "|u1", torch.int8: "|i1", torch.int16: "<i2", torch.int32: "<i4",
    torch.int64: "<i8", torch.float16: "<f2", torch.float32: "<f4", torch.float64: "<f8",
}  # fmt: skip


class DeviceBytes:
    """A byte range of a mapping, exported to torch through ``__cuda_array_interface__``.

    Typed and shaped up front where the dtype allows, so that torch makes the final tensor in
    one call (each further ``view`` of a CUDA tensor costs about as much as making it).
    """

    __slots__ = ("__cuda_array_interface__", "_mapping", "__weakref__")

    def __init__(self, mapping, offset: int, shape: tuple[int, ...], typestr: str):
        self._mapping = mapping
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (mapping.ptr + offset, False),
            "version": 2,
        }


class CudaTransport(Transport):
    """A transport whose regions are CUDA memory mapped in this process: views and close for
    every CUDA transport. A subclass's constructor sets ``_maps`` (one mapping object per rank,
    with ``ptr``), ``bases`` and ``mapped_size``."""

    _maps: list

    def view(self, rank, offset, nbytes, dtype, shape=None):
        typestr = _TYPESTR.get(dtype)
        if typestr is not None:
            owner = DeviceBytes(self._maps[rank], offset, shape or (nbytes // dtype.itemsize,), typestr)
            t = torch.as_tensor(owner, device=self.device)
            return (t.view(()) if shape == () else t), owner  # a 0-dim tensor comes in as 1 element
        owner = DeviceBytes(self._maps[rank], offset, (nbytes,), "|u1")
        t = torch.as_tensor(owner, device=self.device).view(dtype)
        return (t if shape is None or len(shape) == 1 else t.view(shape)), owner

    def close(self) -> None:
        # Mappings stay until the last tensor over them is gone; no tensor can dangle.
        self._maps = []
