"""CUDA VMM transport: each rank's heap is a ``cuMemCreate`` allocation, passed to its peers as a
descriptor and mapped with CUDA's virtual memory management API.

Why: under MPS, a ``cudaMalloc`` heap shared through CUDA IPC handles belongs to its owner's
process. Here physical memory is reference-counted by allocation handles, exported descriptors and
mappings: a rank's heap lives while any rank maps it, so a dead peer's memory stays mapped. It
does not keep a survivor's CUDA context under MPS when a peer is SIGKILLed during a collective
(measured on an H100, as with cuda-ipc: the MPS teardown of a client with a resident kernel, not
freed memory, is the likelier cause; docs/architecture.md, "The cuda-vmm transport").

How, on each rank: ``cuMemCreate`` (pinned device memory on this rank's device, exportable as a
POSIX file descriptor, its size rounded up to the allocation granularity and to
``MAPPING_GRANULE``); ``cuMemExportToShareableHandle`` gives the descriptor, which goes to every
peer as the shared-memory transport's descriptors do (:mod:`.fds`: abstract Unix sockets,
``SCM_RIGHTS``, peers of our own user only, bounded by ``EXCHANGE_TIMEOUT``); each rank imports
its peers' descriptors (``cuMemImportFromShareableHandle``) and maps every allocation, its own
included, with ``cuMemAddressReserve`` + ``cuMemMap`` + ``cuMemSetAccess`` (read/write for its
device). The allocation handles and descriptors are released as soon as the mappings exist, so a
mapping alone holds a heap: it is unmapped, and its address range freed, when the heap is closed
and the last tensor over it is gone. A failure on one rank at any step releases everything made so
far and fails every rank together (``exchange_or_raise``).

Not ``"auto"``'s choice: it is registered after ``cuda-ipc`` (``transport="cuda-vmm"`` selects
it), since it costs a descriptor exchange and has not yet gained anything measured. Needs a device that reports
``CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`` and
``CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED``, and ``cuda-bindings``
(``pip install iris-heap[cuda]``).
"""

from __future__ import annotations

import contextlib
import math
import os

import torch

from ..errors import HeapError
from ..log import get_logger
from . import fds
from .base import exchange_or_raise
from .cuda_base import MAPPING_GRANULE, CudaTransport, bindings, check, check_room, describe, rounded

__all__ = ["CudaVmmTransport", "REQUIRED_ATTRIBUTES"]

#: The device attributes this transport needs, with what each one allows.
REQUIRED_ATTRIBUTES = {
    "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": "CUDA's virtual memory management API",
    "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": "exporting allocations as file descriptors",
}

_logger = get_logger(__name__)


class _Mapping:
    """One rank's allocation mapped at ``ptr`` in this process, read/write for ``device_index``.

    Holds the physical memory by itself (the handle it was made from may be released at once).
    Unmapped, and its address range freed, by :meth:`release` or when collected: when the heap has
    closed and the last tensor over it is gone.
    """

    def __init__(self, drv, handle, size: int, alignment: int, device_index: int, what: str):
        self.drv, self.size, self.ptr, self._mapped = drv, size, None, False
        self.ptr = int(check(drv, drv.cuMemAddressReserve(size, alignment, 0, 0), f"cuMemAddressReserve ({what})"))
        try:
            check(drv, drv.cuMemMap(self.ptr, size, 0, handle, 0), f"cuMemMap ({what})")
            self._mapped = True
            access = drv.CUmemAccessDesc()
            access.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = device_index
            access.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            check(drv, drv.cuMemSetAccess(self.ptr, size, [access], 1), f"cuMemSetAccess ({what})")
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Unmap and free the address range (idempotent). Failures are not raised: this runs when
        init has already failed (whose error says more) or from the garbage collector."""
        ptr, self.ptr = self.ptr, None
        if ptr is None:
            return
        if self._mapped:
            self.drv.cuMemUnmap(ptr, self.size)
        self.drv.cuMemAddressFree(ptr, self.size)

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: the driver reclaims the memory anyway
            pass


@contextlib.contextmanager
def _released(drv, handle):
    """``handle`` until the block ends, then released: what was mapped or exported keeps the memory."""
    try:
        yield handle
    finally:
        drv.cuMemRelease(handle)


class CudaVmmTransport(CudaTransport):
    name = "cuda-vmm"
    device_types = ("cuda",)

    def __init__(self, size: int, device: torch.device, control) -> None:
        super().__init__(size, device, control)
        rank, world_size = control.rank, control.world_size
        made: list[_Mapping] = []  # every mapping of this init, released if it fails anywhere
        try:
            # Every descriptor and socket made here is closed when this block ends, before the last
            # status exchange, so a peer still waiting on one of them sees it close at once.
            with contextlib.ExitStack() as cleanup:
                fd, listener, offer, error = None, None, None, None
                try:
                    drv = bindings("driver", self.name)
                    torch.cuda.set_device(device)
                    torch.cuda.synchronize(device)  # the device's primary context exists and is current
                    fd, mapped, granule = self._create(drv, made, cleanup)
                    if world_size > 1:
                        listener = cleanup.enter_context(fds.listen(world_size))
                    offer = (listener.getsockname() if listener is not None else None, mapped, granule)
                except BaseException as e:  # reported to every rank below
                    error = e
                offers = exchange_or_raise(control, offer, error, "creating the CUDA VMM heap")
                maps, error = [], None
                try:
                    peers = fds.exchange(fd, listener, [o[0] for o in offers], rank, [o[1] for o in offers], cleanup,
                                         what="CUDA VMM heaps", one="CUDA allocation")  # fmt: skip
                    for r, (_, peer_size, peer_granule) in enumerate(offers):
                        if r == rank:
                            maps.append(made[0])  # this rank's own, mapped by _create
                            continue
                        made.append(self._import(drv, peers[r], r, peer_size, max(granule, peer_granule)))
                        maps.append(made[-1])
                except BaseException as e:
                    error = e
            exchange_or_raise(control, None, error, "mapping peers' CUDA VMM heaps")
        except BaseException:
            for m in made:
                m.release()
            raise
        _logger.debug("mapped the CUDA VMM heaps of all %d ranks", world_size)
        self._maps = maps
        self.bases = [m.ptr for m in maps]
        self.mapped_size = mapped  # bytes allocated per rank: size rounded up to the granularity

    def _create(self, drv, made: list, cleanup: contextlib.ExitStack) -> tuple[int, int, int]:
        """This rank's heap, allocated, mapped (appended to ``made``) and zeroed: its exported
        descriptor (closed by ``cleanup``), its size and its granularity."""
        size, device = self.size, self.device
        prop = _properties(drv, device)
        granule = math.lcm(MAPPING_GRANULE, _granularity(drv, prop))
        mapped = rounded(size, granule)
        check_room(device, size, mapped, granule)
        handle = check(drv, drv.cuMemCreate(mapped, prop, 0), f"cuMemCreate({mapped}) on {device}")
        with _released(drv, handle):
            exported = drv.cuMemExportToShareableHandle(handle, _fd_type(drv), 0)
            fd = int(check(drv, exported, "cuMemExportToShareableHandle (this rank's heap)"))
            cleanup.callback(os.close, fd)
            made.append(_Mapping(drv, handle, mapped, granule, device.index, "this rank's heap"))
        ptr = made[-1].ptr
        check(drv, drv.cuMemsetD8(ptr, 0, mapped), "cuMemsetD8 (zeroing this rank's heap)")
        check(drv, drv.cuCtxSynchronize(), "cuCtxSynchronize")
        _logger.debug("cuMemCreate: %d bytes (%d asked) on %s, mapped at %#x, zeroed", mapped, size, device, ptr)
        return fd, mapped, granule

    def _import(self, drv, fd: int, peer: int, size: int, alignment: int) -> _Mapping:
        """Rank ``peer``'s heap, imported from the descriptor ``fd`` and mapped."""
        what = f"rank {peer}'s heap"
        imported = drv.cuMemImportFromShareableHandle(fd, _fd_type(drv))
        with _released(drv, check(drv, imported, f"cuMemImportFromShareableHandle ({what})")) as handle:
            return _Mapping(drv, handle, size, alignment, self.device.index, what)


def _fd_type(drv):
    return drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def _properties(drv, device: torch.device):
    """The allocation properties of a heap on ``device``, once the device is known to support them."""
    check(drv, drv.cuInit(0), "cuInit")
    dev = check(drv, drv.cuDeviceGet(device.index), f"cuDeviceGet({device.index})")
    for attribute, allows in REQUIRED_ATTRIBUTES.items():
        found = drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, attribute), dev)
        supported = found[1] if found[0] == drv.CUresult.CUDA_SUCCESS else None
        if not supported:
            said = "0" if supported == 0 else f"an error, {describe(drv, found[0])}"
            raise HeapError(
                f"the cuda-vmm transport needs {attribute} ({allows}) on {device}, and the driver "
                f"answered {said}. Use the cudaMalloc heap instead: iris.heap.init(transport=\"cuda-ipc\")"
            )
    prop = drv.CUmemAllocationProp()
    prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device.index
    prop.requestedHandleTypes = _fd_type(drv)
    return prop


def _granularity(drv, prop) -> int:
    """The allocation granularity the driver recommends for ``prop`` (a whole multiple of its minimum)."""
    option = drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    return int(check(drv, drv.cuMemGetAllocationGranularity(prop, option), "cuMemGetAllocationGranularity"))


TRANSPORT = CudaVmmTransport
