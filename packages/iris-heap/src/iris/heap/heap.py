"""The symmetric heap: one region per rank, the same allocations at the same offsets everywhere."""

from __future__ import annotations

import math
import os
import itertools
import socket
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from . import context as abi
from .allocator import BlockAllocator
from .bootstrap import ControlGroup, agree_on_arguments, check_device, check_group, check_size, check_transport, join
from .device_errors import DeviceError, ErrorRecord, Watchdog
from .errors import (
    AsymmetricHeapError,
    DoubleFreeError,
    HeapClosedError,
    HeapError,
    HeapExhaustedError,
    NotOnHeapError,
    PeerLostError,
    WaitTimeoutError,
)
from .factories import TensorFactories, extent
from .log import get_logger, set_rank
from .tracing import Tracing
from .transport.base import Transport, exchange_or_raise

__all__ = ["SymmetricHeap", "HeapStats", "HookHandle", "Reservation", "init", "default_heap", "register_init_hook"]

_logger = get_logger(__name__)

DEFAULT_WAIT_TIMEOUT = 60.0  # seconds; IRIS_WAIT_TIMEOUT overrides
_MAX_WAIT_TIMEOUT = 1e9  # seconds (about 31 years): the bound in nanoseconds stays far inside int64

_open: list[weakref.ref] = []  # every heap still open in this process, oldest first
_serials = itertools.count(1)  # SymmetricHeap.serial: 1, 2, ... in the order heaps are made
_init_hooks: dict[int, Callable] = {}  # register_init_hook's hooks, by handle id, in registration order
_hook_ids = itertools.count()


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
    reserved_bytes: int = 0  # library state (heap.reserve), included in used


@dataclass(frozen=True)
class Reservation:
    """A block of library state made by ``heap.reserve``: where it is and whether it was fresh."""

    name: str
    offset: int
    nbytes: int
    tensor: torch.Tensor
    #: True when the block had never been handed out since the heap was made, so it held zeros on
    #: every rank without anyone writing them (no barrier needed before peers signal into it).
    untouched: bool


class _Block(NamedTuple):
    """What the heap knows of one allocation (``SymmetricHeap._blocks``, by offset)."""

    owner: weakref.ref  # to the storage's owner: dead once no tensor uses the block (quarantined)
    nbytes: int  # the tensor's bytes (0 for an empty tensor, which still holds a block)
    dtype: torch.dtype
    shape: tuple


def init(size: int = 1 << 30, *, device=None, group=None, transport: str = "auto") -> SymmetricHeap:
    """Create this rank's heap and map every peer's (a collective: every rank calls it).

    ``size`` is the bytes of each rank's heap (the same on every rank). The heap joins
    torch.distributed from torchrun's environment when no group exists yet; a lone process is
    world size 1. ``device`` defaults to ``cuda:(local_rank % device_count)`` when CUDA is
    available (``IRIS_DEVICE=cpu`` forces CPU); ``transport`` is ``"auto"``, ``"shm"``,
    ``"cuda-ipc"`` or ``"cuda-vmm"`` (``iris.heap.transport.REGISTRY``).
    """
    return SymmetricHeap(size, device=device, group=group, transport=transport)


class HookHandle:
    """What :func:`register_init_hook` returns: ``remove()`` unregisters the hook (idempotent); as a
    context manager, the hook is removed when the block ends."""

    def __init__(self, hooks: dict, key: int):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)

    def __enter__(self) -> HookHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_init_hook(hook: Callable[[SymmetricHeap], None]) -> HookHandle:
    """Call ``hook(heap)`` for every heap this process makes from now on, once the heap is open and
    before ``init`` returns it; hooks run in the order they were registered. Returns a
    :class:`HookHandle` whose ``remove()`` unregisters it.

    What a harness uses to know the heaps a piece of code made (the test runner closes exactly
    those after each task, on every rank, even ones a traceback kept alive on one rank only). A
    hook runs on one rank, inside a collective's aftermath: it must not raise (what it raises
    propagates from ``init``, with the heap open) and must not call collectives.
    """
    if not callable(hook):
        raise TypeError(f"register_init_hook takes a callable, got {type(hook).__name__}")
    key = next(_hook_ids)
    _init_hooks[key] = hook
    return HookHandle(_init_hooks, key)


def find_heap(serial: int) -> SymmetricHeap | None:
    """The open heap of this process whose ``serial`` is ``serial``; None when it is closed or gone.

    How code that cannot hold a heap names one: a ``torch.compile`` graph holds the serial (an
    int, which it can guard on and replay) and finds the heap again when it runs."""
    for ref in _open:
        heap = ref()
        if heap is not None and not heap._closed and heap.serial == serial:
            return heap
    return None


def default_heap() -> SymmetricHeap:
    """The most recently created heap that is still open."""
    for ref in reversed(_open):
        heap = ref()
        if heap is not None and not heap._closed:
            return heap
    raise HeapError("no open heap: call iris.heap.init() first, or pass heap= explicitly")


class SymmetricHeap(TensorFactories):
    """This rank's view of the symmetric heap. See ``iris.heap.init``."""

    def __init__(self, size: int = 1 << 30, *, device=None, group=None, transport: str = "auto"):
        self._closed = True  # until fully built, so a failed init leaves nothing usable
        #: This heap's number in this process (1, 2, ... in creation order, never reused): ``find_heap``.
        self.serial = next(_serials)
        # Arguments are checked without raising and the verdicts exchanged right after joining: a
        # bad argument on one rank fails every rank at once instead of leaving the others blocked.
        size, size_error = check_size(size)
        group, group_error = check_group(group)
        self._control: ControlGroup = join(group)
        self.rank = self._control.rank
        self.world_size = self._control.world_size
        self.group = self._control.group
        set_rank(self.rank, self.world_size)  # every Iris record from now on names this rank
        _logger.debug(
            "iris.heap.init: joined %d ranks; agreeing on size %d and transport %r", self.world_size, size, transport
        )
        self.device, device_error = check_device(device, self.rank)
        transport_cls, transport_error = check_transport(transport, self.device)
        agree_on_arguments(
            self._control,
            size_error or group_error or device_error or transport_error,
            {
                "size": size,
                "transport": getattr(transport_cls, "name", None),
                "device type": getattr(self.device, "type", None),
            },
        )
        self._ranks_per_device, self._processes = _placements(self._control, self.device)
        self._transport = transport_cls(size, self.device, self._control)
        self.size = size
        self._alloc = BlockAllocator(size)
        self._blocks: dict[int, _Block] = {}  # by offset
        #: Changes whenever the set of allocated blocks does (an allocation, ``free``, ``collect``,
        #: ``close``): what ``is_symmetric`` answered for a tensor holds while it stays the same.
        self.generation = 0
        self._bases = list(self._transport.bases)
        self._base = self._bases[self.rank]
        self._reserved: dict[str, Reservation] = {}
        self._record = ErrorRecord(self.device)
        self._translators: list[Callable] = []
        self._pending: BaseException | None = None  # a device error the watchdog found, raised next
        self._error_lock = threading.Lock()  # the watchdog thread polls too
        self._watchdog: Watchdog | None = None
        self.tracing = Tracing(self)  # the host side of device tracing (iris.heap.tracing)
        w = self.world_size
        ctx = [0] * abi.context_length(w)
        ctx[abi.RANK_INDEX], ctx[abi.WORLD_SIZE_INDEX] = self.rank, w
        ctx[abi.BASES_INDEX : abi.BASES_INDEX + w] = self._bases
        ctx[abi.error_record_index(w)] = self._record.address
        ctx[abi.status_index(w)] = abi.STATUS_OPEN
        self.context = torch.tensor(ctx, dtype=torch.int64).to(self.device)
        self.context._iris_error_record = self._record  # lives as long as anything holds the context
        self.heap_bases = self.context[abi.BASES_INDEX : abi.BASES_INDEX + w]
        self._closed = False
        self.wait_timeout = _env_wait_timeout()
        _open.append(weakref.ref(self))
        _logger.info(
            "heap ready: %d bytes per rank on %s over %s (%d bytes mapped per rank), %d ranks, wait bound %g s",
            size, self.device, self.transport_name, self._transport.mapped_size, w, self.wait_timeout,
        )  # fmt: skip
        for hook in list(_init_hooks.values()):
            hook(self)

    # -- lifetime ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise HeapClosedError("this heap is closed; create a new one with iris.heap.init()")

    def close(self) -> None:
        """Collective: wait for every rank, then drop the mappings. Idempotent.

        Memory that live tensors still view stays mapped until they are gone, so a tensor
        kept past ``close`` never dangles; it just stops being part of a heap.
        """
        if self._closed:
            return
        _logger.debug("close(): waiting for the device and every rank")
        try:
            if self.watchdog_running:
                self._watchdog.stop()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self._control.barrier()
        finally:
            self._closed = True
            # A kernel launched with this context from now on reaches only the addresses it was
            # given (every base 0: translation is the identity) and records ERROR_HEAP_CLOSED.
            w = self.world_size
            self.context[abi.BASES_INDEX : abi.BASES_INDEX + w] = 0
            self.context[abi.status_index(w)] = abi.STATUS_CLOSED
            self._transport.close()
            self._blocks.clear()
            self.generation += 1
            self._reserved.clear()
            _open[:] = [r for r in _open if r() is not None and r() is not self]
            self._control.close()  # last: torch raising here leaves the rest of the heap closed
            _logger.info("heap closed (memory that live tensors still view stays mapped until they go)")

    def __enter__(self) -> SymmetricHeap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def transport(self) -> Transport:
        """The transport that created this rank's region and maps its peers' (``iris.heap.transport``):
        its ``name``, ``mapped_size`` (bytes allocated per rank, at least ``size``) and ``device_types``.
        Its methods are the heap's to call."""
        return self._transport

    @property
    def transport_name(self) -> str:
        """The transport's name: ``"shm"`` (CPU ranks), ``"cuda-ipc"`` or ``"cuda-vmm"`` (what
        ``init(transport=...)`` takes)."""
        return self._transport.name

    @property
    def base(self) -> int:
        """The address of this rank's heap in this process (``heap_bases[rank]``, without a device read)."""
        return self._base

    def lost_ranks(self) -> list[int]:
        """The peers whose process has ended (exited, or killed), among those on this rank's host;
        peers on other hosts are not checked. Cheap (a read of ``/proc`` per peer): for explaining
        a failure, not for polling."""
        _, host, _ = self._processes[self.rank]
        return [r for r, (_, h, process) in enumerate(self._processes)
                if r != self.rank and h == host and _process_ended(process)]  # fmt: skip

    def explain_failure(self, what: str, error: BaseException) -> BaseException | None:
        """A :class:`PeerLostError` for ``error``, a device failure in ``what`` (a launch, a wait),
        where peers' processes have ended: it names them and says what their end costs this
        process. None where ``error`` is no device failure or every peer still runs (the caller
        raises ``error`` as it is)."""
        if not isinstance(error, RuntimeError) or not any(w in str(error) for w in _DEVICE_FAILURE):
            return None
        lost = self.lost_ranks()
        if not lost:
            return None
        device = self._processes[self.rank][0]
        who = ", ".join(f"rank {r} (pid {self._processes[r][2][0]})" for r in lost)
        if any(self._processes[r][0] == device for r in lost):
            why = ("A process that ends with work on a GPU that other processes share under MPS takes down every "
                   "process using that GPU")  # fmt: skip
        else:
            why = "This rank's kernels may have touched the ended process's memory"
        return PeerLostError(
            f"{what} failed on rank {self.rank} with a device error ({type(error).__name__}: "
            f"{str(error).strip().splitlines()[0]}) after the process of {who} ended. {why}: this process's CUDA "
            "context is then lost, every later CUDA call in it fails, and only a new process can use the GPU "
            '(docs/architecture.md, section "A dead peer").',
            ranks=lost,
        )

    @property
    def ranks_per_device(self) -> int:
        """How many ranks of this heap (this one included) run on this rank's device, agreed at init.

        Ranks on one GPU (under MPS or time-sliced) share its multiprocessors and its memory
        bandwidth, so a kernel whose programs must all be resident at once takes its share. On CPU
        ranks every rank shares the host's CPU (a heap's shared memory never spans hosts): it is
        the world size.
        """
        return self._ranks_per_device

    # -- allocation -------------------------------------------------------------------------
    def _allocate(
        self, shape: tuple[int, ...], dtype: torch.dtype, stride: tuple[int, ...] | None = None
    ) -> torch.Tensor:
        """A new block holding a ``dtype`` tensor of ``shape``: contiguous, or of ``stride`` (its block
        spans the strided extent)."""
        if self._closed:
            self._check_open()
        numel = shape[0] if len(shape) == 1 else math.prod(shape)
        if stride is not None:
            numel = extent(shape, stride)  # the elements it spans
        nbytes = numel * dtype.itemsize
        offset = self._alloc.allocate(nbytes or dtype.itemsize)  # an empty tensor still owns a block
        if offset is None:
            raise self._exhausted(nbytes, shape, dtype)
        if stride is not None:
            flat, owner = self._transport.view(self.rank, offset, nbytes or dtype.itemsize, dtype)
            t = flat.as_strided(shape, stride)
        elif numel:
            t, owner = self._transport.view(self.rank, offset, nbytes, dtype, shape)
        else:
            flat, owner = self._transport.view(self.rank, offset, dtype.itemsize, dtype)
            t = flat[:0].view(shape)
        self._blocks[offset] = _Block(weakref.ref(owner), nbytes, dtype, shape)
        self.generation += 1
        return t

    def _exhausted(self, nbytes, shape, dtype, what: str = "") -> HeapExhaustedError:
        q = self._quarantined()
        qbytes = sum(self._alloc.length(o) for o in q)
        hint = (
            f" {qbytes} bytes are held by {len(q)} tensors dropped without free(); "
            "call heap.collect() on every rank to reclaim them."
            if q
            else " Free tensors with heap.free(), or create a larger heap."
        )
        return HeapExhaustedError(
            f"cannot allocate {nbytes} bytes ({what or f'{dtype}{list(shape)}'}) on rank {self.rank}'s heap: "
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
        if t.layout != torch.strided:
            raise NotOnHeapError(f"{what}(): a {t.layout} tensor is not on the heap (heap tensors are strided)")
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
        except (AttributeError, NotImplementedError, RuntimeError):  # not a (strided) tensor: _block_of says so
            live = False
        if not live:  # the checks that explain what is wrong
            offset = self._block_of(t, "free")
            if offset not in self._blocks:
                raise DoubleFreeError(
                    f"free(): the block at heap offset {offset:#x} is not allocated; it was already freed"
                )
        del self._blocks[offset]
        self.generation += 1
        self._alloc.release(offset)

    def _quarantined(self) -> list[int]:
        return [o for o, block in self._blocks.items() if block.owner() is None]

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
        self.generation += bool(common)
        _logger.debug(
            "collect(): %d bytes in %d blocks reclaimed; %d dropped here but alive on a peer stay quarantined",
            reclaimed, len(common), len(dead[self.rank]) - len(common),
        )  # fmt: skip
        return reclaimed

    # -- queries -----------------------------------------------------------------------------
    def is_symmetric(self, t: torch.Tensor) -> bool:
        """Whether ``t`` lives in an allocated block of this heap."""
        if type(t) is torch.Tensor and t.layout is torch.strided and t.device == self.device:
            # The common case without building NotOnHeapError's message: the collectives ask this
            # of every tensor of every call, and a tensor off the heap cost 2.4 us that way.
            if self._closed:
                self._check_open()
            offset = t.untyped_storage().data_ptr() - self._base
            return 0 <= offset < self.size and offset in self._blocks
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
        for start, block in self._blocks.items():
            if start <= offset < start + max(block.nbytes, 1):
                state = "live" if block.owner() is not None else "dropped"
                return f"byte {offset - start} of the {state} {block.dtype}{list(block.shape)} allocated at offset {start:#x}"
        for res in self._reserved.values():
            if res.offset <= offset < res.offset + res.nbytes:
                return f"byte {offset - res.offset} of the library's reservation {res.name!r} at offset {res.offset:#x}"
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
            reserved_bytes=sum(self._alloc.length(r.offset) for r in self._reserved.values()),
        )

    def _table(self) -> list[tuple]:
        return [(o, self._alloc.length(o), str(b.dtype), b.shape) for o, b in sorted(self._blocks.items())]

    def check_symmetry(self) -> None:
        """Collective: raise ``AsymmetricHeapError`` unless every rank's allocation table is the same.

        The library's reservations (``reserve``) are compared too, by name, offset and size.
        """
        self._check_open()
        reserved = sorted((r.name, r.offset, r.nbytes) for r in self._reserved.values())
        tables = self._control.all_gather_object((self._table(), reserved))
        for r, (_, res) in enumerate(tables[1:], start=1):
            if res != tables[0][1]:
                raise AsymmetricHeapError(
                    f"the library's reservations differ: rank 0 has {_reservations(tables[0][1])}, rank {r} has "
                    f"{_reservations(res)}; every rank must make the same collectives and library calls "
                    "(iris.ccl.reset() on every rank rebuilds the collectives' state)"
                )
        tables = [t for t, _ in tables]
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

    # -- library state -----------------------------------------------------------------------
    def reserve(self, name: str, nbytes: int) -> torch.Tensor:
        """A block of library state (flags, workspaces, staging) outside the user's allocations.

        ``nbytes`` bytes (a uint8 tensor) taken from the top of the heap, so they never sit among
        the user's tensors, do not appear in their allocation table and are not counted as live
        allocations. Made once per ``name``: a later call with the same name returns the same
        block (and may not ask for more). Allocation is rank-local, like the user's: ranks that
        make the same reservations in the same order get the same offsets, which
        ``check_symmetry()`` verifies. The block holds zeros: memory never handed out since the
        heap was made is zero on every rank already (``reservations()[name].untouched``: peers may
        signal into it at once); reused memory is zeroed here, on this rank only.
        """
        self._check_open()
        if not isinstance(name, str) or not name:
            raise TypeError(f"reserve(): name must be a non-empty str, got {name!r}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"reserve(): nbytes must be a positive int, got {nbytes!r}")
        have = self._reserved.get(name)
        if have is not None:
            if nbytes > have.nbytes:
                raise ValueError(
                    f"reserve(): {name!r} is already reserved with {have.nbytes} bytes, {nbytes} asked; "
                    "reserve a new name for a larger block (or unreserve this one first)"
                )
            return have.tensor
        offset = self._alloc.allocate_top(nbytes)
        if offset is None:
            raise self._exhausted(nbytes, (nbytes,), torch.uint8, what=f"reservation {name!r}")
        untouched = self._alloc.last_top_untouched
        tensor, _ = self._transport.view(self.rank, offset, nbytes, torch.uint8)
        if not untouched:
            tensor.zero_()
        self._reserved[name] = Reservation(name, offset, nbytes, tensor, untouched)
        _logger.debug(
            "reserved %r: %d bytes at offset %#x (%s)", name, nbytes, offset, "untouched" if untouched else "zeroed"
        )
        return tensor

    def unreserve(self, name: str) -> None:
        """Give a reservation's block back to the heap (every rank, in the same order, as ``reserve``)."""
        self._check_open()
        have = self._reserved.pop(name, None)
        if have is None:
            raise KeyError(f"unreserve(): nothing is reserved under {name!r}; reserved: {sorted(self._reserved)}")
        self._alloc.release(have.offset)
        _logger.debug("unreserved %r: %d bytes at offset %#x", name, have.nbytes, have.offset)

    def reservations(self) -> dict[str, Reservation]:
        """Every reservation of this rank, by name."""
        return dict(self._reserved)

    # -- synchronisation and device-side errors ----------------------------------------------
    def all_gather_object(self, obj) -> list:
        """Collective (host only): every rank's ``obj``, in rank order, over the heap's own gloo group
        (the heap's ranks, whatever group it was made on; no device work, no device sync). ``obj``
        must pickle; at world size 1 the result is ``[obj]``. For what host code of a layer above
        must agree on (sizes, measurements), as ``torch.distributed.all_gather_object`` would, without
        knowing which group the heap runs on."""
        self._check_open()
        return self._control.all_gather_object(obj)

    def barrier(self) -> None:
        """Synchronize the device, then every rank; raises a device-side failure if one occurred."""
        self._check_open()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._control.barrier()
        self.check_device_errors()

    @property
    def wait_timeout(self) -> float:
        """Seconds a bounded device-side wait lasts before it gives up (by the device's clock).

        Default 60 s; the environment variable ``IRIS_WAIT_TIMEOUT`` (seconds) sets the default.
        Setting it takes effect for kernels launched afterwards, in stream order.
        """
        return self._wait_timeout

    @wait_timeout.setter
    def wait_timeout(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"wait_timeout must be a number of seconds, got {seconds!r}")
        if not 0 < seconds <= _MAX_WAIT_TIMEOUT:  # also refuses NaN
            raise ValueError(
                f"wait_timeout must be a positive number of seconds <= {_MAX_WAIT_TIMEOUT:g}, got {seconds!r}"
            )
        self._check_open()
        self.context[abi.wait_timeout_index(self.world_size)] = max(1, round(seconds * 1e9))
        self._wait_timeout = float(seconds)

    def add_error_translator(self, translate: Callable) -> None:
        """Let a layer above raise its own exceptions for its own device errors.

        ``translate(heap, error: DeviceError)`` returns an exception to raise, or None to pass.
        Translators are asked in the order they were added; the heap raises what none claims.
        """
        if not callable(translate):
            raise TypeError(f"add_error_translator() takes a callable, got {translate!r}")
        if translate not in self._translators:
            self._translators.append(translate)

    def _poll_device_error(self) -> BaseException | None:
        """The pending device error as an exception (kept pending until raised). Never syncs."""
        if self._pending is None and not self._record.pending():  # the common case, without the lock
            return None
        with self._error_lock:
            if self._pending is None:
                error = self._record.read()
                if error is not None:
                    self._pending = self._translate(error)
                    self._record.clear()
                    _logger.debug(
                        "device error read from the record: %s (detail %d, value %d, peer %d, aux %d); pending",
                        error.name, error.detail, error.value, error.peer, error.aux,
                    )  # fmt: skip
            return self._pending

    def check_device_errors(self) -> None:
        """Raise (and clear) the first failure that device code recorded. Never waits for the device.

        It reads the host-visible error record, so it reports what the device has done so far: a
        kernel still queued or running reports when it fails, to a later check (or the
        watchdog). Works after ``close()`` too, to report a kernel that was given a closed heap's
        context.
        """
        if self._pending is None and not self._record.pending():  # the common case, in one call
            return
        error = self._poll_device_error()
        if error is None:
            return
        with self._error_lock:
            self._pending = None
        # Device code stops at once while the device-side word is set; clear it in stream order
        # (after the kernels that failed) so that later launches run again.
        self.context[abi.error_code_index(self.world_size)] = abi.ERROR_NONE
        raise error

    def _translate(self, error: DeviceError) -> BaseException:
        for translate in self._translators:
            exc = translate(self, error)
            if exc is not None:
                return exc
        if error.code == abi.ERROR_WAIT_TIMEOUT:
            return WaitTimeoutError(
                f"rank {self.rank}: a device-side wait gave up after {error.aux / 1e9:.3g} s (the bound, "
                f"heap.wait_timeout, is {self.wait_timeout:g} s) on {self.describe(error.detail)}, which still "
                f"held {error.value}. The rank that should have signalled it never did: it crashed, stopped, or "
                "ran a different operation. Check that every rank runs the same sequence of operations, or "
                "raise heap.wait_timeout.",
                rank=self.rank,
                offset=error.detail,
                value=error.value,
            )
        if error.code == abi.ERROR_HEAP_CLOSED:
            return HeapClosedError(
                f"rank {self.rank}: a kernel was launched with the context of a closed heap; it reached "
                "no heap memory (every peer address was its own). Pass the context of an open heap."
            )
        return HeapError(
            f"rank {self.rank}: device code recorded error {error.name} "
            f"(detail {error.detail}, value {error.value}, peer {error.peer}, aux {error.aux})"
        )

    def watchdog(self, interval: float = 1.0, on_error: str = "raise") -> Watchdog:
        """Start a thread that polls the error record every ``interval`` seconds (never a device sync).

        On an error it logs it with the rank and the cause, then ``on_error="raise"`` marks the
        heap failed (the next Iris call on this rank raises the error) and ``"abort"`` aborts the
        process, so that a launcher such as torchrun tears the job down (as NCCL's asynchronous
        error handling does). One watchdog per heap; ``close()`` stops it; returns it (``.stop()``).
        """
        self._check_open()
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval <= 3600:
            raise ValueError(f"watchdog(): interval must be a number of seconds in (0, 3600], got {interval!r}")
        if on_error not in ("raise", "abort"):
            raise ValueError(f"watchdog(): on_error must be 'raise' or 'abort', got {on_error!r}")
        if self.watchdog_running:
            raise HeapError("watchdog(): this heap's watchdog is already running; stop it first")
        self._watchdog = Watchdog(self, float(interval), on_error)
        return self._watchdog

    @property
    def watchdog_running(self) -> bool:
        return self._watchdog is not None and self._watchdog.running

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._alloc.used}/{self.size} bytes used"
        return f"SymmetricHeap(rank={self.rank}, world_size={self.world_size}, device={self.device}, transport={self.transport_name!r}, {state})"


def _entry(e) -> str:
    offset, length, dtype, shape = e
    return f"{dtype}{list(shape)} at offset {offset:#x} ({length} bytes)"


def _reservations(entries) -> str:
    return ", ".join(f"{name!r} at {offset:#x} ({nbytes} bytes)" for name, offset, nbytes in entries) or "none"


def _env_wait_timeout() -> float:
    """``IRIS_WAIT_TIMEOUT`` (seconds), else the default; a clear error for anything else."""
    raw = os.environ.get("IRIS_WAIT_TIMEOUT")
    if raw is None or not raw.strip():
        return DEFAULT_WAIT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"IRIS_WAIT_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if not 0 < value <= _MAX_WAIT_TIMEOUT:
        raise ValueError(f"IRIS_WAIT_TIMEOUT must be in (0, {_MAX_WAIT_TIMEOUT:g}] seconds, got {raw!r}")
    return value


def _device_identity(device: torch.device) -> str:
    """A name for ``device`` that every rank on the same physical device gives alike: a GPU's UUID
    (whatever ``CUDA_VISIBLE_DEVICES`` numbers it), a CPU rank's host."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        uuid = getattr(props, "uuid", None)
        return f"cuda {uuid}" if uuid is not None else f"cuda {socket.gethostname()} {props.name} #{device.index}"
    return f"{device.type} {socket.gethostname()}"


def _placements(control: ControlGroup, device: torch.device) -> tuple[int, list[tuple[str, str, tuple]]]:
    """How many ranks name this rank's device as theirs, and every rank's (device, host, (process
    id, start time)): one exchange over the control group; every rank fails together if one
    cannot name its device."""
    try:
        pid = os.getpid()
        mine, error = (_device_identity(device), socket.gethostname(), (pid, _started(pid))), None
    except Exception as e:  # noqa: BLE001 - every rank hears of it in the exchange
        mine, error = None, e
    everyone = exchange_or_raise(control, mine, error, "iris.heap.init: naming each rank's device")
    return [d for d, _, _ in everyone].count(mine[0]), everyone


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after ``(comm)`` (state first), or None without it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), telling it from a later process
    given the same id; None where ``/proc`` does not say."""
    fields = _stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _process_ended(process: tuple[int, int | None]) -> bool:
    """Whether ``process`` (pid, start time) of this host has ended: exited, killed and not yet
    reaped by its parent (a zombie, which ``kill(pid, 0)`` still finds), or its id now another's."""
    pid, started = process
    if os.path.isdir("/proc/self"):
        fields = _stat(pid)
        return fields is None or fields[0] in ("Z", "X") or (started is not None and _started(pid) != started)
    try:  # no /proc: ask the kernel
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


#: What a CUDA failure at a launch or a synchronization says (torch's and Triton's wording alike).
_DEVICE_FAILURE = ("CUDA error", "[CUDA]", "illegal memory access", "unspecified launch failure")
