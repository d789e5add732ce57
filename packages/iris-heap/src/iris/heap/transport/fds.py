"""Handing file descriptors between ranks: every rank gives its descriptor to every peer and takes theirs.

The transports whose regions are named by descriptors (``shm``'s memory files, ``cuda-vmm``'s
exported CUDA allocations) pass them over Unix-domain sockets (``SCM_RIGHTS``) in Linux's abstract
namespace, whose names have no file and vanish with the socket; the socket names go over the
control group. Nothing here has a name in the file system, so nothing outlives the ranks.

Abstract socket names are not secret (``/proc/net/unix`` lists them), so a descriptor goes only
to a process of our own user and comes only from one (``SO_PEERCRED``): the user is the boundary,
as a file of mode 0600 would make it. The exchange is bounded by ``EXCHANGE_TIMEOUT``
(a peer that dies closes its sockets, which its peers see at once; the bound is for a peer that
is alive but stuck). A failure raises ``HeapError`` on the rank that saw it; the transport follows
the exchange with a status exchange (``exchange_or_raise``) so that every rank fails together.

Each descriptor travels with a hello, the sender's rank and region size, which the receiver
checks against what the control group said that rank would send.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import socket
import struct
import time
from typing import Callable, Sequence

from ..errors import HeapError
from ..log import get_logger

__all__ = ["EXCHANGE_TIMEOUT", "exchange", "listen"]

#: Seconds the descriptor exchange may take on one rank. Peers that got past the name exchange
#: finish it in milliseconds; a peer that dies ends it at once; this bounds a peer that is stuck.
EXCHANGE_TIMEOUT = 30.0

_HELLO = struct.Struct("<qq")  # sent with the descriptor: the sender's rank and region size
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

_logger = get_logger(__name__)


def listen(world_size: int) -> socket.socket:
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


def exchange(
    fd: int,
    listener: socket.socket | None,
    names: Sequence,
    rank: int,
    sizes: Sequence[int],
    cleanup: contextlib.ExitStack,
    *,
    what: str,
    one: str,
    valid: Callable[[int, int], bool] | None = None,
) -> dict[int, int]:
    """Hand ``fd`` to every peer and take theirs: ``{rank: descriptor}`` (``{}`` without a
    ``listener``: a rank alone, which ``listen`` was not asked for).

    ``names[r]`` is rank r's listener's name (``listen``), ``sizes[r]`` the size of the region
    rank r sends (sent and checked in the hello). ``what`` names the regions in errors
    (``"shared-memory heaps"``), ``one`` a single one after its size (``"sealed heap"``);
    ``valid(fd, size)`` checks a received descriptor further. Every socket and received
    descriptor is closed when ``cleanup`` ends: the caller uses (or duplicates) them before that.

    Every rank first connects to every peer's listener (the backlog holds the connection until
    the peer accepts it), then serves its own connections and reads its peers' answers in
    whatever order they come, so no order of arrival can deadlock. A peer that dies closes its
    listener and, with it, the connections waiting there: the wait ends at once.
    """
    if listener is None:
        return {}
    return _Exchange(rank, what, one, cleanup).run(fd, listener, names, sizes, valid)


class _Exchange:
    """One rank's side of one exchange: its deadline, and what its errors call the regions."""

    def __init__(self, rank: int, what: str, one: str, cleanup: contextlib.ExitStack):
        self.rank, self.what, self.one, self.cleanup = rank, what, one, cleanup
        self.timeout = EXCHANGE_TIMEOUT
        self.deadline = time.monotonic() + self.timeout

    def run(self, fd, listener, names, sizes, valid) -> dict[int, int]:
        rank = self.rank
        selector = self.cleanup.enter_context(selectors.DefaultSelector())
        selector.register(listener, selectors.EVENT_READ)
        for peer, name in enumerate(names):
            if peer != rank:
                selector.register(self._connect(peer, name), selectors.EVENT_READ, peer)
        hello = _HELLO.pack(rank, sizes[rank])
        unserved, received = len(names) - 1, {}
        while unserved or len(received) < len(names) - 1:
            missing = sorted(set(range(len(names))) - set(received) - {rank})
            waiting = f"heaps from ranks {missing}" if missing else f"{unserved} peers to connect"
            _logger.debug("descriptor exchange: waiting for %s", waiting)
            ready = selector.select(self._left(waiting))
            if not ready:
                raise self._timeout(waiting)
            for key, _ in ready:
                if key.data is None:  # a peer connecting to us
                    unserved -= self._serve(listener, fd, hello)
                    if not unserved:
                        selector.unregister(listener)
                else:
                    peer = key.data
                    received[peer] = self._receive(key.fileobj, peer, sizes[peer])
                    if valid is not None and not valid(received[peer], sizes[peer]):
                        raise self._impostor(peer, sizes[peer])
                    selector.unregister(key.fileobj)
        return received

    def _connect(self, peer: int, name) -> socket.socket:
        """A connection to rank ``peer``'s listener, checked to be held by our user."""
        rank = self.rank
        sock = self.cleanup.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC))
        waiting = f"rank {peer} to accept a connection"
        sock.settimeout(self._left(waiting))
        try:
            sock.connect(name)
        except TimeoutError:
            raise self._timeout(waiting) from None
        except OSError as e:
            raise HeapError(
                f"rank {rank} could not connect to rank {peer}'s socket ({e.strerror}): rank {peer} "
                "exited or was killed during iris.heap.init"
            ) from None
        if _peer_uid(sock) != os.getuid():
            raise HeapError(f"rank {rank}: rank {peer}'s socket is held by another user; not taking its heap")
        sock.setblocking(False)
        return sock

    def _serve(self, listener: socket.socket, fd: int, hello: bytes) -> int:
        """Send ``fd`` on a connection waiting at ``listener``; how many peers that served (0 or 1)."""
        try:
            conn, _ = listener.accept()
        except BlockingIOError:  # the connection went away between select and accept
            return 0
        self.cleanup.enter_context(conn)
        if _peer_uid(conn) != os.getuid():  # abstract names are visible to all: serve only our user
            conn.close()
            return 0
        waiting = "a peer to take this rank's heap"
        conn.settimeout(self._left(waiting))
        try:
            socket.send_fds(conn, [hello], [fd])
        except TimeoutError:
            raise self._timeout(waiting) from None
        except OSError as e:
            raise HeapError(
                f"rank {self.rank} could not send its heap to a peer ({e.strerror}): the peer exited or was "
                "killed during iris.heap.init"
            ) from None
        return 1

    def _receive(self, sock: socket.socket, peer: int, size: int) -> int:
        """Rank ``peer``'s descriptor, read from ``sock``, sent with the hello of a ``size``-byte region."""
        try:
            msg, fds, flags, _ = socket.recv_fds(sock, _HELLO.size, 1, socket.MSG_CMSG_CLOEXEC)
        except OSError as e:
            msg, fds, flags = b"", [], 0
            reason = e.strerror
        else:
            reason = "the connection closed"
        for received in fds:
            self.cleanup.callback(os.close, received)
        if not msg:
            raise HeapError(
                f"rank {self.rank} did not get rank {peer}'s heap ({reason}): rank {peer} exited or was killed "
                "during iris.heap.init"
            )
        if len(fds) != 1 or flags & socket.MSG_CTRUNC or msg != _HELLO.pack(peer, size):
            raise self._impostor(peer, size)
        return fds[0]

    def _impostor(self, peer: int, size: int) -> HeapError:
        return HeapError(
            f"rank {self.rank}: rank {peer}'s socket sent something other than its {size}-byte {self.one}; "
            "another process may be using its socket name"
        )

    def _left(self, waiting: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._timeout(waiting)
        return left

    def _timeout(self, waiting: str) -> HeapError:
        return HeapError(
            f"rank {self.rank} gave up exchanging {self.what} after {self.timeout:g} s, still waiting for "
            f"{waiting}. A peer is stuck (stopped, or far behind in iris.heap.init); check that every rank "
            "calls iris.heap.init"
        )


def _peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of ``sock`` (``SO_PEERCRED``)."""
    _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return uid
