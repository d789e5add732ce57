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

Abstract socket names are not secret (``/proc/net/unix`` lists them), so a descriptor goes only
to a process of our own user and comes only from one (``SO_PEERCRED``): the user is the boundary,
as it was for the mode-0600 files this replaces. The exchange is bounded by
``EXCHANGE_TIMEOUT`` (a peer that dies closes its sockets, which its peers see at once; the bound
is for a peer that is alive but stuck), and every step that can fail on one rank is followed by a
status exchange (``exchange_or_raise``), so all ranks fail together instead of one hanging.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import secrets
import selectors
import socket
import struct
import time

import torch

from ..errors import HeapError, HeapExhaustedError
from ..log import get_logger
from .base import Transport, exchange_or_raise

__all__ = ["ShmTransport", "EXCHANGE_TIMEOUT"]

#: Seconds the descriptor exchange may take on one rank. Peers that got past the name exchange
#: finish it in milliseconds; a peer that dies ends it at once; this bounds a peer that is stuck.
EXCHANGE_TIMEOUT = 30.0

_HELLO = struct.Struct("<qq")  # sent with the descriptor: the sender's rank and heap size
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

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
                    listener = cleanup.enter_context(self._listen(control.world_size))
            except BaseException as e:  # reported to every rank below
                error = e
            name = listener.getsockname() if listener is not None else None
            names = exchange_or_raise(control, name, error, "creating the shared-memory heap")
            maps, error = [], None
            try:
                peers = self._exchange(fd, listener, names, size, cleanup) if listener is not None else {}
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

    @staticmethod
    def _listen(world_size: int) -> socket.socket:
        """A listening socket under an unguessable abstract name, with room for every peer's connection."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            listener.bind(f"\0iris-heap-{secrets.token_hex(16)}")
            listener.listen(world_size)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        _logger.debug("listening for %d peers on an abstract socket (no file)", world_size - 1)
        return listener

    def _exchange(self, fd: int, listener: socket.socket, names: list, size: int, cleanup) -> dict[int, int]:
        """Hand our descriptor to every peer and take theirs: ``{rank: descriptor}``.

        Every rank first connects to every peer's listener (the backlog holds the connection
        until the peer accepts it), then serves its own connections and reads its peers' answers
        in whatever order they come, so no order of arrival can deadlock. A peer that dies closes
        its listener and, with it, the connections waiting there: the wait ends at once.
        """
        rank = self.control.rank
        deadline = time.monotonic() + EXCHANGE_TIMEOUT
        selector = cleanup.enter_context(selectors.DefaultSelector())
        selector.register(listener, selectors.EVENT_READ)
        for peer, name in enumerate(names):
            if peer == rank:
                continue
            sock = cleanup.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC))
            sock.settimeout(_left(deadline, rank, f"rank {peer} to accept a connection"))
            try:
                sock.connect(name)
            except TimeoutError:
                raise _timeout(rank, f"rank {peer} to accept a connection") from None
            except OSError as e:
                raise HeapError(
                    f"rank {rank} could not connect to rank {peer}'s socket ({e.strerror}): rank {peer} "
                    "exited or was killed during iris.heap.init"
                ) from None
            if _peer_uid(sock) != os.getuid():
                raise HeapError(f"rank {rank}: rank {peer}'s socket is held by another user; not taking its heap")
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, peer)
        unserved, received = len(names) - 1, {}
        while unserved or len(received) < len(names) - 1:
            missing = sorted(set(range(len(names))) - set(received) - {rank})
            waiting = f"heaps from ranks {missing}" if missing else f"{unserved} peers to connect"
            _logger.debug("descriptor exchange: waiting for %s", waiting)
            ready = selector.select(_left(deadline, rank, waiting))
            if not ready:
                raise _timeout(rank, waiting)
            for key, _ in ready:
                if key.data is None:  # a peer connecting to us
                    unserved -= self._serve(listener, fd, size, deadline, cleanup)
                    if not unserved:
                        selector.unregister(listener)
                else:
                    received[key.data] = self._receive(key.fileobj, key.data, size, cleanup)
                    selector.unregister(key.fileobj)
        return received

    def _serve(self, listener: socket.socket, fd: int, size: int, deadline: float, cleanup) -> int:
        """Send our descriptor on a connection waiting at ``listener``; how many peers that served (0 or 1)."""
        rank = self.control.rank
        try:
            conn, _ = listener.accept()
        except BlockingIOError:  # the connection went away between select and accept
            return 0
        cleanup.enter_context(conn)
        if _peer_uid(conn) != os.getuid():  # abstract names are visible to all: serve only our user
            conn.close()
            return 0
        conn.settimeout(_left(deadline, rank, "a peer to take this rank's heap"))
        try:
            socket.send_fds(conn, [_HELLO.pack(rank, size)], [fd])
        except TimeoutError:
            raise _timeout(rank, "a peer to take this rank's heap") from None
        except OSError as e:
            raise HeapError(
                f"rank {rank} could not send its heap to a peer ({e.strerror}): the peer exited or was killed "
                "during iris.heap.init"
            ) from None
        return 1

    def _receive(self, sock: socket.socket, peer: int, size: int, cleanup) -> int:
        """Rank ``peer``'s descriptor, read from ``sock``, checked to be a sealed heap of ``size`` bytes."""
        rank = self.control.rank
        try:
            msg, fds, flags, _ = socket.recv_fds(sock, _HELLO.size, 1, socket.MSG_CMSG_CLOEXEC)
        except OSError as e:
            msg, fds, flags = b"", [], 0
            reason = e.strerror
        else:
            reason = "the connection closed"
        for received in fds:
            cleanup.callback(os.close, received)
        if not msg:
            raise HeapError(
                f"rank {rank} did not get rank {peer}'s heap ({reason}): rank {peer} exited or was killed "
                "during iris.heap.init"
            )
        if len(fds) != 1 or flags & socket.MSG_CTRUNC or msg != _HELLO.pack(peer, size) or not _sealed(fds[0], size):
            raise HeapError(
                f"rank {rank}: rank {peer}'s socket sent something other than its sealed {size}-byte heap; "
                "another process may be using its socket name"
            )
        return fds[0]

    def view(self, rank, offset, nbytes, dtype, shape=None):
        owner = self._views[rank][offset : offset + nbytes]
        t = torch.frombuffer(owner, dtype=dtype)
        return (t if shape is None or len(shape) == 1 else t.view(shape)), owner

    def close(self) -> None:
        # Mappings stay until the last tensor over them is gone; no tensor can dangle.
        self._views = []
        self._maps = []
        _logger.debug("dropped the heap's references to the %d shared-memory mappings", len(self.bases))


def _left(deadline: float, rank: int, waiting: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _timeout(rank, waiting)
    return left


def _timeout(rank: int, waiting: str) -> HeapError:
    return HeapError(
        f"rank {rank} gave up exchanging shared-memory heaps after {EXCHANGE_TIMEOUT:g} s, still waiting for "
        f"{waiting}. A peer is stuck (stopped, or far behind in iris.heap.init); check that every rank "
        "calls iris.heap.init"
    )


def _peer_uid(sock: socket.socket) -> int:
    _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return uid


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
