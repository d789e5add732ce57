"""The symmetric heap: one region per rank, the same allocations at the same offsets everywhere."""

from __future__ import annotations

import math
import os
import weakref
from dataclasses import dataclass

import torch

from . import context as abi
from .allocator import ALIGNMENT, BlockAllocator
from .bootstrap import ControlGroup, join, pick_device
from .errors import (
    AsymmetricHeapError,
    DoubleFreeError,
    HeapClosedError,
    HeapError,
    HeapExhaustedError,
    NotOnHeapError,
    WaitTimeoutError,
)
from .factories import TensorFactories
from .transport import select

__all__ = ["SymmetricHeap", "HeapStats", "init", "default_heap"]

DEFAULT_WAIT_TIMEOUT = 60.0  # seconds; IRIS_WAIT_TIMEOUT overrides

_default: SymmetricHeap | None = None


@dataclass(frozen=True)
class HeapStats:
    """A snapshot of the heap's allocator (bytes, except the counts)."""

    size: int
    used: int
    free: int
    peak: int
    largest_free_block: int
    live_allocations: int
    quarantined_allocations: int
    quarantined_bytes: int


def init(size: int = 1 << 30, *, device=None, group=None, transport: str = "auto") -> SymmetricHeap:
    """Create this rank's heap and map every peer's (a collective: every rank calls it).

    ``size`` is the bytes of each rank's heap (the same on every rank). The heap joins
    torch.distributed from torchrun's environment when no group exists yet; a lone process is
    world size 1. ``device`` defaults to ``cuda:(local_rank % device_count)`` when CUDA is
    available (``IRIS_DEVICE=cpu`` forces CPU); ``transport`` is ``"auto"``, ``"shm"`` or
    ``"cuda-ipc"``.
    """
    return SymmetricHeap(size, device=device, group=group, transport=transport)


def default_heap() -> SymmetricHeap:
    """The most recently created heap that is still open."""
    if _default is None:
        raise HeapError("no open heap: call iris.heap.init() first, or pass heap= explicitly")
    return _default


class SymmetricHeap(TensorFactories):
    """This rank's view of the symmetric heap. See ``iris.heap.init``."""

    def __init__(self, size: int = 1 << 30, *, device=None, group=None, transport: str = "auto"):
        global _default
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"heap size must be an int number of bytes, got {size!r}")
        if size < ALIGNMENT:
            raise ValueError(f"heap size must be at least {ALIGNMENT} bytes, got {size}")
        size = -(-size // ALIGNMENT) * ALIGNMENT
        self._closed = True  # until fully built, so a failed init leaves nothing usable
        self._control: ControlGroup = join(group)
        self.rank = self._control.rank
        self.world_size = self._control.world_size
        self.group = self._control.group
        self.device = pick_device(device, self.rank)
        sizes = self._control.all_gather_object(size)
        if len(set(sizes)) != 1:
            raise AsymmetricHeapError(
                f"ranks asked for different heap sizes: {dict(enumerate(sizes))}; every rank must pass the same size"
            )
        self._transport = select(transport, self.device)(size, self.device, self._control)
        self.size = size
        self._alloc = BlockAllocator(size)
        # offset -> (weakref to the storage's owner, nbytes, dtype, shape)
        self._blocks: dict[int, tuple] = {}
        self.transport = self._transport.name
        self._bases = list(self._transport.bases)
        self._base = self._bases[self.rank]
        w = self.world_size
        ctx = [self.rank, w, *self._bases] + [0] * (abi.context_length(w) - abi.BASES_INDEX - w)
        self.context = torch.tensor(ctx, dtype=torch.int64).to(self.device)
        self.heap_bases = self.context[abi.BASES_INDEX : abi.BASES_INDEX + w]
        self._closed = False
        self.wait_timeout = float(os.environ.get("IRIS_WAIT_TIMEOUT", DEFAULT_WAIT_TIMEOUT))
        _default = self

    # -- lifetime ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise HeapClosedError("this heap is closed; create a new one with iris.heap.init()")

    def close(self) -> None:
        """Collective: wait for every rank, then drop the mappings. Idempotent.

        Memory that live tensors still view stays mapped until they are gone, so a tensor
        kept past ``close`` never dangles; it just stops being part of a heap.
        """
        global _default
        if self._closed:
            return
        try:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self._control.barrier()
        finally:
            self._closed = True
            self._transport.close()
            self._blocks.clear()
            if _default is self:
                _default = None

    def __enter__(self) -> SymmetricHeap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- allocation -------------------------------------------------------------------------
    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if self._closed:
            self._check_open()
        numel = shape[0] if len(shape) == 1 else math.prod(shape)
        nbytes = numel * dtype.itemsize
        offset = self._alloc.allocate(nbytes or dtype.itemsize)  # an empty tensor still owns a block
        if offset is None:
            raise self._exhausted(nbytes, shape, dtype)
        if numel:
            t, owner = self._transport.view(self.rank, offset, nbytes, dtype, shape)
        else:
            flat, owner = self._transport.view(self.rank, offset, dtype.itemsize, dtype)
            t = flat[:0].view(shape)
        self._blocks[offset] = (weakref.ref(owner), nbytes, dtype, shape)
        return t

    def _exhausted(self, nbytes, shape, dtype) -> HeapExhaustedError:
        q = self._quarantined()
        qbytes = sum(self._alloc.length(o) for o in q)
        hint = (
            f" {qbytes} bytes are held by {len(q)} tensors dropped without free(); "
            "call heap.collect() on every rank to reclaim them."
            if q
            else " Free tensors with heap.free(), or create a larger heap."
        )
        return HeapExhaustedError(
            f"cannot allocate {nbytes} bytes ({dtype}{list(shape)}) on rank {self.rank}'s heap: "
            f"{self._alloc.free_bytes} of {self.size} bytes free, the largest free block is "
            f"{self._alloc.largest_free_block} bytes.{hint}",
            requested=nbytes,
            free=self._alloc.free_bytes,
            largest_free_block=self._alloc.largest_free_block,
        )

    def _block_of(self, t, what: str) -> int:
        """The offset of the block that holds ``t``'s storage; clear errors for anything else."""
        self._check_open()
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}() takes a torch.Tensor, got {type(t).__name__}")
        start = t.untyped_storage().data_ptr()
        offset = start - self._base
        if t.device != self.device or not 0 <= offset < self.size:
            for r, base in enumerate(self._bases):
                if r != self.rank and base <= start < base + self.size and t.device == self.device:
                    raise NotOnHeapError(
                        f"{what}(): the tensor is a view of rank {r}'s copy (from heap.peer); "
                        "pass the local tensor instead"
                    )
            raise NotOnHeapError(
                f"{what}(): the tensor ({t.dtype}{list(t.shape)} on {t.device}) is not on this heap "
                f"(rank {self.rank}, {self.device}); allocate it with the heap's factories or copy it "
                "with heap.as_symmetric()"
            )
        return offset

    def free(self, t: torch.Tensor) -> None:
        """Return ``t``'s block to the heap; later allocations reuse it.

        Every rank must free the same tensors in the same order (as it allocated them). ``t``
        and every view of its storage must not be used afterwards.
        """
        try:  # the common case first: a live block of this heap (its storage starts at a block)
            offset = t.untyped_storage().data_ptr() - self._base
            live = offset in self._blocks and not self._closed and t.device == self.device
        except AttributeError:  # not a tensor: _block_of says so
            live = False
        if not live:  # the checks that explain what is wrong
            offset = self._block_of(t, "free")
            if offset not in self._blocks:
                raise DoubleFreeError(
                    f"free(): the block at heap offset {offset:#x} is not allocated; it was already freed"
                )
        del self._blocks[offset]
        self._alloc.release(offset)

    def _quarantined(self) -> list[int]:
        return [o for o, rec in self._blocks.items() if rec[0]() is None]

    def collect(self) -> int:
        """Collective: free blocks whose tensors were garbage-collected on every rank; bytes reclaimed.

        A block dropped on some ranks but still alive on others stays quarantined, so no rank
        reuses memory that a peer may still read or write.
        """
        self._check_open()
        dead = self._control.all_gather_object(sorted(self._quarantined()))
        common = sorted(set(dead[0]).intersection(*map(set, dead[1:])))
        reclaimed = 0
        for offset in common:
            del self._blocks[offset]
            reclaimed += self._alloc.release(offset)
        return reclaimed

    # -- queries -----------------------------------------------------------------------------
    def is_symmetric(self, t: torch.Tensor) -> bool:
        """Whether ``t`` lives in an allocated block of this heap."""
        try:
            return self._block_of(t, "is_symmetric") in self._blocks
        except NotOnHeapError:
            return False

    def offset(self, t: torch.Tensor) -> int:
        """The byte offset of ``t``'s first element from the start of this rank's heap."""
        self._block_of(t, "offset")
        return t.data_ptr() - self._base

    def peer(self, t: torch.Tensor, rank: int) -> torch.Tensor:
        """A host-side tensor aliasing ``rank``'s copy of ``t`` (same shape, strides and dtype)."""
        self._check_rank(rank)
        offset = self._block_of(t, "peer")
        if offset not in self._blocks:
            raise NotOnHeapError(f"peer(): the block at heap offset {offset:#x} was freed")
        nbytes = t.untyped_storage().nbytes()
        usable = nbytes - nbytes % t.element_size()
        flat, _ = self._transport.view(rank, offset, max(usable, t.element_size()), torch.uint8)
        flat = flat.view(t.dtype)
        return flat.as_strided(t.size(), t.stride(), t.storage_offset())

    def _check_rank(self, rank) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"rank must be an int, got {rank!r}")
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is out of range for a heap of world size {self.world_size}")

    def describe(self, offset: int) -> str:
        """Which allocation holds the byte at ``offset`` (for error messages)."""
        for start, (ref, nbytes, dtype, shape) in self._blocks.items():
            if start <= offset < start + max(nbytes, 1):
                state = "live" if ref() is not None else "dropped"
                return f"byte {offset - start} of the {state} {dtype}{list(shape)} allocated at offset {start:#x}"
        return f"offset {offset:#x}, in no allocation"

    def stats(self) -> HeapStats:
        self._check_open()
        q = self._quarantined()
        return HeapStats(
            size=self.size,
            used=self._alloc.used,
            free=self._alloc.free_bytes,
            peak=self._alloc.peak,
            largest_free_block=self._alloc.largest_free_block,
            live_allocations=len(self._blocks) - len(q),
            quarantined_allocations=len(q),
            quarantined_bytes=sum(self._alloc.length(o) for o in q),
        )

    def _table(self) -> list[tuple]:
        return [(o, self._alloc.length(o), str(d), s) for o, (_, _, d, s) in sorted(self._blocks.items())]

    def check_symmetry(self) -> None:
        """Collective: raise ``AsymmetricHeapError`` unless every rank's allocation table is the same."""
        self._check_open()
        tables = self._control.all_gather_object(self._table())
        for r, table in enumerate(tables[1:], start=1):
            if table == tables[0]:
                continue
            for i, (a, b) in enumerate(zip(tables[0], table)):
                if a != b:
                    raise AsymmetricHeapError(
                        f"allocation {i} differs: rank 0 has {_entry(a)}, rank {r} has {_entry(b)}; "
                        "every rank must run the same sequence of allocations and frees"
                    )
            raise AsymmetricHeapError(
                f"rank 0 has {len(tables[0])} allocations, rank {r} has {len(table)}; "
                "every rank must run the same sequence of allocations and frees"
            )

    # -- synchronisation and device-side errors ----------------------------------------------
    def barrier(self) -> None:
        """Synchronize the device, then every rank; raises a device-side wait failure if one occurred."""
        self._check_open()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._control.barrier()
        self.check_device_errors()

    @property
    def wait_limit(self) -> int:
        """Spin iterations after which a bounded device-side wait gives up (context extension)."""
        return int(self.context[abi.wait_limit_index(self.world_size)].item())

    @wait_limit.setter
    def wait_limit(self, spins: int) -> None:
        if isinstance(spins, bool) or not isinstance(spins, int) or spins <= 0:
            raise ValueError(f"wait_limit must be a positive int, got {spins!r}")
        self._check_open()
        self.context[abi.wait_limit_index(self.world_size)] = spins

    @property
    def wait_timeout(self) -> float:
        """About how long (seconds) a device-side wait spins before giving up."""
        return self.wait_limit / self._transport.spins_per_second

    @wait_timeout.setter
    def wait_timeout(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"wait_timeout must be a positive number of seconds, got {seconds!r}")
        self.wait_limit = max(1, int(seconds * self._transport.spins_per_second))

    def check_device_errors(self) -> None:
        """Raise (and clear) the first failure that device code recorded in the context.

        Reading it synchronizes with the device on CUDA; device layers call this after the
        kernels that can fail.
        """
        self._check_open()
        w = self.world_size
        code_i, value_i = abi.error_code_index(w), abi.error_value_index(w)
        code, detail, value = self.context[code_i : value_i + 1].tolist()  # code, detail, value are adjacent
        if code == abi.ERROR_NONE:
            return
        self.context[code_i : value_i + 1] = 0
        if code == abi.ERROR_WAIT_TIMEOUT:
            raise WaitTimeoutError(
                f"rank {self.rank}: a device-side wait gave up after {self.wait_limit} spins "
                f"(about {self.wait_timeout:g} s) on {self.describe(detail)}, which still held {value}. "
                "The rank that should have signalled it never did: it crashed, stopped, or ran a "
                "different operation. Check that every rank runs the same sequence of collectives, "
                "or raise heap.wait_timeout.",
                rank=self.rank,
                offset=detail,
                value=value,
            )
        raise HeapError(f"rank {self.rank}: device code recorded error code {code} (detail {detail}, value {value})")

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._alloc.used}/{self.size} bytes used"
        return f"SymmetricHeap(rank={self.rank}, world_size={self.world_size}, device={self.device}, transport={self.transport!r}, {state})"


def _entry(e) -> str:
    offset, length, dtype, shape = e
    return f"{dtype}{list(shape)} at offset {offset:#x} ({length} bytes)"
