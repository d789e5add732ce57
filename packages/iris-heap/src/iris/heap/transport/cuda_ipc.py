"""CUDA IPC transport: a ``cudaMalloc``'d heap per rank, shared through CUDA IPC handles.

Works between processes on one GPU and across the GPUs of one host. Needs ``cuda-bindings``
(``pip install iris-heap[cuda]``). The heap comes from ``cudaMalloc`` directly, not torch's
caching allocator, so the IPC handle describes exactly the heap's first byte.
"""

from __future__ import annotations

import torch

from ..log import get_logger
from .base import exchange_or_raise
from .cuda_base import MAPPING_GRANULE, CudaTransport, bindings, check, check_room, rounded

__all__ = ["CudaIpcTransport", "MAPPING_GRANULE"]

_logger = get_logger(__name__)


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


class CudaIpcTransport(CudaTransport):
    name = "cuda-ipc"
    device_types = ("cuda",)

    def __init__(self, size: int, device: torch.device, control) -> None:
        super().__init__(size, device, control)
        rt = bindings("runtime", self.name)
        torch.cuda.set_device(device)
        torch.cuda.synchronize(device)  # the primary context exists before cudart uses it
        local, handle, error = None, None, None
        try:
            check(rt, rt.cudaSetDevice(device.index), "cudaSetDevice")
            mapped = rounded(size, MAPPING_GRANULE)
            check_room(device, size, mapped, MAPPING_GRANULE)
            ptr = check(rt, rt.cudaMalloc(mapped), f"cudaMalloc({mapped}) on {device}")
            local = _Mapping(rt, int(ptr), owned=True)
            check(rt, rt.cudaMemset(local.ptr, 0, mapped), "cudaMemset")
            check(rt, rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
            handle = bytes(check(rt, rt.cudaIpcGetMemHandle(local.ptr), "cudaIpcGetMemHandle").reserved)
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
                ptr = check(
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


TRANSPORT = CudaIpcTransport
