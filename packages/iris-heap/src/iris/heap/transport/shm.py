"""Shared-memory transport, for CPU ranks (Triton's interpreter runs kernels on them).

Nothing this transport makes has a name, so nothing it makes can outlive the ranks, whatever
signal hits whichever rank at whatever moment. Each rank's region is an anonymous memory file
(``memfd_create``): it exists while some process holds a descriptor or a mapping of it, and the
kernel frees it when the last one goes, a killed process's included. Ranks hand each other these
descriptors over Unix-domain sockets (``SCM_RIGHTS``) in Linux's abstract namespace, whose names
have no file and vanish with the socket; the socket names go over the control group.

Why not named segments (``/dev/shm/iris-<random>``) unlinked as early as possible: a peer can
only open a name that exists, so each name exists from its creation until the last peer has
opened it, and a rank killed in that window (SIGKILL, or the SIGTERM torchrun sends when another
rank fails) leaves a full-size segment behind that nothing ever removes. No order of create,
exchange and unlink closes that window; passing descriptors has none.

The region's full size is allocated up front (``posix_fallocate``), so a heap that does not fit
fails at init with ``HeapExhaustedError``, not with SIGBUS in a kernel later. Unlike a file in
``/dev/shm``, a memory file is not bounded by a tmpfs's size: the kernel would fill memory page by
page until the OOM killer stepped in. So the size is first checked against the memory the kernel
can still give (``MemAvailable`` + ``SwapFree``, and the room under this process's cgroup limits).
The file is sealed against shrinking, so no peer can truncate it under our mapping.

The descriptors go between ranks as :mod:`.fds` hands them: only between processes of one user
(``SO_PEERCRED``), within ``EXCHANGE_TIMEOUT``, and every step that can fail on one rank is
followed by a status exchange (``exchange_or_raise``), so all ranks fail together instead of one
hanging.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os

import torch

from ..errors import HeapExhaustedError
from ..log import get_logger
from . import fds
from .base import Transport, exchange_or_raise
from .fds import EXCHANGE_TIMEOUT

__all__ = ["ShmTransport", "EXCHANGE_TIMEOUT"]

_logger = get_logger(__name__)


def _address(mm: mmap.mmap) -> int:
    anchor = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


class ShmTransport(Transport):
    name = "shm"
    device_types = ("cpu",)

    def __init__(self, size: int, device: torch.device, control) -> None:
        super().__init__(size, device, control)
        rank = control.rank
        # Every descriptor and socket made here is closed when this block ends, before the last
        # status exchange, so a peer still waiting on one of them sees it close at once.
        with contextlib.ExitStack() as cleanup:
            fd, local, listener, error = None, None, None, None
            try:
                fd = self._create(size, rank)
                cleanup.callback(os.close, fd)
                local = self._map(fd, size)
                if control.world_size > 1:
                    listener = cleanup.enter_context(fds.listen(control.world_size))
            except BaseException as e:  # reported to every rank below
                error = e
            name = listener.getsockname() if listener is not None else None
            names = exchange_or_raise(control, name, error, "creating the shared-memory heap")
            maps, error = [], None
            try:
                peers = fds.exchange(fd, listener, names, rank, [size] * len(names), cleanup,
                                     what="shared-memory heaps", one="sealed heap", valid=_sealed)  # fmt: skip
                for r in range(control.world_size):
                    maps.append(local if r == rank else self._map(peers[r], size))
            except BaseException as e:
                error = e
        exchange_or_raise(control, None, error, "exchanging shared-memory heaps")
        _logger.debug("mapped the shared-memory heaps of all %d ranks", control.world_size)
        self._maps = maps
        self._views = [memoryview(m) for m in maps]
        self.bases = [_address(m) for m in maps]

    @staticmethod
    def _create(size: int, rank: int) -> int:
        """A descriptor of an anonymous memory file of ``size`` bytes, all allocated, sealed."""
        room, where = _memory_room()
        if size > room:
            raise HeapExhaustedError(
                f"cannot reserve a {size}-byte heap in shared memory on rank {rank}: only {room} bytes "
                f"can still be allocated ({where}). Ask for a smaller heap (iris.heap.init(size=...)) "
                "or free memory.",
                requested=size,
                free=room,
                largest_free_block=room,
            )
        fd = os.memfd_create(f"iris-heap-rank{rank}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                raise HeapExhaustedError(
                    f"cannot reserve a {size}-byte heap in shared memory on rank {rank}: posix_fallocate "
                    f"failed with {e.strerror!r} ({room} bytes looked free by {where}; the file-size "
                    "limit, ulimit -f, applies too). Ask for a smaller heap (iris.heap.init(size=...)) "
                    "or free memory.",
                    requested=size,
                    free=room,
                    largest_free_block=room,
                ) from None
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        _logger.debug(
            "made memory file iris-heap-rank%d: %d bytes, sealed (%d could be given: %s)", rank, size, room, where
        )
        return fd

    @staticmethod
    def _map(fd: int, size: int) -> mmap.mmap:
        # The mapping keeps its own duplicate of the descriptor; the caller closes ``fd``.
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def view(self, rank, offset, nbytes, dtype, shape=None):
        owner = self._views[rank][offset : offset + nbytes]
        t = torch.frombuffer(owner, dtype=dtype)
        return (t if shape is None or len(shape) == 1 else t.view(shape)), owner

    def close(self) -> None:
        # Mappings stay until the last tensor over them is gone; no tensor can dangle.
        self._views = []
        self._maps = []
        _logger.debug("dropped the heap's references to the %d shared-memory mappings", len(self.bases))


def _sealed(fd: int, size: int) -> bool:
    """Whether ``fd`` is a memory file of at least ``size`` bytes that can never shrink (no SIGBUS)."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:  # not a memory file
        return False
    return bool(seals & fcntl.F_SEAL_SHRINK) and os.fstat(fd).st_size >= size


def _memory_room() -> tuple[int, str]:
    """Bytes a new memory file can still get, and where that bound comes from.

    The least of what ``/proc/meminfo`` says the system can still give (``MemAvailable`` +
    ``SwapFree``) and the room under the memory limit of this process's cgroup and each parent
    (the limit, less the usage, plus the page cache that reclaim would drop).
    """
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key in ("MemAvailable", "SwapFree"):
                info[key] = int(value.split()[0]) * 1024
    room = (sum(info.values()), "MemAvailable + SwapFree in /proc/meminfo")
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return room
    for line in lines:
        _, controllers, path = line.split(":", 2)
        version = 2 if controllers == "" else 1 if "memory" in controllers.split(",") else None
        for root in _CGROUP_ROOTS.get(version, ()):
            here = path
            while True:
                left = _cgroup_room(root + here, version)
                if left is not None and left < room[0]:
                    room = (max(left, 0), f"the memory limit of cgroup {here}")
                if here in ("/", ""):
                    break
                here = os.path.dirname(here)
    return room


_CGROUP_ROOTS = {2: ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"), 1: ("/sys/fs/cgroup/memory",)}
_CGROUP_FILES = {  # version: limit, usage, and the reclaimable page-cache counters of memory.stat
    2: ("memory.max", "memory.current", ("active_file", "inactive_file")),
    1: ("memory.limit_in_bytes", "memory.usage_in_bytes", ("total_active_file", "total_inactive_file")),
}


def _cgroup_room(directory: str, version: int) -> int | None:
    """The room under one cgroup's memory limit, or None where it has none (or it is not mounted)."""
    limit_file, usage_file, cache = _CGROUP_FILES[version]
    try:
        with open(os.path.join(directory, limit_file)) as f:
            limit = int(f.read())  # "max": no limit (ValueError)
        with open(os.path.join(directory, usage_file)) as f:
            usage = int(f.read())
        with open(os.path.join(directory, "memory.stat")) as f:
            stat = dict(line.split() for line in f)
    except (OSError, ValueError):
        return None
    return limit - usage + sum(int(stat.get(key, 0)) for key in cache)


TRANSPORT = ShmTransport
