"""CUDA IPC transport: a ``cudaMalloc``'d heap per rank, shared through CUDA IPC handles.

Works between processes on one GPU and across the GPUs of one host. Needs ``cuda-bindings``
(``pip install iris-heap[cuda]``). The heap comes from ``cudaMalloc`` directly, not torch's
caching allocator, so the IPC handle describes exactly the heap's first byte.
"""

from __future__ import annotations

import torch

from ..errors import HeapError, HeapExhaustedError
from ..log import get_logger
from .base import Transport, exchange_or_raise

__all__ = ["CudaIpcTransport", "MAPPING_GRANULE"]

#: The allocation behind a heap is a whole number of these (2 MiB, the GPU's large page): peers
#: reach a mapping of any other size slower (BENCHMARKS.md, section "About this report", "rma at
#: 1 GiB was slow because of the heap's size"); rounding up costs under 2 MiB per rank.
MAPPING_GRANULE = 2 << 20

_logger = get_logger(__name__)


def _cudart():
    try:
        from cuda.bindings import runtime
    except ImportError:  # absent, or older than the extra's floor (12.6 moved it here from cuda.cudart)
        raise HeapError("the cuda-ipc transport needs cuda-bindings>=12.6: pip install 'iris-heap[cuda]'") from None
    return runtime


def _check(rt, result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        _, name = rt.cudaGetErrorName(err)
        _, text = rt.cudaGetErrorString(err)
        raise HeapError(f"{what} failed: {name.decode()} ({text.decode()})")
    return rest[0] if len(rest) == 1 else rest


class _Mapping:
    """One rank's heap as mapped in this process; releases it when the last tensor is gone."""

    def __init__(self, rt, ptr: int, owned: bool):
        self.rt, self.ptr, self.owned = rt, ptr, owned

    def __del__(self):
        try:
            if self.owned:
                self.rt.cudaFree(self.ptr)
            else:
                self.rt.cudaIpcCloseMemHandle(self.ptr)
        except Exception:  # interpreter shutdown: the driver reclaims the memory anyway
            pass


#: ``__cuda_array_interface__`` type strings of the dtypes torch imports directly; other dtypes
#: (bfloat16, float8, ...) come in as bytes and are reinterpreted.
_TYPESTR = {
    torch.bool: "|b1", torch.uint8: "|u1", torch.int8: "|i1", torch.int16: "<i2", torch.int32: "<i4",
    torch.int64: "<i8", torch.float16: "<f2", torch.float32: "<f4", torch.float64: "<f8",
}  # fmt: skip


class _DeviceBytes:
    """A byte range of a mapping, exported to torch through ``__cuda_array_interface__``.

    Typed and shaped up front where the dtype allows, so that torch makes the final tensor in
    one call (each further ``view`` of a CUDA tensor costs about as much as making it).
    """

    __slots__ = ("__cuda_array_interface__", "_mapping", "__weakref__")

    def __init__(self, mapping: _Mapping, offset: int, shape: tuple[int, ...], typestr: str):
        self._mapping = mapping
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (mapping.ptr + offset, False),
            "version": 2,
        }


class CudaIpcTransport(Transport):
    name = "cuda-ipc"
    device_types = ("cuda",)

    def __init__(self, size: int, device: torch.device, control) -> None:
        super().__init__(size, device, control)
        rt = _cudart()
        torch.cuda.set_device(device)
        torch.cuda.synchronize(device)  # the primary context exists before cudart uses it
        local, handle, error = None, None, None
        try:
            _check(rt, rt.cudaSetDevice(device.index), "cudaSetDevice")
            free, total = torch.cuda.mem_get_info(device)
            mapped = -(-size // MAPPING_GRANULE) * MAPPING_GRANULE
            if mapped > free:
                raise HeapExhaustedError(
                    f"cannot reserve a {size}-byte heap on {device} ({mapped} bytes, whole 2 MiB pages): "
                    f"it has {free} bytes free of "
                    f"{total}. Ask for a smaller heap (iris.heap.init(size=...)).",
                    requested=size,
                    free=free,
                    largest_free_block=free,
                )
            ptr = _check(rt, rt.cudaMalloc(mapped), f"cudaMalloc({mapped}) on {device}")
            local = _Mapping(rt, int(ptr), owned=True)
            _check(rt, rt.cudaMemset(local.ptr, 0, mapped), "cudaMemset")
            _check(rt, rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
            handle = bytes(_check(rt, rt.cudaIpcGetMemHandle(local.ptr), "cudaIpcGetMemHandle").reserved)
            _logger.debug("cudaMalloc: %d bytes (%d asked) on %s at %#x, zeroed", mapped, size, device, local.ptr)
        except BaseException as e:
            error = e
        handles = exchange_or_raise(control, handle, error, "creating the CUDA heap")
        maps, error = [], None
        try:
            for r, h in enumerate(handles):
                if r == control.rank:
                    maps.append(local)
                    continue
                mh = rt.cudaIpcMemHandle_t()
                mh.reserved = h
                ptr = _check(
                    rt,
                    rt.cudaIpcOpenMemHandle(mh, rt.cudaIpcMemLazyEnablePeerAccess),
                    f"cudaIpcOpenMemHandle (rank {r}'s heap)",
                )
                maps.append(_Mapping(rt, int(ptr), owned=False))
        except BaseException as e:
            error = e
        exchange_or_raise(control, None, error, "mapping peers' CUDA heaps")
        _logger.debug("opened the CUDA IPC handles of all %d ranks' heaps", control.world_size)
        self._maps = maps
        self.bases = [m.ptr for m in maps]
        self.mapped_size = mapped  # bytes allocated per rank: size rounded up to MAPPING_GRANULE

    def view(self, rank, offset, nbytes, dtype, shape=None):
        typestr = _TYPESTR.get(dtype)
        if typestr is not None:
            owner = _DeviceBytes(self._maps[rank], offset, shape or (nbytes // dtype.itemsize,), typestr)
            t = torch.as_tensor(owner, device=self.device)
            return (t.view(()) if shape == () else t), owner  # a 0-dim tensor comes in as 1 element
        owner = _DeviceBytes(self._maps[rank], offset, (nbytes,), "|u1")
        t = torch.as_tensor(owner, device=self.device).view(dtype)
        return (t if shape is None or len(shape) == 1 else t.view(shape)), owner

    def close(self) -> None:
        self._maps = []


TRANSPORT = CudaIpcTransport
